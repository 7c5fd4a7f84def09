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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpucore", description="gpucore: a native training core for PyTorch")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    doctor = commands.add_parser("doctor", help="check devices, versions and precision; run a smoke test")
    doctor.add_argument("--device", default="auto", help="the device you will ask for: auto (default), cpu, cuda, cuda:N, mps")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument("--no-smoke-test", action="store_true", help="skip the matmul/conv smoke test")
    doctor.set_defaults(run=_doctor)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.run(args)
    except ImportError as exc:  # gpucore's native part missing or built for another torch
        print(f"gpucore: {exc}", file=sys.stderr)
        return 2
