"""Train the classifier of configs/config.yaml (the run_training.py of a classifier project). Extra key=value pairs override keys.

    python scripts/run_training.py [KEY=VALUE ...]      e.g. epochs=3 device=cpu
"""
import argparse
import os

import gpucore

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = os.path.join(HERE, "..", "configs", "config.yaml")


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="config keys to override, as gpucore train --set takes them (epochs=3, device=cpu)")
    args = parser.parse_args(argv)
    try:
        overrides = gpucore.config.parse_overrides(args.overrides)
    except gpucore.ConfigError as exc:
        parser.error(str(exc))
    result = gpucore.train(CONFIG, **overrides)
    print(f"best {result.monitor} {result.best_metric:.4f}; checkpoints in {result.checkpoint_dir}")
    return result.checkpoint_dir


if __name__ == "__main__":
    main()
