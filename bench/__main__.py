"""Runs the benchmarks side by side in one run and writes one JSON with the device, versions and date.

    python -m bench all [--device auto] [--json out.json] [--quick]
    python -m bench NAME [NAME ...] [--device auto] [--json out.json] [--quick]
    (NAME: train, ops, cam, data, fashion_mnist, transforms, augment, checkpoint, speedrun, layout, scale,
     process, profile)

--quick uses tiny sizes: a smoke test of the runner (CI runs it), not a measurement.
"""
import argparse
import datetime
import json
import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHES = {
    "train": ("train_bench.py", [], ["--batch-sizes", "64", "--train-size", "256", "--rounds", "2",
                                     "--count-steps", "2"]),
    "ops": ("ops_bench.py", [], ["--steps", "4"]),
    "cam": ("cam_bench.py", [], ["--batch", "2", "--size", "32", "--repeats", "1"]),
    "data": ("data_bench.py", [], ["--images", "64", "--size", "8", "--epochs", "2"]),
    "fashion_mnist": ("fashion_mnist_compare.py", [], ["--epochs", "1", "--train-size", "256", "--test-size", "256"]),
    "transforms": ("transforms_bench.py", [], ["--images", "16", "--size", "16", "--batch", "8"]),
    "augment": ("augment_bench.py", [], ["--images", "16", "--epochs", "2", "--batch-size", "8"]),
    "checkpoint": ("checkpoint_bench.py", [], ["--params-millions", "0.1", "--rounds", "1"]),
    "speedrun": ("speedrun_bench.py", [], ["--seeds", "0", "--epochs", "1", "--train-size", "2048",
                                           "--test-size", "500"]),
    "layout": ("layout_bench.py", [], ["--steps", "1", "--rounds", "1", "--warmup", "1", "--batch", "2",
                                       "--size", "32"]),
    "scale": ("scale_bench.py", [], ["--workloads", "resnet18_frozen", "--images", "16", "--batch-size", "8",
                                     "--min-size", "64", "--max-size", "64", "--crop", "32", "--rounds", "1"]),
    "process": ("process_bench.py", [], ["--workloads", "speedrun", "--repeats", "1", "--epochs", "1",
                                         "--train-size", "512", "--test-size", "256"]),
    "profile": ("step_profile.py", [], ["--steps", "1", "--batch-size", "2", "--size", "64"]),
}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("which", nargs="+", choices=["all", *BENCHES])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", help="write every result here")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: check the runner, measure nothing")
    args = parser.parse_args(argv)
    results = {}
    for name in (BENCHES if "all" in args.which else dict.fromkeys(args.which)):
        script, full, quick = BENCHES[name]
        print(f"\n== {name} ==")
        bench = runpy.run_path(os.path.join(HERE, script))
        results[name] = bench["main"](["--device", args.device, *(quick if args.quick else full)])
    report = {"date": datetime.date.today().isoformat(), "quick": args.quick, "results": results}
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=2)
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
