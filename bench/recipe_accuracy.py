"""Accuracy with and without a training recipe's augmentation and weight average, several seeds, side by side: the
real Fashion-MNIST (examples/configs/fashion_mnist.yaml), trained by gpucore.train as the config says ("plain") and
with a `transforms` list and an EMA of the weights on top ("recipe"), each seed the same initial weights and order
for both. Reports the test accuracy (the raw weights' for plain; the EMA's for the recipe, as its `monitor` picks)
per seed, the mean and the spread.

    python bench/recipe_accuracy.py [--epochs 3] [--seeds 0 1 2] [--json out.json]

Not a test: minutes per run on a CPU.
"""
import argparse
import os
import statistics
import sys
import tempfile

import gpucore
from gpucore.config import load_config

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import result_json  # noqa: E402

CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "configs", "fashion_mnist.yaml")
RECIPE = {
    "transforms": [{"RandomCrop": {"size": 28, "padding": 2}}, "RandomHorizontalFlip",
                   {"RandomErasing": {"p": 0.25, "scale": [0.02, 0.15]}}],
    "ema_decay": 0.999, "ema_warmup": True, "monitor": "val_ema_accuracy",
}


def test_accuracy(overrides: dict, seed: int, epochs: int) -> float:
    with tempfile.TemporaryDirectory() as run_dir:
        config = load_config(CONFIG, dict(epochs=epochs, seed=seed, run_dir=run_dir, progress=False, report=False,
                                          **overrides))
        result = gpucore.train(config)
        return result.best_metric  # the monitored test accuracy: val_accuracy, or val_ema_accuracy for the recipe


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    accuracy = {"plain": [], "recipe": []}
    for seed in args.seeds:
        for name, overrides in (("plain", {}), ("recipe", RECIPE)):
            accuracy[name].append(test_accuracy(overrides, seed, args.epochs))
            print(f"seed {seed} {name:<7} test accuracy {accuracy[name][-1]:.4f}", flush=True)
    for name, values in accuracy.items():
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        print(f"{name:<7} mean {statistics.mean(values):.4f}  sd {spread:.4f}  ({len(values)} seeds, {args.epochs} epochs)")
    return result_json({"epochs": args.epochs, "seeds": args.seeds, "recipe": RECIPE, "test_accuracy": accuracy},
                       args.json)


if __name__ == "__main__":
    main()
