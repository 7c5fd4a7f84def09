"""Top-level ATen (and gpucore) ops per optimizer step, counted by torch.profiler: gpucore.train against a plain PyTorch
loop (fused AdamW, cosine schedule) over the same data in memory.

    python bench/ops_bench.py [--device cpu] [--steps 40] [--batch-size 64] [--top-k 5] [--set key=value]
                              [--json out.json]

Each loop runs one epoch of `steps` and one of 2 x `steps` optimizer steps (float32, guide 003's
Fashion-MNIST CNN, data normalised in memory, cosine schedule); what both epochs share (building the
model, the epoch's order, the end-of-epoch record) cancels in the difference, which is divided by `steps`.
An op (aten:: or gpucore::) is top-level when no other op encloses it (the ops autograd runs count, each under its
autograd node). Prints both counts and, op by op, where they differ; then what config key ema_decay adds (gpucore.train
with ema_decay 0.999). On a GPU every op is also a kernel launch or more, and what a CUDA graph would replay.
"""
import argparse
import collections
import os
import sys
import tempfile

import torch
from torch import nn

import gpucore
from gpucore.config import parse_overrides
from gpucore.data.synthetic import synthetic_fashion
from gpucore.data.tensor_inputs import input_stats
from gpucore.models import FashionMnistCNN

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import device_label, result_json, sync  # noqa: E402


OPS = ("aten::", "gpucore::")


def top_level_ops(run) -> collections.Counter:
    """The aten:: and gpucore:: ops `run()` issues that no other such op encloses, by name."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities) as profile:
        run()
    counts = collections.Counter()
    for event in profile.events():
        if not event.name.startswith(OPS):
            continue
        parent = event.cpu_parent
        while parent is not None and not parent.name.startswith(OPS):
            parent = parent.cpu_parent
        if parent is None:
            counts[event.name] += 1
    return counts


def per_step(run, steps: int) -> collections.Counter:
    """Ops per optimizer step of `run(steps)`: (ops of 2 x steps - ops of steps) / steps, by name. A first run that
    compiles (torch.compile) does ops of its own that the longer run then skips, a negative count (-253 ops per step
    for the reduce-overhead row on an H200): then both are counted again, warm."""
    for _ in range(2):
        short, long = top_level_ops(lambda: run(steps)), top_level_ops(lambda: run(2 * steps))
        counts = collections.Counter({name: (long[name] - short[name]) / steps for name in long | short
                                      if long[name] != short[name]})
        if all(count >= 0 for count in counts.values()):
            break
    return counts


def plain_loop(x, y, device, batch_size, lr, top_k):
    """A plain PyTorch loop, written for speed: data on the device, fused AdamW, CosineAnnealingLR, no metrics."""
    def run(steps):
        torch.manual_seed(0)
        model = FashionMnistCNN().to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, fused=True)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
        order = torch.randperm(x.shape[0], device=device)
        for step in range(steps):
            index = order[step * batch_size:(step + 1) * batch_size]
            loss = nn.functional.cross_entropy(model(x[index]), y[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
        sync(device)
    return run


def gpucore_loop(x, y, device, batch_size, lr, top_k, overrides=None):
    """gpucore.train for one epoch of `steps` (no validation, no mid-epoch host reads), config keys `overrides` set."""
    def run(steps):
        with tempfile.TemporaryDirectory() as run_dir:
            gpucore.train(dict(dict(epochs=1, batch_size=batch_size, lr=lr, device=str(device), run_dir=run_dir,
                               progress=False, schedule="cosine", weight_decay=0.0, normalize=False, seed=0,
                               precision="32", channels_last="false", top_k=top_k, val_fraction=0.0,
                               log_every_n_steps=10**6, report=False, cuda_graphs=False),  # the eager step's ops
                          **(overrides or {})),
                          train_data=(x[:steps * batch_size], y[:steps * batch_size]))
    return run


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config key for gpucore.train (e.g. mixup_alpha=0.8); the plain loop stays as it is")
    parser.add_argument("--json", help="write the counts here")
    args = parser.parse_args(argv)

    device = gpucore.select_device(args.device).device
    (images, labels), _ = synthetic_fashion(train_size=2 * args.steps * args.batch_size, val_size=1)
    mean, std = input_stats(images)
    x = ((images.float() / 255 - mean[0]) / std[0]).to(device)
    y = labels.to(device)
    overrides = parse_overrides(args.set)
    counts = {name: per_step(make(x, y, device, args.batch_size, 1e-3, args.top_k), args.steps)
              for name, make in (("gpucore.train", lambda *a: gpucore_loop(*a, overrides=overrides)),
                                 ("plain loop", plain_loop))}
    totals = {name: sum(count.values()) for name, count in counts.items()}
    print(f"top-level ATen and gpucore ops per optimizer step; device: {device_label(device)}, torch {torch.__version__}, "
          f"float32, batch {args.batch_size}, cosine schedule, top-{args.top_k} metric, data in memory"
          + "".join(f", {key}={value}" for key, value in overrides.items()))
    for name, total in totals.items():
        print(f"  {name:<14}{total:6.1f}")
    print(f"  {'difference':<14}{totals['gpucore.train'] - totals['plain loop']:+6.1f}")
    gpucore_ops, plain_ops = counts["gpucore.train"], counts["plain loop"]
    difference = {name: gpucore_ops[name] - plain_ops[name] for name in gpucore_ops | plain_ops
                  if gpucore_ops[name] != plain_ops[name]}
    print("per op (gpucore - plain):")
    for name, delta in sorted(difference.items(), key=lambda item: (-abs(item[1]), item[0])):
        print(f"  {name:<44}{delta:+6.2f}   ({gpucore_ops[name]:.2f} vs {plain_ops[name]:.2f})")
    with_ema = per_step(gpucore_loop(x, y, device, args.batch_size, 1e-3, args.top_k,
                                      overrides={**overrides, "ema_decay": 0.999}), args.steps)
    ema_ops = {name: with_ema[name] - gpucore_ops[name] for name in with_ema | gpucore_ops
               if with_ema[name] != gpucore_ops[name]}
    print(f"ema_decay 0.999 adds {sum(ema_ops.values()):+.2f} ops per step: "
          + ", ".join(f"{name} {delta:+.2f}" for name, delta in sorted(ema_ops.items())))
    return result_json({"device": device_label(device), "batch_size": args.batch_size, "steps": args.steps,
                        "top_k": args.top_k, "overrides": overrides, "ops_per_step": totals, "difference_by_op": difference,
                        "ema_adds": ema_ops,
                        "per_op": {name: dict(count) for name, count in counts.items()}}, args.json)


if __name__ == "__main__":
    main()
