"""Whether `gpucore train` stopped by a signal mid-epoch on a GPU resumes bitwise (scripts/gpu/verify.sh's `resume`
step), and, where it does not, whether the stop is to blame:

    python scripts/gpu/resume_bitwise.py [--device cuda] [--moments 6] [--seed 0] [--model fast_cnn]

Each run is its own `gpucore train` process, as a user's stop and restart are (cuDNN's autotuner chooses its
algorithms anew in each process). For `deterministic: false` (the default) and `true`, with `cuda_graphs: true`:
1. the run twice, uninterrupted: are two runs of the same config bitwise equal at all?
2. SIGTERM, SIGUSR1 and SIGINT in turn at `--moments` random moments (a random delay after the first step checkpoint),
   each stopped run resumed with `--resume auto`: equal to the first uninterrupted run?
Prints one line per run (the tensors that differ and the largest difference) and a summary per setting; exit status 1
if a `deterministic: true` run differs, or a stop did not end as an interrupted run.
"""
import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import torch

STEPS_PER_EPOCH = 400


def run_args(model: str, deterministic: bool, device: str) -> list[str]:
    values = {"data": "synthetic_fashion", "data_kwargs": f"{{train_size: {64 * STEPS_PER_EPOCH}, val_size: 256, seed: 3}}",
              "model": model, "epochs": 2, "batch_size": 64, "progress": "false", "report": "false", "loggers": "[]",
              "checkpoint_every_n_steps": 50, "seed": 5, "device": device, "cuda_graphs": "true",
              "deterministic": str(deterministic).lower()}
    return [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]


def start(args: list[str], run_dir: str, name: str, *extra: str) -> subprocess.Popen:
    # SIGINT's default disposition in the child, whatever the caller's (a background job starts with it ignored).
    return subprocess.Popen([sys.executable, "-m", "gpucore", "train", *args, "--set", f"run_dir={run_dir}",
                             "--set", f"name={name}", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def finish(process: subprocess.Popen, what: str) -> int:
    _, stderr = process.communicate(timeout=600)
    if process.returncode not in (0, 130, 128 + signal.SIGTERM, 128 + signal.SIGUSR1):
        print(f"{what}: exit {process.returncode}\n{stderr[-3000:]}", flush=True)
    return process.returncode


def weights(run_dir: str, name: str) -> dict:
    return torch.load(os.path.join(run_dir, name, "checkpoints", "last.pt"), map_location="cpu",
                      weights_only=False)["model"]


def difference(a: dict, b: dict) -> str:
    """'equal', or how many tensors differ, the first few by name, and the largest absolute difference."""
    differing = [key for key in a if not torch.equal(a[key], b[key])]
    if not differing:
        return "equal"
    largest = max((a[key].double() - b[key].double()).abs().max().item() for key in differing)
    return f"{len(differing)}/{len(a)} tensors differ ({', '.join(differing[:4])}...), largest {largest:.3g}"


def uninterrupted(args: list[str], run_dir: str, name: str) -> dict:
    finish(start(args, run_dir, name), name)
    return weights(run_dir, name)


def stopped_and_resumed(args: list[str], run_dir: str, name: str, signum: int, delay: float) -> tuple[str, dict]:
    process = start(args, run_dir, name)
    step_checkpoint = os.path.join(run_dir, name, "checkpoints", "step.pt")
    deadline = time.monotonic() + 300
    while not os.path.exists(step_checkpoint) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(delay)
    if process.poll() is not None:
        finish(process, name)
        return "ended before the signal", {}
    process.send_signal(signum)
    code = finish(process, name)
    if code != 128 + signum and not (signum == signal.SIGINT and code == 130):
        return f"exit {code} after {signal.Signals(signum).name}", {}
    finish(start(args, run_dir, name, "--resume", "auto"), name + " resumed")
    return "stopped", weights(run_dir, name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--moments", type=int, default=6, help="stops per setting, the signals in turn")
    parser.add_argument("--seed", type=int, default=0, help="the random moments' seed")
    parser.add_argument("--model", default="fast_cnn")
    parser.add_argument("--jobs", type=int, default=6, help="runs at once")
    options = parser.parse_args(argv)
    rng = random.Random(options.seed)
    signals = [signal.SIGTERM, signal.SIGUSR1, signal.SIGINT]
    failed = False
    with tempfile.TemporaryDirectory() as root, ThreadPoolExecutor(options.jobs) as pool:
        for deterministic in (False, True):
            args = run_args(options.model, deterministic, options.device)
            folder = os.path.join(root, f"deterministic_{deterministic}")
            straight = [pool.submit(uninterrupted, args, folder, f"straight{index}") for index in range(2)]
            stops = [(signals[index % 3], rng.uniform(0.0, 0.5)) for index in range(options.moments)]
            resumed = [pool.submit(stopped_and_resumed, args, folder, f"stop{index}", signum, delay)
                       for index, (signum, delay) in enumerate(stops)]
            reference = straight[0].result()
            second = difference(straight[1].result(), reference)
            print(f"deterministic {deterministic}: the second uninterrupted run against the first: {second}", flush=True)
            equal = 0
            for index, ((signum, delay), future) in enumerate(zip(stops, resumed)):
                outcome, state = future.result()
                found = difference(state, reference) if state else outcome
                equal += found == "equal"
                print(f"deterministic {deterministic}: {signal.Signals(signum).name} {delay:.2f} s after the first step "
                      f"checkpoint, resumed against uninterrupted: {found}", flush=True)
                # A run that ended before its signal is reported, not failed: the moment was past the run's end.
                failed |= outcome not in ("stopped", "ended before the signal") or (deterministic and found != "equal")
            failed |= deterministic and second != "equal"
            print(f"deterministic {deterministic}: {equal} of {len(stops)} resumed runs bitwise equal; "
                  f"two uninterrupted runs {'equal' if second == 'equal' else 'differ'}", flush=True)
    print("resume bitwise:", "FAILED" if failed else "ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
