"""The speedrun's cold wall time: `gpucore train` on the speedrun config from a fresh process, start to exit, and
where that time went.

    python scripts/gpu/cold_speedrun.py [--config examples/configs/fashion_mnist_speedrun.yaml] [--runs 3]
                                        [--set KEY=VALUE ...]

Each run starts a new Python process (`python -m gpucore train CONFIG --set ...`), timed from before the fork to
its exit, so imports, CUDA's initialisation, reading the IDX files, the warm-up and capture steps, validation and
the report are all inside it. training_stats.json's `seconds` (setup: data and model; training: the epochs' steps;
validation; report) splits the part gpucore measures; the rest ("start-up") is interpreter start, imports, CUDA
context creation and writing the run's files. Runs with and without the report (--set report=false is added to
every second run). Prints one line per run, then the median of each.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CONFIG = os.path.join(ROOT, "examples", "configs", "fashion_mnist_speedrun.yaml")
PARTS = ("setup", "training", "validation", "report")


def one_run(config: str, sets: list, run_dir: str) -> dict:
    command = [sys.executable, "-m", "gpucore", "train", config, "--set", f"run_dir={run_dir}", "--set", "name=cold",
               "--set", "progress=false"]
    for pair in sets:
        command += ["--set", pair]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    with open(os.path.join(run_dir, "cold", "training_stats.json")) as handle:
        stats = json.load(handle)
    seconds = {part: stats["seconds"].get(part) or 0.0 for part in PARTS}
    seconds["start-up"] = wall - sum(seconds.values())
    return {"wall": wall, "seconds": seconds, "val_accuracy": stats["epochs"][-1]["val_accuracy"],
            "cuda_graphs": stats.get("cuda_graphs"), "device": stats["device"],
            "precision": stats["precision"]["precision"]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=CONFIG)
    parser.add_argument("--runs", type=int, default=3, help="runs with the report and as many without")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    results = {"with report": [], "report=false": []}
    for index in range(2 * args.runs):
        kind = "with report" if index % 2 == 0 else "report=false"
        sets = args.set + (["report=false"] if kind == "report=false" else [])
        with tempfile.TemporaryDirectory() as run_dir:
            run = one_run(args.config, sets, run_dir)
        results[kind].append(run)
        print(f"{kind:<13} wall {run['wall']:6.2f} s  " + "  ".join(f"{k} {v:.2f}" for k, v in run["seconds"].items())
              + f"  val_accuracy {100 * run['val_accuracy']:.2f}%  {run['device']} {run['precision']}"
              f"  cuda_graphs {run['cuda_graphs']}", flush=True)
    for kind, runs in results.items():
        median = {part: statistics.median(r["seconds"][part] for r in runs) for part in runs[0]["seconds"]}
        print(f"median, {kind}: wall {statistics.median(r['wall'] for r in runs):.2f} s; "
              + ", ".join(f"{k} {v:.2f} s" for k, v in median.items()))


if __name__ == "__main__":
    main()
