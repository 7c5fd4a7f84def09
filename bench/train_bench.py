"""Training throughput, side by side in one run: gpucore.train vs a seed-style PyTorch loop vs a
hand-optimised PyTorch loop, same model (the seeds' Fashion-MNIST CNN), data, batch size and epochs.

    python bench/train_bench.py [--device auto] [--epochs 3] [--train-size 12000] [--batch-size 64] [--repeats 3]
                                [--json out.json]

Reports samples/s of the training epochs after the first (warm-up), the median over interleaved rounds
(a noisy, launch-bound GPU run swings by 1.5x from one round to the next), and ratios to gpucore. Not a
test: run it on purpose and quote the numbers with the device.
"""
import argparse
import os
import sys
import tempfile
import time

import torch
from torch import nn

import gpucore
from gpucore.data.builtin import synthetic_fashion
from gpucore.data.tensor_inputs import input_stats
from gpucore.models import FashionMnistCNN

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import device_label, import_lightning, lightning_epoch_timer, report, sync  # noqa: E402


def seed_style(x, y, device, policy, epochs, batch_size, lr):
    """The loop the seeds' scripts wrote: DataLoader, .to(device) per batch, autocast + GradScaler, loss.item()."""
    torch.manual_seed(0)
    model = FashionMnistCNN().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch_size, shuffle=True,
                                         pin_memory=device.type == "cuda")
    scaler = torch.amp.GradScaler(device.type, enabled=policy.loss_scaling)
    times = []
    for _ in range(epochs):
        model.train()
        start = time.perf_counter()
        total = 0.0
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            optimizer.zero_grad()
            with torch.autocast(device.type, dtype=policy.autocast_dtype, enabled=policy.autocast_dtype is not None):
                loss = nn.functional.cross_entropy(model(images), labels)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            total += loss.item()
        sync(device)
        times.append(time.perf_counter() - start)
    return times


def hand_optimised(x, y, device, policy, epochs, batch_size, lr):
    """Data on the device, a permutation per epoch, fused AdamW, loss summed on the device, one sync per epoch."""
    torch.manual_seed(0)
    model = FashionMnistCNN().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)
    x, y = x.to(device), y.to(device)
    scaler = torch.amp.GradScaler(device.type, enabled=policy.loss_scaling)
    times = []
    for _ in range(epochs):
        model.train()
        start = time.perf_counter()
        order = torch.randperm(x.shape[0], device=device)
        total = torch.zeros((), device=device)
        for begin in range(0, x.shape[0], batch_size):
            index = order[begin:begin + batch_size]
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=policy.autocast_dtype, enabled=policy.autocast_dtype is not None):
                loss = nn.functional.cross_entropy(model(x[index]), y[index])
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            total += loss.detach()
        total.item()
        sync(device)
        times.append(time.perf_counter() - start)
    return times


def lightning_loop(x, y, device, policy, epochs, batch_size, lr):
    """PyTorch Lightning as its users write it: a LightningModule, a DataLoader, Trainer.fit. None if not installed."""
    L = import_lightning()
    if L is None:
        return None

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = FashionMnistCNN()

        def training_step(self, batch, _):
            images, labels = batch
            return nn.functional.cross_entropy(self.net(images), labels)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=lr, weight_decay=0.0)

    timer = lightning_epoch_timer(L, device)
    precision = {"bf16-mixed": "bf16-mixed", "16-mixed": "16-mixed"}.get(policy.precision, "32-true")
    trainer = L.Trainer(max_epochs=epochs, accelerator="gpu" if device.type == "cuda" else device.type, devices=1,
                        precision=precision, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[timer])
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch_size, shuffle=True,
                                         pin_memory=device.type == "cuda")
    trainer.fit(Module(), loader)
    return timer.times


def gpucore_train(x, y, device, epochs, batch_size, lr, compile=False):
    with tempfile.TemporaryDirectory() as run_dir:
        result = gpucore.train(
            dict(epochs=epochs, batch_size=batch_size, lr=lr, device=str(device), run_dir=run_dir, progress=False,
                 schedule="constant", weight_decay=0.0, normalize=False, seed=0, compile=compile),
            train_data=(x, y),
        )
    return [row["epoch_time_s"] for row in result.history]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--train-size", type=int, default=12000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds; the median is reported")
    parser.add_argument("--compile", action="store_true", help="also gpucore.train with compile: true")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)

    device = gpucore.select_device(args.device).device
    policy = gpucore.resolve_precision("auto", device)
    policy.apply()
    (images, labels), _ = synthetic_fashion(train_size=args.train_size, val_size=1)
    mean, std = input_stats(images)  # one channel
    x = (images.float() / 255 - mean[0]) / std[0]
    loops = {
        "gpucore.train": lambda: gpucore_train(x, labels, device, args.epochs, args.batch_size, args.lr),
        "seed-style loop": lambda: seed_style(x, labels, device, policy, args.epochs, args.batch_size, args.lr),
        "hand-optimised loop": lambda: hand_optimised(x, labels, device, policy, args.epochs, args.batch_size,
                                                      args.lr),
        "PyTorch Lightning": lambda: lightning_loop(x, labels, device, policy, args.epochs, args.batch_size, args.lr),
    }
    if policy.precision != "32":  # what reduced precision gains over the plain float32 loop
        float32 = gpucore.resolve_precision("32", device)
        loops["float32 loop"] = lambda: hand_optimised(x, labels, device, float32, args.epochs, args.batch_size,
                                                       args.lr)
    if args.compile:
        loops["gpucore.train, compile"] = lambda: gpucore_train(x, labels, device, args.epochs, args.batch_size,
                                                                 args.lr, compile=True)
    samples = args.train_size * max(args.epochs - 1, 1)
    rates = {name: [] for name in loops}
    first_epoch = {name: [] for name in loops}  # the warm-up epoch: torch.compile's compile time shows here
    for _ in range(args.repeats):
        for name, loop in loops.items():
            times = loop()
            if times is not None:  # None: Lightning is not installed
                rates[name].append(samples / (sum(times[1:]) if len(times) > 1 else times[0]))
                first_epoch[name].append(times[0])
    rate = {name: sorted(values)[len(values) // 2] for name, values in rates.items() if values}
    first_epoch_s = {name: sorted(values)[len(values) // 2] for name, values in first_epoch.items() if values}
    title = (f"device: {device_label(device)}, precision {policy.precision}, torch {torch.__version__}, "
             f"batch {args.batch_size}")
    return report(title, "samples/s", rate, "gpucore.train",
                  {"device": device_label(device), "precision": policy.precision, "batch_size": args.batch_size,
                   "train_size": args.train_size, "epochs_timed": max(args.epochs - 1, 1), "repeats": args.repeats,
                   "every_round": rates, "first_epoch_s": first_epoch_s}, args.json)


if __name__ == "__main__":
    main()
