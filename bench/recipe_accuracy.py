"""Accuracy with and without a training recipe's augmentation and weight average, several seeds, side by side, on
one of two tasks:

- fashion_mnist: the real Fashion-MNIST (examples/configs/fashion_mnist.yaml), trained by gpucore.train as the config
  says ("plain") and with recipes on top: a `transforms` list and an EMA of the weights, which `monitor` picks, and
  each half alone.
- captcha: guide 002's recogniser of examples/captcha/captcha_train.py (CTC, the `captcha` package's images, random
  crops of 6 pixels) as the example ships it ("plain") and with a recipe for text images on top (small affine
  warps and brightness/contrast jitter, no flips, and an EMA). The images are generated once from --data-seed and
  cached in --cache-dir, so every seed and recipe trains on the same images.

Per seed, every recipe starts from the same initial weights and data order as plain (config key `seed`); the seeds
differ in both and in the augmentation's draws. Reports the monitored held-out accuracy (the EMA's where a recipe has
one, else the raw weights'; whole-captcha accuracy for captcha), the best over the epochs, per seed, with the raw
weights' best beside an EMA's and each run's wall time, then the mean and the spread.

    python bench/recipe_accuracy.py --task fashion_mnist [--epochs 10] [--seeds 0 1 2] [--json out.json]
    python bench/recipe_accuracy.py --task captcha [--epochs 3] [--train-size 16000] [--seeds 0 1 2]

--threads sets torch's intra-op threads (the default keeps torch's). Not a test: minutes per run on a CPU.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

import gpucore
from gpucore.config import load_config

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "examples", "captcha"))
from common import result_json  # noqa: E402
import captcha_train  # noqa: E402

FASHION_CONFIG = os.path.join(HERE, "..", "examples", "configs", "fashion_mnist.yaml")


def _ema(monitor: str) -> dict:
    return {"ema_decay": 0.999, "ema_warmup": True, "monitor": monitor}


CROP_FLIP = [{"RandomCrop": {"size": 28, "padding": 2}}, "RandomHorizontalFlip"]
RECIPES = {  # per task: recipe name -> config keys on top of plain's
    "fashion_mnist": {
        "plain": {},
        "crop+flip+ema": {"transforms": CROP_FLIP, **_ema("val_ema_accuracy")},
        "crop+flip": {"transforms": CROP_FLIP},  # its two halves apart
        "ema": _ema("val_ema_accuracy"),
        "crop+flip+erasing+ema": {"transforms": CROP_FLIP + [{"RandomErasing": {"p": 0.25, "scale": [0.02, 0.15]}}],
                                  **_ema("val_ema_accuracy")},
    },
    "captcha": {  # the example's own crop_padding 6 stays in front of the list
        "plain": {},
        "affine+jitter+ema": {"transforms": [{"RandomAffine": {"degrees": 5, "scale": [0.9, 1.1], "shear": 5}},
                                             {"ColorJitter": {"brightness": 0.3, "contrast": 0.3}}],
                              **_ema("val_ema_seq_accuracy")},
    },
}
DEFAULT_EPOCHS = {"fashion_mnist": 10, "captcha": 3}


def train(task: str, overrides: dict, seed: int, args, run_dir: str) -> gpucore.TrainResult:
    """One run of `task` with config keys `overrides` on top of plain's."""
    quiet = dict(epochs=args.epochs, seed=seed, run_dir=run_dir, progress=False, report=False, **overrides)
    if task == "fashion_mnist":
        return gpucore.train(load_config(FASHION_CONFIG, quiet))
    example = captcha_train.arguments().parse_args(
        ["--train-size", str(args.train_size), "--val-size", str(args.val_size), "--data-seed", str(args.data_seed),
         "--cache-dir", args.cache_dir, "--seed", str(seed), "--dir", run_dir])
    return captcha_train.train_captcha(example, captcha_train.captcha_data(example), quiet)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(RECIPES), default="fashion_mnist")
    parser.add_argument("--epochs", type=int, help=f"default: {DEFAULT_EPOCHS}")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--recipes", nargs="+", help="which of the task's recipes to run (default: all)")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--train-size", type=int, default=16000, help="captcha: training images")
    parser.add_argument("--val-size", type=int, default=2000, help="captcha: held-out images")
    parser.add_argument("--data-seed", type=int, default=0, help="captcha: seed of the generated images")
    parser.add_argument("--cache-dir", default="~/.cache/gpucore/captcha", help="captcha: where the images are kept")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    args.epochs = args.epochs or DEFAULT_EPOCHS[args.task]
    unknown = set(args.recipes or ()) - set(RECIPES[args.task])
    if unknown:
        parser.error(f"--recipes: {args.task} has {', '.join(RECIPES[args.task])}, not {', '.join(sorted(unknown))}")
    recipes = {name: RECIPES[args.task][name] for name in (args.recipes or RECIPES[args.task])}
    if args.threads:
        torch.set_num_threads(args.threads)
    accuracy = {name: [] for name in recipes}
    raw_accuracy = {name: [] for name in recipes}
    seconds = {name: [] for name in recipes}
    for seed in args.seeds:
        for name, overrides in recipes.items():
            with tempfile.TemporaryDirectory() as run_dir:
                start = time.perf_counter()
                result = train(args.task, overrides, seed, args, run_dir)
                seconds[name].append(round(time.perf_counter() - start, 1))
            accuracy[name].append(result.best_metric)  # the monitored one: the raw weights' or the EMA's
            raw = result.monitor.replace("val_ema_", "val_")  # the raw weights' beside an EMA's, for the record
            raw_accuracy[name].append(max(epoch[raw] for epoch in result.history))
            print(f"seed {seed} {name:<22} held-out accuracy {accuracy[name][-1]:.4f} (best of {len(result.history)} "
                  f"epochs, {result.monitor}; last epoch {result.history[-1][result.monitor]:.4f}; raw weights' best "
                  f"{raw_accuracy[name][-1]:.4f}) {seconds[name][-1]:.0f} s on {result.device} ({result.precision})",
                  flush=True)
    for name, values in accuracy.items():
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        print(f"{name:<22} mean {statistics.mean(values):.4f}  sd {spread:.4f}  ({len(values)} seeds, "
              f"{args.epochs} epochs, {statistics.mean(seconds[name]):.0f} s per run)")
    sizes = {"train_size": args.train_size, "val_size": args.val_size, "data_seed": args.data_seed} \
        if args.task == "captcha" else {}
    return result_json({"task": args.task, "epochs": args.epochs, "seeds": args.seeds,
                        "threads": torch.get_num_threads(), **sizes, "recipes": recipes,
                        "held_out_accuracy": accuracy, "raw_weights_accuracy": raw_accuracy, "seconds": seconds},
                       args.json)


if __name__ == "__main__":
    main()
