"""The `gpucore` command line."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence


def _doctor(args: argparse.Namespace) -> int:
    from .doctor import doctor, format_report

    report = doctor(args.device, smoke_test=not args.no_smoke_test)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(format_report(report))
    return 0 if report["ok"] else 1


def _train(args: argparse.Namespace) -> int:
    from .config import load_config, parse_overrides
    from .train import train

    overrides = parse_overrides(args.set or [])
    if args.resume is not None:
        overrides["resume"] = args.resume
    config = load_config(args.config, overrides)
    result = train(config)
    summary = {
        "status": result.status, "best_metric": result.best_metric, "best_epoch": result.best_epoch,
        "monitor": result.monitor, "run_dir": result.run_dir, "device": result.device,
        "precision": result.precision, "samples_per_second": round(result.samples_per_second, 1),
        "steps": result.steps, "skipped_steps": result.skipped_steps,
    }
    print(json.dumps(summary, indent=2))
    if result.status == "interrupted":
        print(f"interrupted: resume with  gpucore train {args.config or ''} --resume auto".replace("  ", " "),
              file=sys.stderr)
        return 130
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpucore", description="gpucore: a native training core for PyTorch")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    doctor = commands.add_parser("doctor", help="check devices, versions and precision; run a smoke test")
    doctor.add_argument("--device", default="auto", help="the device you will ask for: auto (default), cpu, cuda, cuda:N, mps")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument("--no-smoke-test", action="store_true", help="skip the matmul/conv smoke test")
    doctor.set_defaults(run=_doctor)

    train = commands.add_parser("train", help="train a model from a config file (default: the built-in config)")
    train.add_argument("config", nargs="?", default=None, help="a .yaml/.yml/.json config; omitted: the built-in defaults")
    train.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key (repeatable)")
    train.add_argument("--resume", metavar="auto|PATH", help="continue from the run's last checkpoint or from PATH")
    train.set_defaults(run=_train)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    from . import _C

    try:
        return args.run(args)
    except (_C.ConfigError, _C.DeviceUnavailableError, NotImplementedError) as exc:
        print(f"gpucore: error: {exc}", file=sys.stderr)
        return 2
    except _C.TrainingError as exc:
        print(f"gpucore: training failed: {exc}", file=sys.stderr)
        return 1
