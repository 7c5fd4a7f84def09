"""Random SIGKILLs during short training runs: nothing on disk may be lost, torn or left behind.

    python tests/trials/kill_runs.py --trials 100 [--seed 0] [--step-checkpoints N] [--epochs 3] [--train-size 1536]

Each trial starts `gpucore train` (CPU, checkpoints every epoch, with --step-checkpoints also every N
optimizer steps mid-epoch, resume: auto), kills it with SIGKILL
at a random moment, and starts it again until a run completes (killing it again at random, up to
--kills times). Then it checks: every checkpoint file loads; the run stayed in one run directory; no
temporary file is left; metrics.jsonl holds each epoch once and agrees with training_stats.json; the
final weights are bitwise those of an uninterrupted run. Prints a summary; exit status 1 on any failure.

Each run is one process on one core, so --concurrent trials (2) run at once; the uninterrupted runs that measure a
run's length (and must agree bitwise) run as many at once, under the same load.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import forked_python  # noqa: E402  (the runs start forked from a process that imported torch: seconds each)

EPOCHS = 3
CONFIG = {"epochs": EPOCHS, "device": "cpu", "progress": False, "resume": "auto", "name": "killed",
          "save_every_n_epochs": 1, "keep_last_k": 2, "batch_size": 64,
          "data": "synthetic_fashion", "data_kwargs": {"train_size": 1536, "val_size": 256, "seed": 5}}


def run_once(run_dir: str, kill_after: float | None, config: dict = CONFIG) -> int:
    """One `gpucore train`; with kill_after, SIGKILLed after that many seconds unless it ended first."""
    config_path = os.path.join(run_dir, "config.json")
    with open(config_path, "w") as handle:
        json.dump(dict(config, run_dir=run_dir), handle)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    process = forked_python.Popen([sys.executable, "-m", "gpucore", "train", config_path], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, env=env)
    if kill_after is None:
        _, err = process.communicate(timeout=600)
        if process.returncode != 0:
            raise RuntimeError(f"gpucore train failed: {err.decode()[-2000:]}")
        return process.returncode
    try:
        process.wait(timeout=kill_after)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        process.wait()
    return process.returncode


def final_weights(run_dir: str) -> dict:
    import torch

    return torch.load(os.path.join(run_dir, "killed", "checkpoints", "last.pt"), weights_only=True)["model"]


def first_difference(weights: dict, reference: dict) -> str | None:
    """The name of the first tensor of `reference` that `weights` does not hold bitwise, or None."""
    import torch

    return next((name for name, tensor in reference.items() if not torch.equal(weights[name], tensor)), None)


def check_run(run_dir: str, reference: dict, epochs: int = EPOCHS) -> list:
    """What is wrong with a finished run in run_dir (empty: nothing)."""
    import torch

    problems = []
    entries = sorted(os.listdir(run_dir))
    if [e for e in entries if e.startswith("killed")] != ["killed"]:
        problems.append(f"more than one run directory: {entries}")
    run = os.path.join(run_dir, "killed")
    for folder, _, files in os.walk(run):
        for name in files:
            path = os.path.join(folder, name)
            if ".tmp-" in name:
                problems.append(f"temporary file left: {path}")
            elif name.endswith(".pt"):
                try:
                    torch.load(path, weights_only=True)
                except Exception as exc:  # any failure to load is what this test is for
                    problems.append(f"unloadable checkpoint {path}: {exc}")
    rows = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    if [row["epoch"] for row in rows] != list(range(1, epochs + 1)):
        problems.append(f"metrics.jsonl epochs {[row['epoch'] for row in rows]}")
    stats = json.load(open(os.path.join(run, "training_stats.json")))
    if stats["status"] != "completed" or [r["epoch"] for r in stats["epochs"]] != list(range(1, epochs + 1)):
        problems.append(f"training_stats.json: status {stats['status']}, epochs {[r['epoch'] for r in stats['epochs']]}")
    differing = first_difference(final_weights(run_dir), reference)
    if differing is not None:
        problems.append(f"final weights differ from the uninterrupted run in {differing}")
    return problems


def trial(workdir: str, reference: dict, rng: random.Random, max_kills: int, longest: float,
          config: dict = CONFIG, tally: dict | None = None) -> list:
    """Kills and restarts one run until it completes; what is wrong with it then. `tally` counts the kills and
    those that landed while a checkpoint was being written (a temporary file left behind)."""
    tally = {} if tally is None else tally
    for _ in range(max_kills):
        kill_after = rng.uniform(0.0, longest)
        print(f"{os.path.basename(workdir)}: SIGKILL after {kill_after:.2f} s ({kill_after / longest:.0%} of a run)")
        if run_once(workdir, kill_after, config) == 0:
            break
        checkpoints = os.path.join(workdir, "killed", "checkpoints")
        torn = os.path.isdir(checkpoints) and any(".tmp-" in name for name in os.listdir(checkpoints))
        tally["kills"] = tally.get("kills", 0) + 1
        tally["during_a_write"] = tally.get("during_a_write", 0) + int(torn)
    else:
        run_once(workdir, None, config)
    if not os.path.exists(os.path.join(workdir, "killed", "training_stats.json")) or \
            json.load(open(os.path.join(workdir, "killed", "training_stats.json")))["status"] != "completed":
        run_once(workdir, None, config)
    return check_run(workdir, reference, config["epochs"])


def reference(scratch: str, config: dict = CONFIG, concurrent: int = 2) -> tuple[dict, float]:
    """`concurrent` uninterrupted runs at once, as the trials run: their final weights (bitwise equal, or an error)
    and how long a run may take (the slowest, plus a tenth), measured under the trials' own load."""
    folders = [os.path.join(scratch, f"reference{index}") for index in range(concurrent)]
    for folder in folders:
        os.makedirs(folder)
    start = time.monotonic()
    with ThreadPoolExecutor(concurrent) as pool:
        list(pool.map(lambda folder: run_once(folder, None, config), folders))
    longest = (time.monotonic() - start) * 1.1  # kills land anywhere in a whole run, start-up included
    weights = [final_weights(folder) for folder in folders]
    for other in weights[1:]:
        differing = first_difference(other, weights[0])
        if differing is not None:
            raise RuntimeError(f"two uninterrupted runs started together differ in {differing}")
    return weights[0], longest


def run_trials(scratch: str, weights: dict, seed: int, count: int, max_kills: int, longest: float,
               config: dict = CONFIG, concurrent: int = 2) -> tuple[list, dict]:
    """`count` trials, `concurrent` at a time (each run is one process on one core): what is wrong with each, and
    the kills tallied. Each trial draws its kill moments from a generator of its own, seeded from `seed`, so a seed
    gives the same moments however the trials interleave."""
    generators = [random.Random(f"{seed}/{index}") for index in range(count)]
    tallies = [{} for _ in range(count)]

    def one(index):
        workdir = os.path.join(scratch, f"trial{index}")
        os.makedirs(workdir)
        return trial(workdir, weights, generators[index], max_kills, longest, config, tallies[index])

    with ThreadPoolExecutor(concurrent) as pool:
        problems = list(pool.map(one, range(count)))
    tally = {key: sum(counts.get(key, 0) for counts in tallies) for key in ("kills", "during_a_write")}
    return problems, tally


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--kills", type=int, default=3, help="most kills per trial before a run may finish")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step-checkpoints", type=int, default=0, metavar="N",
                        help="also checkpoint every N optimizer steps mid-epoch (config key checkpoint_every_n_steps)")
    parser.add_argument("--concurrent", type=int, default=2, help="trials run at once (each run takes one core)")
    parser.add_argument("--epochs", type=int, default=EPOCHS, help="each run's epochs")
    parser.add_argument("--train-size", type=int, default=CONFIG["data_kwargs"]["train_size"],
                        help="each run's training samples (synthetic_fashion)")
    args = parser.parse_args(argv)
    config = dict(CONFIG, checkpoint_every_n_steps=args.step_checkpoints, epochs=args.epochs,
                  data_kwargs=dict(CONFIG["data_kwargs"], train_size=args.train_size))
    with tempfile.TemporaryDirectory() as scratch:
        weights, longest = reference(scratch, config, args.concurrent)
        problems, tally = run_trials(scratch, weights, args.seed, args.trials, args.kills, longest, config,
                                     args.concurrent)
    for index, found in enumerate(problems):
        for problem in found:
            print(f"trial {index}: {problem}")
    failures = sum(bool(found) for found in problems)
    print(f"{args.trials} trials ({tally['kills']} kills, {tally['during_a_write']} of them during a "
          f"checkpoint write), {failures} with problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
