"""Train the classifier of configs/config.yaml (the run_training.py of a classifier project). Extra key=value pairs override keys."""
import os
import sys

import gpucore

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = os.path.join(HERE, "..", "configs", "config.yaml")


def main(argv=None) -> str:
    overrides = gpucore.config.parse_overrides(argv if argv is not None else sys.argv[1:])
    result = gpucore.train(CONFIG, **overrides)
    print(f"best {result.monitor} {result.best_metric:.4f}; checkpoints in {result.checkpoint_dir}")
    return result.checkpoint_dir


if __name__ == "__main__":
    main()
