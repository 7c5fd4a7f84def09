"""Runs the benchmarks side by side in one run and writes one JSON with the device, versions and date.

    python -m bench all [--device auto] [--json out.json] [--quick]
    python -m bench NAME [NAME ...] [--device auto] [--json out.json] [--quick]
    python -m bench NAME [that bench's own options, e.g. speedrun --seeds 0 1 --precision 32]
    (NAME: train, ops, cam, data, fashion_mnist, transforms, augment, checkpoint, speedrun, layout, scale,
     process, profile, cslr)

--quick uses tiny sizes and, in some benches, fewer rows: a smoke test of the runner (CI runs it), not a measurement.
"""
import argparse
import datetime
import json
import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHES = {
    "train": ("train_bench.py", [], ["--batch-sizes", "64", "--train-size", "64", "--rounds", "2",
                                     "--count-steps", "1"]),
    "ops": ("ops_bench.py", [], ["--steps", "1", "--batch-size", "8"]),
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
                                         "--train-size", "512", "--test-size", "256",
                                         "--settings", "shipped", "plain"]),
    "profile": ("step_profile.py", [], ["--steps", "1", "--batch-size", "2", "--size", "64", "--block-rounds", "1",
                                        "--block-batch", "8"]),
    "cslr": ("cslr_bench.py", [], ["--train-size", "8", "--dev-size", "4", "--source", "32", "--out", "16",
                                   "--epochs", "1", "--repeats", "1", "--clips", "1", "--frames", "4",
                                   "--sources", "1080p", "--batch", "1"]),
}


def main(argv=None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    which = []
    while argv and (argv[0] in BENCHES or argv[0] == "all"):
        which.append(argv.pop(0))
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0], add_help=False,
                                     usage="python -m bench {all,NAME} [NAME ...] [--device D] [--json F] [--quick] "
                                           "[one bench's own options]")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", help="write every result here")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: check the runner, measure nothing")
    parser.add_argument("-h", "--help", action="store_true")
    args, own = parser.parse_known_args(argv)
    names = list(BENCHES) if "all" in which else list(dict.fromkeys(which))
    if not names:
        if args.help:
            parser.print_help()
            print(f"\nNAME: {', '.join(BENCHES)}; `python -m bench NAME --help` lists that bench's own options")
            raise SystemExit(0)
        parser.error(f"name the benchmarks to run: all, or some of {', '.join(BENCHES)}"
                     + (f" (got {argv[0]!r})" if argv else ""))
    if (own or args.help) and len(names) != 1:
        parser.error(f"a bench's own options ({' '.join(own) or '--help'}) go to one bench, not to {len(names)}: "
                     f"run `python -m bench NAME {' '.join(own) or '--help'}` for one of {', '.join(names)}")
    results = {}
    for name in names:
        script, full, quick = BENCHES[name]
        print(f"\n== {name} ==")
        bench = runpy.run_path(os.path.join(HERE, script))
        # The bench's own options come last: argparse keeps an option's last value, so they win over the defaults.
        results[name] = bench["main"](["--device", args.device, *(quick if args.quick else full), *own,
                                       *(["--help"] if args.help else [])])
    report = {"date": datetime.date.today().isoformat(), "quick": args.quick, "results": results}
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=2)
    return report


if __name__ == "__main__":
    main()
