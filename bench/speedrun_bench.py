"""Time to 92.5% test accuracy on the real Fashion-MNIST, side by side in one run: the speedrun recipe
(examples/configs/fashion_mnist_speedrun.yaml) trained by gpucore.train, by a plain PyTorch loop written as a careful
user would, and by PyTorch Lightning, over several seeds, interleaved (seed 0 in each trainer, then seed 1, ...).

    python -m bench speedrun [--seeds 0 1 2 3 4] [--target 0.925] [--only NAME] [--set KEY=VALUE] [--json out.json]

Each trainer first trains one untimed epoch on 2,048 images (a warm process for all three); per seed, each goes first
in turn. Per seed the three train the config's network from the same initial weights (the plain loop and Lightning
build it from torch's modules, as an independently written script would: fast_cnn's max-pool, BatchNorm and ReLU as
three layers, not gpucore's fused op) on the same uint8 images held in memory, standardised with the training set's
mean and std, in the precision and memory layout gpucore's config picks on this machine (bf16 autocast and
channels-last on a CPU with native bf16, float32 otherwise), with the config's recipe: AdamW (no decay on biases and
norm weights), the one-cycle schedule stepped per batch, label-smoothed cross-entropy, random horizontal flips. The
plain loop and Lightning draw each batch by indexing the uint8 tensor with the epoch's random permutation (no
DataLoader workers: for data already in memory they cost more than they save), use torch's fused AdamW and build no
per-sample Dataset. After each epoch, outside the clock, each model is evaluated on the 10,000 test images (the
test-time flip of config key tta included; gpucore by its own validation).

Reports per trainer: the final test accuracy (the last epoch's, never the best one) as mean, spread and minimum, the
training seconds (the epochs' steps only: reading the data, set-up and evaluation are not in it) and samples/s, and
the training seconds until the first epoch at or above --target, with how many seeds got there; then the ratios of
gpucore's time to target to the others'. --epochs, --train-size and --test-size shrink the run (the quick smoke test);
--precision 32 trains all three in float32.
"""
import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
from typing import List, Optional, Tuple

import torch
from torch import nn

import gpucore
from gpucore.config import load_config, parse_overrides
from gpucore.data.builtin import fashion_mnist, find_fashion_mnist
from gpucore.data.tensor_inputs import input_stats
from gpucore.models import build_model
from gpucore.training.engine_config import param_groups
from gpucore.device.placement import resolve_channels_last

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (device_label, import_lightning, lightning_epoch_timer, lightning_module,  # noqa: E402
                    result_json, stepped_per_batch, sync)

CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "configs",
                      "fashion_mnist_speedrun.yaml")
# What the plain loop and Lightning reproduce of the config; any other recipe key would make the comparison unfair.
REPRODUCED = {"optimizer": "adamw", "schedule": "onecycle", "loss": "cross_entropy", "crop_padding": 0,
              "transforms": [], "mixup_alpha": 0.0, "cutmix_alpha": 0.0, "ema_decay": 0.0,
              "accumulate_grad_batches": 1, "lr_scaling": "none", "clip_grad_norm": 0.0, "clip_grad_value": 0.0,
              "warmup_epochs": 0.0, "freeze": "none"}


class Recipe:
    """What every trainer shares for one seed: the config, the data, the initial weights, precision and layout."""

    def __init__(self, args, device: torch.device):
        overrides = parse_overrides(args.set)
        overrides.update({"epochs": args.epochs} if args.epochs else {})
        overrides.update({"precision": args.precision} if args.precision else {})
        self.config = load_config(args.config, overrides)
        for key, value in REPRODUCED.items():
            if getattr(self.config, key) != value:
                raise SystemExit(f"{args.config}: config key {key} is {getattr(self.config, key)!r}; this benchmark's "
                                 f"plain loop and Lightning reproduce only {key}: {value!r}")
        (self.images, self.labels), (self.test_images, self.test_labels) = fashion_mnist(
            train_size=args.train_size, val_size=args.test_size)
        mean, std = (torch.tensor(values).view(1, -1, 1, 1) for values in input_stats(self.images))
        self.mean, self.std = mean.to(device), std.to(device)
        self.device = device
        self.policy = gpucore.resolve_precision(self.config.precision, device)
        self.policy.apply()
        self.channels_last = resolve_channels_last(self.config.channels_last, device, self.new_model())
        self.seed = self.config.seed

    def new_model(self, torch_layers: bool = False) -> nn.Module:
        """The config's network. torch_layers: built from torch's modules only, as an independently written loop
        would build it (fast_cnn without gpucore's fused max-pool + BatchNorm + ReLU op; the same state_dict keys,
        so the same initial weights load)."""
        kwargs = dict(self.config.model_kwargs)
        if torch_layers and self.config.model == "fast_cnn":
            kwargs["fused"] = False
        return build_model(self.config.model, kwargs)

    def for_seed(self, seed: int) -> "Recipe":
        recipe = copy.copy(self)
        recipe.seed = seed
        torch.manual_seed(seed)
        recipe.initial = copy.deepcopy(self.new_model().state_dict())
        return recipe

    def warm_up(self) -> "Recipe":
        """One epoch on the first 2,048 images: what each trainer runs once, untimed, before the seeds (oneDNN's
        kernel creation and the allocator's first growth would otherwise land on whichever trainer runs first)."""
        recipe = self.for_seed(self.seed)
        recipe.config = load_config(self.config, {"epochs": 1})
        recipe.images, recipe.labels = self.images[:2048], self.labels[:2048]
        return recipe

    def model(self, torch_layers: bool = False) -> nn.Module:
        model = self.new_model(torch_layers)
        model.load_state_dict(self.initial)
        layout = torch.channels_last if self.channels_last else torch.preserve_format
        return model.to(self.device, memory_format=layout)

    def inputs(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 images on the device, standardised, in the recipe's layout."""
        x = (images.to(self.device, non_blocking=True).float().div_(255) - self.mean) / self.std
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x

    def autocast(self):
        dtype = self.policy.autocast_dtype
        return torch.autocast(self.device.type, dtype=dtype, enabled=dtype is not None)

    def steps_per_epoch(self) -> int:
        n, b = len(self.labels), self.config.batch_size
        return n // b if self.config.drop_last else -(-n // b)

    def batches(self, generator: torch.Generator):
        """One epoch of (inputs, targets): a random permutation, each batch gathered from the uint8 tensor, flipped
        per sample with probability 1/2 when the recipe has hflip."""
        order = torch.randperm(len(self.labels), generator=generator)
        size = self.config.batch_size
        for index in range(self.steps_per_epoch()):
            chosen = order[index * size:(index + 1) * size]
            x = self.inputs(self.images[chosen])
            if self.config.hflip:
                flip = (torch.rand(len(chosen), generator=generator) < 0.5).to(self.device).view(-1, 1, 1, 1)
                x = torch.where(flip, x.flip(3), x)
            yield x, self.labels[chosen].to(self.device)

    def optimizer(self, model: nn.Module):
        c = self.config
        groups = [{"params": g.params, "weight_decay": g.weight_decay, "lr": c.lr * g.lr_scale}
                  for g in param_groups(model, c)]
        optimizer = torch.optim.AdamW(groups, lr=c.lr, betas=tuple(c.betas), eps=c.eps, fused=True)
        schedule = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=[g["lr"] for g in groups], total_steps=c.epochs * self.steps_per_epoch(),
            pct_start=c.pct_start, div_factor=c.div_factor, final_div_factor=c.final_div_factor, cycle_momentum=False)
        return optimizer, schedule

    def loss(self, outputs, targets):
        return nn.functional.cross_entropy(outputs, targets, label_smoothing=self.config.label_smoothing)

    @torch.no_grad()
    def test_accuracy(self, model: nn.Module) -> float:
        """Accuracy on the test images, averaged with the mirror's outputs under tta: hflip."""
        model.to(self.device).eval()  # Lightning hands its model back on the CPU
        correct, size = 0, self.config.eval_batch_size
        for start in range(0, len(self.test_labels), size):
            x = self.inputs(self.test_images[start:start + size])
            with self.autocast():
                logits = model(x).float()
                if self.config.tta == "hflip":
                    logits = (logits + model(x.flip(3)).float()) / 2
            correct += int((logits.argmax(1).cpu() == self.test_labels[start:start + size]).sum())
        model.train()
        return correct / len(self.test_labels)


# Each trainer returns the trained model and per epoch (training seconds, test accuracy).
Curve = List[Tuple[float, float]]


def train_gpucore(r: Recipe) -> Tuple[nn.Module, Curve]:
    with tempfile.TemporaryDirectory() as run_dir:
        result = gpucore.train(r.config, model=r.model(), train_data=(r.images, r.labels),
                               val_data=(r.test_images, r.test_labels), seed=r.seed, device=str(r.device),
                               run_dir=run_dir, progress=False, report=False, loggers=[])
    return result.model, [(row["epoch_time_s"], row["val_accuracy"]) for row in result.history]


def train_plain(r: Recipe) -> Tuple[nn.Module, Curve]:
    model = r.model(torch_layers=True)
    optimizer, schedule = r.optimizer(model)
    generator = torch.Generator().manual_seed(r.seed)
    curve = []
    for _ in range(r.config.epochs):
        model.train()
        start = time.perf_counter()
        for x, y in r.batches(generator):
            with r.autocast():
                loss = r.loss(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
        sync(r.device)
        seconds = time.perf_counter() - start
        curve.append((seconds, r.test_accuracy(model)))
    return model, curve


def train_lightning(r: Recipe) -> Optional[Tuple[nn.Module, Curve]]:
    """None when lightning is not installed."""
    L = import_lightning()
    if L is None:
        return None
    generator = torch.Generator().manual_seed(r.seed)

    class Batches(torch.utils.data.IterableDataset):  # whole batches from memory, as the plain loop draws them
        def __iter__(self):
            return r.batches(generator)

        def __len__(self):
            return r.steps_per_epoch()

    accuracy = []

    class TestAfterEpoch(L.Callback):  # after the timer's stop: outside the clock
        def on_train_epoch_end(self, trainer, module):
            accuracy.append(r.test_accuracy(module.net))

    module = lightning_module(L, r.model(torch_layers=True), lambda net, batch: r.loss(net(batch[0]), batch[1]),
                              lambda net: stepped_per_batch(*r.optimizer(net)))
    timer = lightning_epoch_timer(L, r.device)
    precision = {"bf16-mixed": "bf16-mixed", "16-mixed": "16-mixed"}.get(r.policy.precision, "32-true")
    trainer = L.Trainer(max_epochs=r.config.epochs, accelerator="gpu" if r.device.type == "cuda" else r.device.type,
                        devices=1, precision=precision, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[timer, TestAfterEpoch()])
    trainer.fit(module, torch.utils.data.DataLoader(Batches(), batch_size=None))
    return module.net, list(zip(timer.times, accuracy))


TRAINERS = {"gpucore.train": train_gpucore, "PyTorch loop": train_plain, "PyTorch Lightning": train_lightning}


def seconds_to(curve: Curve, target: float) -> Optional[float]:
    """Training seconds until the end of the first epoch at or above `target` (None: never)."""
    elapsed = 0.0
    for seconds, accuracy in curve:
        elapsed += seconds
        if accuracy >= target:
            return elapsed
    return None


def summary(runs: List[dict], target: float) -> dict:
    final = [run["curve"][-1][1] for run in runs]
    seconds = [sum(s for s, _ in run["curve"]) for run in runs]
    reached = [run["seconds_to_target"] for run in runs if run["seconds_to_target"] is not None]
    spread = lambda values: statistics.stdev(values) if len(values) > 1 else 0.0  # noqa: E731
    return {"final_accuracy_mean": statistics.mean(final), "final_accuracy_std": spread(final),
            "final_accuracy_min": min(final), "training_seconds_mean": statistics.mean(seconds),
            "samples_per_s_mean": statistics.mean(run["samples_per_s"] for run in runs),
            "seeds_reaching_target": len(reached), "seeds": len(runs),
            "seconds_to_target_mean": statistics.mean(reached) if reached else None,
            "seconds_to_target_max": max(reached) if reached else None}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--config", default=CONFIG)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--target", type=float, default=0.925)
    parser.add_argument("--epochs", type=int, help="default: the config's")
    parser.add_argument("--precision", choices=["auto", "32"], help="default: the config's (32: float32 for all three, "
                        "e.g. with ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 to time an AVX2-only CPU's kernels)")
    parser.add_argument("--train-size", type=int, help="the first N training images (default: all 60,000)")
    parser.add_argument("--test-size", type=int, help="the first N test images (default: all 10,000)")
    parser.add_argument("--only", action="append", choices=list(TRAINERS), help="train only these (repeatable)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config key on top of --config (e.g. cuda_graphs=true, which only gpucore.train has); "
                        "recipe keys the other trainers do not reproduce are refused")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)

    device = gpucore.select_device(args.device).device
    recipe = Recipe(args, device)
    names = []
    for name in args.only or TRAINERS:
        if TRAINERS[name](recipe.warm_up()) is None:
            print(f"{name}: not installed, left out", flush=True)
        else:
            names.append(name)
    runs = {name: [] for name in names}
    for index, seed in enumerate(args.seeds):
        seeded = recipe.for_seed(seed)
        for name in names[index % len(names):] + names[:index % len(names)]:  # each trainer first in turn
            model, curve = TRAINERS[name](seeded)
            seconds = sum(s for s, _ in curve)
            run = {"seed": seed, "curve": curve, "seconds_to_target": seconds_to(curve, args.target),
                   "samples_per_s": len(recipe.labels) * len(curve) / seconds,
                   "final_accuracy_checked": seeded.test_accuracy(model)}  # the bench's own evaluation of the last
            runs[name].append(run)
            print(f"seed {seed} {name}: " + " ".join(f"{100 * a:.2f}" for _, a in curve)
                  + f" % per epoch; {seconds:.1f} s training, {run['samples_per_s']:.0f} samples/s; "
                  f"{args.target:.1%} after {run['seconds_to_target'] or float('nan'):.1f} s", flush=True)
    results = {name: summary(values, args.target) for name, values in runs.items()}
    data = find_fashion_mnist() or "the synthetic stand-in (Fashion-MNIST's files were not found)"
    print(f"\n{device_label(device)}, precision {recipe.policy.precision}"
          f"{' + channels-last' if recipe.channels_last else ''}, torch {torch.__version__}; {args.config}: "
          f"{recipe.config.model} {recipe.config.model_kwargs}, {recipe.config.epochs} epochs, batch "
          f"{recipe.config.batch_size}, gpucore's cuda_graphs {recipe.config.cuda_graphs}; {len(recipe.labels)} training and {len(recipe.test_labels)} test images from "
          f"{data}; seeds {args.seeds}")
    width = max(len(name) for name in results) + 2
    print(f"{'trainer':<{width}}{'final accuracy %':>24}{'train s':>9}{'samples/s':>11}"
          f"{f'to {args.target:.1%}: s':>16}{'seeds':>7}{'ratio':>8}")
    reference = results.get("gpucore.train", {}).get("seconds_to_target_mean")
    for name, r in results.items():
        to_target = r["seconds_to_target_mean"]
        ratio = to_target / reference if reference and to_target else float("nan")
        r["time_to_target_ratio"] = ratio  # this trainer's seconds to target over gpucore's: >1 is gpucore faster
        accuracy = (f"{100 * r['final_accuracy_mean']:.2f} ± {100 * r['final_accuracy_std']:.2f} "
                    f"(min {100 * r['final_accuracy_min']:.2f})")
        print(f"{name:<{width}}{accuracy:>24}{r['training_seconds_mean']:>9.1f}{r['samples_per_s_mean']:>11.0f}"
              f"{to_target or float('nan'):>16.1f}{r['seeds_reaching_target']:>4}/{r['seeds']}{ratio:>7.2f}x")
    return result_json({"device": device_label(device), "precision": recipe.policy.precision,
                        "channels_last": recipe.channels_last, "config": os.path.abspath(args.config),
                        "recipe": recipe.config.to_dict(), "target": args.target, "seeds": args.seeds, "data": data,
                        "train_size": len(recipe.labels), "test_size": len(recipe.test_labels),
                        "trainers": results, "runs": runs}, args.json)


if __name__ == "__main__":
    main()
