"""Accuracy and speed on the real Fashion-MNIST, side by side in one run: guide 003's Fashion-MNIST CNN trained by
gpucore.train with its default config, by a plain PyTorch loop and by PyTorch Lightning, with the same initial
weights, seed, data, normalisation, epochs, batch size, optimizer (AdamW, gpucore's defaults: lr 1e-3, weight decay
0.01 except on biases and norm weights, cosine schedule per step) and precision.

    python bench/fashion_mnist_compare.py [--epochs 10] [--batch-size 64] [--precision auto|32] [--only NAME]
                                          [--json out.json]

--precision auto (the default) is what gpucore's default config picks on the device; where that is bf16-mixed with
channels-last (a bf16 CPU), the PyTorch loop and Lightning get the same bf16 autocast and channels-last layout.
--precision 32 runs all three in float32. All three are evaluated by the same function on the 10,000 test images.
Reports test accuracy, training samples/s (the training epochs' time, no evaluation in it) with ratios to the first
trainer, and the process's CPU seconds for each training call (its set-up included; loading the data and the test
pass not). --only runs some of them, e.g. one per process on a shared machine.
"""
import argparse
import copy
import os
import sys
import tempfile
import time

import torch
from torch import nn

import gpucore
from gpucore.data.builtin import fashion_mnist, find_fashion_mnist
from gpucore.config import load_config
from gpucore.training.engine_config import param_groups
from gpucore.models import FashionMnistCNN
from gpucore.device.placement import resolve_channels_last
from gpucore.data.tensor_inputs import input_stats

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (device_label, import_lightning, lightning_epoch_timer, lightning_module, report,  # noqa: E402
                    stepped_per_batch, sync)


class Setting:
    """What every trainer shares: data, initial weights, hyper-parameters, precision and layout."""

    def __init__(self, args, device, policy, channels_last):
        self.config = load_config(None, {"epochs": args.epochs, "batch_size": args.batch_size, "seed": args.seed})
        (self.images, self.labels), (self.test_images, self.test_labels) = fashion_mnist(
            train_size=args.train_size, val_size=args.test_size)
        mean, std = (torch.tensor(values).view(1, -1, 1, 1) for values in input_stats(self.images))
        self.normalise = lambda images: (images.float() / 255 - mean) / std  # gpucore's: the training set's statistics
        self.device, self.policy, self.channels_last = device, policy, channels_last
        self.train_x = self.normalise(self.images)
        torch.manual_seed(args.seed)
        self.initial = copy.deepcopy(FashionMnistCNN().state_dict())
        self.steps = args.epochs * -(-len(self.labels) // args.batch_size)

    def model(self) -> nn.Module:
        model = FashionMnistCNN()
        model.load_state_dict(self.initial)
        return model.to(self.device, memory_format=torch.channels_last if self.channels_last else torch.preserve_format)

    def layout(self, x):
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x

    def autocast(self):
        dtype = self.policy.autocast_dtype
        return torch.autocast(self.device.type, dtype=dtype, enabled=dtype is not None)

    def optimizer(self, model):
        c = self.config
        groups = [{"params": g.params, "weight_decay": g.weight_decay, "lr": c.lr * g.lr_scale}
                  for g in param_groups(model, c)]
        optimizer = torch.optim.AdamW(groups, lr=c.lr, betas=tuple(c.betas), eps=c.eps)
        return optimizer, torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=self.steps, eta_min=c.min_lr)

    def loader(self):
        generator = torch.Generator().manual_seed(self.config.seed)
        dataset = torch.utils.data.TensorDataset(self.train_x, self.labels)
        return torch.utils.data.DataLoader(dataset, batch_size=self.config.batch_size, shuffle=True, generator=generator)

    @torch.no_grad()
    def test_accuracy(self, model) -> float:
        model.eval()
        correct = 0
        for start in range(0, len(self.test_labels), 256):
            with self.autocast():
                logits = model(self.layout(self.normalise(self.test_images[start:start + 256]).to(self.device)))
            correct += int((logits.argmax(1).cpu() == self.test_labels[start:start + 256]).sum())
        return correct / len(self.test_labels)


def train_gpucore(s: Setting):
    torch.manual_seed(s.config.seed)
    model = s.model()
    with tempfile.TemporaryDirectory() as run_dir:  # the default config: only the run's bookkeeping differs
        result = gpucore.train(dict(epochs=s.config.epochs, batch_size=s.config.batch_size, seed=s.config.seed,
                                    device=str(s.device), precision=s.policy.precision,
                                    channels_last=s.channels_last, run_dir=run_dir, progress=False, val_fraction=0.0),
                               model=model, train_data=(s.images, s.labels))
    return result.model, [row["epoch_time_s"] for row in result.history]


def train_plain(s: Setting):
    torch.manual_seed(s.config.seed)
    model = s.model()
    optimizer, schedule = s.optimizer(model)
    times = []
    for _ in range(s.config.epochs):
        model.train()
        start = time.perf_counter()
        for x, y in s.loader():
            x, y = s.layout(x.to(s.device)), y.to(s.device)
            with s.autocast():
                loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
        sync(s.device)
        times.append(time.perf_counter() - start)
    return model, times


def train_lightning(s: Setting):
    """None when lightning is not installed."""
    L = import_lightning()
    if L is None:
        return None

    torch.manual_seed(s.config.seed)
    module = lightning_module(L, s.model(),
                              lambda net, batch: nn.functional.cross_entropy(net(s.layout(batch[0])), batch[1]),
                              lambda net: stepped_per_batch(*s.optimizer(net)))
    timer = lightning_epoch_timer(L, s.device)
    precision = {"bf16-mixed": "bf16-mixed", "16-mixed": "16-mixed"}.get(s.policy.precision, "32-true")
    trainer = L.Trainer(max_epochs=s.config.epochs, accelerator="gpu" if s.device.type == "cuda" else s.device.type,
                        devices=1, precision=precision, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[timer])
    trainer.fit(module, s.loader())
    return module.net.to(s.device), timer.times


TRAINERS = {"gpucore.train": train_gpucore, "PyTorch loop": train_plain, "PyTorch Lightning": train_lightning}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--epochs", type=int, default=load_config(None).epochs)
    parser.add_argument("--batch-size", type=int, default=load_config(None).batch_size)
    parser.add_argument("--precision", default="auto", choices=["auto", "32"])
    parser.add_argument("--seed", type=int, default=load_config(None).seed)
    parser.add_argument("--train-size", type=int, help="the first N training images (default: all 60,000)")
    parser.add_argument("--test-size", type=int, help="the first N test images (default: all 10,000)")
    parser.add_argument("--only", action="append", choices=list(TRAINERS), help="train only these (repeatable)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)

    device = gpucore.select_device(args.device).device
    policy = gpucore.resolve_precision(args.precision, device)
    policy.apply()
    channels_last = resolve_channels_last(load_config(None).channels_last, device, FashionMnistCNN())
    s = Setting(args, device, policy, channels_last)
    accuracy, rates, seconds, cpu_seconds = {}, {}, {}, {}
    for name in args.only or TRAINERS:
        cpu = time.process_time()
        trained = TRAINERS[name](s)
        if trained is None:
            print(f"{name}: not installed, left out")
            continue
        cpu_seconds[name] = time.process_time() - cpu
        model, times = trained
        accuracy[name] = s.test_accuracy(model)
        rates[name] = len(s.labels) * len(times) / sum(times)
        seconds[name] = sum(times)
        print(f"{name}: test accuracy {accuracy[name]:.4f}, {rates[name]:.0f} samples/s, {sum(times):.1f} s training, "
              f"{cpu_seconds[name]:.0f} CPU s for the training call", flush=True)
    data = find_fashion_mnist() or "the synthetic stand-in (Fashion-MNIST's files were not found)"
    title = (f"device: {device_label(device)}, precision {policy.precision}"
             f"{' + channels-last' if channels_last else ''}, torch {torch.__version__}, {args.epochs} epochs, batch "
             f"{args.batch_size}, {len(s.labels)} training and {len(s.test_labels)} test images from {data}\n"
             + "  ".join(f"{name} {value:.4f}" for name, value in accuracy.items()) + "  (test accuracy)")
    return report(title, "samples/s", rates, next(iter(rates)),
                  {"device": device_label(device), "precision": policy.precision, "channels_last": channels_last,
                   "epochs": args.epochs, "batch_size": args.batch_size, "seed": args.seed, "data": data,
                   "train_size": len(s.labels), "test_size": len(s.test_labels), "test_accuracy": accuracy,
                   "training_seconds": seconds, "cpu_seconds": cpu_seconds}, args.json)


if __name__ == "__main__":
    main()
