"""Runs checkpointed by N gloo processes, stopped mid-epoch, resumed by M: every sample of the epoch trained.

    python tests/trials/world_size_resumes.py [--pairs 2:1 1:2 2:3 3:2] [--stops 4 7 11]

Each case runs test_step_checkpoints.py's worker (a step checkpoint every 3 steps, stopped after step STOP of
epoch 1) with N processes, then resumes it with M. It checks that epoch 1's samples trained up to the checkpoint
plus those trained after the resume cover the data, with no sample twice beyond the padding of M equal shards
(fewer than M), that epoch 2 covers the data at M, and that the step count ends at 2 epochs of M's steps.
Prints a line per case and a summary; exit status 1 on any failure. Slow: two process groups per case."""
from __future__ import annotations

import argparse
import collections
import json
import math
import os
import pathlib
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_step_checkpoints import BATCH, SAMPLES, WORKER, _attempt  # noqa: E402

EVERY = 3  # the worker's checkpoint_every_n_steps


def steps_per_epoch(processes: int) -> int:
    return math.ceil(math.ceil(SAMPLES / processes) / BATCH)


def check(before: int, after: int, stop: int, folder: pathlib.Path) -> list:
    script = folder / "worker.py"
    script.write_text(WORKER)
    out = folder / "out"
    first, _ = _attempt(script, out, "first", before, stop_step=stop)
    second, _ = _attempt(script, out, "second", after, stop_step=-1)
    # The newest step checkpoint: the last multiple of EVERY up to the stop, but none at an epoch's last step.
    checkpointed = (stop // EVERY) * EVERY
    if checkpointed == steps_per_epoch(before):
        checkpointed -= EVERY
    kept = [sample for rank in first for index, (epoch, sample) in enumerate(rank["trained"])
            if epoch == 0 and index < checkpointed * BATCH]
    resumed = [sample for rank in second for epoch, sample in rank["trained"] if epoch == 0]
    problems = []
    counts = collections.Counter(kept + resumed)
    if set(counts) != set(range(SAMPLES)):
        problems.append(f"epoch 1 missed {len(set(range(SAMPLES)) - set(counts))} samples")
    extra = sum(count - 1 for count in counts.values())
    if extra >= after:
        problems.append(f"epoch 1 trained {extra} samples twice (padding allows fewer than {after})")
    later = collections.Counter(sample for rank in second for epoch, sample in rank["trained"] if epoch == 1)
    if set(later) != set(range(SAMPLES)) or sum(later.values()) - SAMPLES >= after:
        problems.append("epoch 2 does not cover the data once")
    stats = json.load(open(out / "run" / "training_stats.json"))
    if abs(stats["steps"] - 2 * steps_per_epoch(after)) > 1:
        problems.append(f"{stats['steps']} steps, expected 2 x {steps_per_epoch(after)} (one more or less)")
    if stats["resume"]["world_size"] != before or stats["status"] != "completed":
        problems.append(f"resume {stats['resume']}, status {stats['status']}")
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", nargs="+", default=["2:1", "1:2", "2:3", "3:2"])
    parser.add_argument("--stops", nargs="+", type=int, default=[4, 7, 11])
    args = parser.parse_args(argv)
    failures = cases = 0
    with tempfile.TemporaryDirectory() as scratch:
        for pair in args.pairs:
            before, after = (int(part) for part in pair.split(":"))
            for stop in args.stops:
                folder = pathlib.Path(scratch) / f"{before}to{after}_stop{stop}"
                folder.mkdir()
                problems = check(before, after, stop, folder)
                cases += 1
                failures += bool(problems)
                print(f"{before} -> {after} processes, stopped after step {stop}: "
                      f"{'; '.join(problems) if problems else 'ok'}", flush=True)
    print(f"{cases} resumes across world sizes, {failures} with problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
