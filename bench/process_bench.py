"""Process-wide settings measured as they must be: each run in its own fresh process, the settings alternating in
order, repeated. gpucore.train as it ships (malloc tuned by gpucore.process_settings), gpucore.train with that
turned off (GPUCORE_MALLOC_TUNING=0), gpucore.train with one intra-op thread (OMP_NUM_THREADS=1: the other core
left to the reader threads; the 224-px workload), gpucore.train with tcmalloc preloaded (where it is installed),
and the careful plain loop as a user writes it (no process settings), also with glibc's malloc tuned by
GLIBC_TUNABLES to the same values (what the setting is worth to any loop).

    python -m bench process [--workloads speedrun scale] [--repeats 5] [--settings plain shipped ...]
                            [--markdown table.md] [--json out.json]

Workloads: speedrun: the speedrun recipe (bench/speedrun_bench.py's trainers, cold: no warm-up epoch) for --epochs
on the first --train-size Fashion-MNIST images; scale: ResNet-18 with a frozen backbone at --crop px from
bench/scale_data.py's photo folder (bench/scale_bench.py's gpucore streamed and DataLoader-fed loop). Reported per
setting: the training seconds (the epochs' own clock: reading the data and set-up are not in it) as the median over
the repeats with the 10th-90th percentiles, the first epoch's and the later epochs' seconds, the process's peak RSS,
and the ratio of the plain loop's training seconds to the setting's (above 1: faster than the plain loop).
--settings runs some of the settings (by the short names of SETTINGS; the plain loop always).
"""
import argparse
import ctypes.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import cpu_description, result_json  # noqa: E402
from train_bench import percentile  # noqa: E402

TUNABLES = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824:glibc.malloc.top_pad=268435456"
PLAIN = "plain loop, no process settings"
# --settings' short names: the rows' names
SETTINGS = {"shipped": "gpucore.train as shipped (malloc tuned)",
            "no-malloc-tuning": "gpucore.train, GPUCORE_MALLOC_TUNING=0",
            "plain": PLAIN,
            "plain-tunables": "plain loop + GLIBC_TUNABLES (same values)",
            "one-thread": "gpucore.train, 1 intra-op thread",
            "tcmalloc": "gpucore.train + tcmalloc (LD_PRELOAD)"}


def tcmalloc() -> str:
    """The path of an installed tcmalloc, or ''."""
    for name in ("tcmalloc_minimal", "tcmalloc"):
        found = ctypes.util.find_library(name)
        if found:
            return found
    return ""


def settings(workload: str, wanted) -> dict:
    """name: (trainer, environment changes) of the settings named in `wanted` (SETTINGS' short names) that apply to
    `workload`; None as a value removes the variable."""
    gpucore_trainer = "gpucore" if workload == "speedrun" else "gpucore streamed"
    plain_trainer = "plain" if workload == "speedrun" else "DataLoader + plain loop"
    chosen = {
        "shipped": (gpucore_trainer, {}),
        "no-malloc-tuning": (gpucore_trainer, {"GPUCORE_MALLOC_TUNING": "0"}),
        "plain": (plain_trainer, {}),
        "plain-tunables": (plain_trainer, {"GLIBC_TUNABLES": TUNABLES}),
    }
    if workload == "scale":
        chosen["one-thread"] = (gpucore_trainer, {"OMP_NUM_THREADS": "1"})
    if tcmalloc():
        chosen["tcmalloc"] = (gpucore_trainer, {"LD_PRELOAD": tcmalloc()})
    return {SETTINGS[key]: value for key, value in chosen.items() if key in wanted}


def child(args) -> dict:
    """One training run in this process: per epoch seconds, and the process's peak RSS."""
    import torch

    import gpucore

    if args.workload == "speedrun":
        import speedrun_bench

        recipe = speedrun_bench.Recipe(types.SimpleNamespace(
            config=speedrun_bench.CONFIG, set=[], epochs=args.epochs, precision=None, train_size=args.train_size,
            test_size=args.test_size), gpucore.select_device("auto").device).for_seed(0)
        train = speedrun_bench.train_gpucore if args.trainer == "gpucore" else speedrun_bench.train_plain
        _, curve = train(recipe)
        seconds, accuracy = [s for s, _ in curve], curve[-1][1]
    else:
        import scale_bench
        from scale_data import make_photos

        scale_bench.import_torchvision()
        root = make_photos(args.images, 0, args.size, args.size, cache_dir=args.cache_dir)
        namespace = types.SimpleNamespace(crop=args.crop, epochs=args.epochs, batch_size=args.batch_size,
                                          min_size=args.size, max_size=args.size)
        workload = scale_bench.Workload("resnet18_frozen", namespace, gpucore.select_device("auto").device,
                                        os.path.join(root, "train")).for_round(0)
        curve = scale_bench.TRAINERS[args.trainer](workload)
        seconds, accuracy = [s for s, _, _ in curve], None
    return {"epoch_s": seconds, "final_accuracy": accuracy, "threads": torch.get_num_threads(),
            "process_settings": gpucore.process_settings.process_settings(),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_setting(args, workload, trainer, environment) -> dict:
    env = dict(os.environ)
    for key, value in environment.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [sys.executable, os.path.abspath(__file__), "--child", "--workload", workload, "--trainer", trainer,
                   "--out", out.name, *(f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
                                        if k in ("epochs", "train_size", "test_size", "images", "size", "crop",
                                                 "batch_size", "cache_dir"))]
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
        with open(out.name) as handle:
            return json.load(handle)


def measure(args, workload) -> dict:
    chosen = settings(workload, args.settings)
    names = list(chosen)
    runs = {name: [] for name in names}
    for index in range(args.repeats):
        for name in names[index % len(names):] + names[:index % len(names)]:  # each setting first in turn
            run = run_setting(args, workload, *chosen[name])
            runs[name].append(run)
            print(f"{workload} repeat {index + 1} {name}: " + ", ".join(f"{s:.1f}" for s in run["epoch_s"])
                  + f" s per epoch, peak RSS {run['peak_rss_mb']:.0f} MB", flush=True)
    rows = {}
    for name, values in runs.items():
        total = [sum(v["epoch_s"]) for v in values]
        rows[name] = {"trainer": chosen[name][0], "environment": chosen[name][1],
                      "training_s": statistics.median(total), "p10": percentile(total, 0.1),
                      "p90": percentile(total, 0.9), "first_epoch_s": statistics.median(v["epoch_s"][0] for v in values),
                      "later_epochs_s": statistics.median(sum(v["epoch_s"][1:]) for v in values) if args.epochs > 1
                      else None, "peak_rss_mb": statistics.median(v["peak_rss_mb"] for v in values), "runs": values}
    for row in rows.values():
        row["plain_loop_over_this"] = rows[PLAIN]["training_s"] / row["training_s"]
    return rows


def markdown(results, header) -> str:
    lines = [header, "", "| workload | setting | training s (p10-p90) | first epoch s | later epochs s | peak RSS MB "
             "| plain loop's time / this |", "|---|---|---|---|---|---|---|"]
    for workload, rows in results["workloads"].items():
        for name, r in rows.items():
            later = "" if r["later_epochs_s"] is None else f"{r['later_epochs_s']:.1f}"
            lines.append(f"| {workload} | {name} | {r['training_s']:.1f} ({r['p10']:.1f}-{r['p90']:.1f}) | "
                         f"{r['first_epoch_s']:.1f} | {later} | {r['peak_rss_mb']:.0f} | "
                         f"{r['plain_loop_over_this']:.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="the children train on `auto`'s device")
    parser.add_argument("--workloads", nargs="+", choices=["speedrun", "scale"], default=["speedrun", "scale"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS),
                        help="the settings to run (default: every one that applies; the plain loop always runs)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--train-size", type=int, default=20000, help="speedrun: training images")
    parser.add_argument("--test-size", type=int, default=1000, help="speedrun: test images")
    parser.add_argument("--images", type=int, default=128, help="scale: photos")
    parser.add_argument("--size", type=int, default=256, help="scale: the photos' sides")
    parser.add_argument("--crop", type=int, default=224, help="scale: RandomResizedCrop's size")
    parser.add_argument("--batch-size", type=int, default=32, help="scale: batch size")
    parser.add_argument("--cache-dir", default=os.path.join(os.path.expanduser("~/.cache"), "gpucore", "bench"))
    parser.add_argument("--markdown")
    parser.add_argument("--json")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--workload", help=argparse.SUPPRESS)
    parser.add_argument("--trainer", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.settings = {"plain", *args.settings}  # every row's ratio is to the plain loop
    if args.child:
        with open(args.out, "w") as handle:
            json.dump(child(args), handle)
        return None
    results = {"repeats": args.repeats, "epochs": args.epochs, "tcmalloc": tcmalloc() or None,
               "workloads": {workload: measure(args, workload) for workload in args.workloads}}
    result = result_json(results, args.json)
    described = {"speedrun": f"speedrun: {args.epochs} epochs on {args.train_size} images",
                 "scale": f"scale: ResNet-18 frozen backbone, {args.images} photos of {args.size} px, crop {args.crop}, "
                          f"batch {args.batch_size}, {args.epochs} epochs"}
    header = (f"CPU {cpu_description()}, {os.cpu_count()} cores, torch {result['torch']}, {result['date']}; each "
              f"run in its own process, settings alternating in order, {args.repeats} repeats; "
              + "; ".join(described[w] for w in args.workloads))
    table = markdown(results, header)
    print("\n" + table)
    if args.markdown:
        with open(args.markdown, "w") as handle:
            handle.write(table)
    return result


if __name__ == "__main__":
    main()
