"""Training step time, side by side in one run, over a batch-size sweep: mnist-gpu.py's Fashion-MNIST CNN trained
by mnist-gpu.py as written, a seed-style loop, a hand-optimised eager loop, its CUDA-graph and
torch.compile(mode="reduce-overhead") versions (CUDA only), PyTorch Lightning (when installed) and
gpucore.train, on the same data.

    python bench/train_bench.py [--device auto] [--batch-sizes 64,128,256,512,1024] [--train-size 12288]
                                [--epochs 2] [--rounds 5] [--count-steps 8] [--only NAME,...] [--json out.json]

Each round runs every row once (rows interleaved, so a noisy machine slows them alike); a run trains
`epochs` epochs and times those after the first, with CUDA events on a GPU (gpucore.train: its own epoch
clock, which ends in the host read of the epoch's metrics, a sync). Reported per row and batch size: the
median ms per optimizer step over the rounds and the 10th-90th percentiles, samples/s at the median, and,
from separate short runs, top-level ops per step (torch.profiler, as bench/ops_bench.py) and host syncs
per step (torch.cuda.set_sync_debug_mode; CUDA only). A row that cannot run here says why. Not a test:
run it on purpose and quote the numbers with the device.
"""
import argparse
import gc
import os
import statistics
import sys
import tempfile
import warnings

import numpy as np
import torch
from torch import nn

import gpucore
from gpucore.data.synthetic import synthetic_fashion
from gpucore.data.tensor_inputs import input_stats
from gpucore.models import FashionMnistCNN

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (EpochClock, collecting_new_objects_only, device_label, import_lightning,  # noqa: E402
                    lightning_epoch_timer, lightning_module, result_json)
from ops_bench import per_step  # noqa: E402


class Skip(Exception):
    """A row that cannot run on this machine; the message says why."""


class Data:
    """The benchmark's data: uint8 images (guide 003's mnist-gpu.py reads these), and the same normalised as float."""

    def __init__(self, images, labels, mean, std):
        self.images, self.labels, self.mean, self.std = images, labels, mean, std
        self.x = ((images.float() / 255 - mean) / std).unsqueeze(1)

    @classmethod
    def synthetic(cls, size):
        (images, labels), _ = synthetic_fashion(train_size=size, val_size=1)
        mean, std = input_stats(images)
        return cls(images.reshape(-1, 28, 28), labels, float(mean[0]), float(std[0]))

    def first(self, size):
        return Data(self.images[:size], self.labels[:size], self.mean, self.std)


# ---- mnist-gpu.py as written (the original setup guide 003's script) ----------------------------------

class SeedFashionMNIST(torch.utils.data.Dataset):
    """torchvision's FashionMNIST as the seed uses it: a PIL image per sample, then ToTensor() and
    Normalize(mean, std) per sample."""

    def __init__(self, data):
        self.data = data

    def __len__(self):
        return len(self.data.labels)

    def __getitem__(self, index):
        from PIL import Image

        image = Image.fromarray(self.data.images[index].numpy(), mode="L")
        tensor = torch.from_numpy(np.array(image, np.uint8, copy=True)).unsqueeze(0).float().div(255)  # ToTensor
        return (tensor - self.data.mean) / self.data.std, int(self.data.labels[index])  # Normalize


def seeds_script(data, device, precision, epochs, batch_size, log_interval=10):
    """mnist-gpu.py's train(): DataLoader(num_workers=1, pin_memory=True) on CUDA, SGD(lr 0.01, momentum
    0.5), float32, loss.item() for the log every `log_interval` batches."""
    try:
        import PIL  # noqa: F401
    except ImportError as exc:
        raise Skip("needs Pillow (guide 003's dataset makes a PIL image per sample)") from exc
    if precision != "32":
        raise Skip("guide 003's script trains in float32 only")
    torch.manual_seed(1)
    model = FashionMnistCNN().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    kwargs = {"num_workers": 1, "pin_memory": True} if device.type == "cuda" else {}
    loader = torch.utils.data.DataLoader(SeedFashionMNIST(data), batch_size=batch_size, shuffle=True, **kwargs)
    clock = EpochClock(device)
    for _ in range(epochs):
        model.train()
        clock.start()
        for batch_idx, (images, labels) in enumerate(loader):
            images, labels = images.to(device), labels.to(device)
            optimizer.zero_grad()
            loss = nn.functional.nll_loss(nn.functional.log_softmax(model(images), dim=1), labels)
            loss.backward()
            optimizer.step()
            if batch_idx % log_interval == 0:
                loss.item()  # the seed prints it and writes it to TensorBoard
        clock.stop()
    return clock.times


# ---- PyTorch loops -------------------------------------------------------------------------------------

def autocast(device, precision):
    dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(precision)
    return torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None)


def seed_style(data, device, precision, epochs, batch_size):
    """A seed-style loop: DataLoader over tensors, .to(device) per batch, autocast + GradScaler, Adam, loss.item()."""
    torch.manual_seed(0)
    model = FashionMnistCNN().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data.x, data.labels), batch_size=batch_size,
                                         shuffle=True, pin_memory=device.type == "cuda")
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "16-mixed")
    clock = EpochClock(device)
    for _ in range(epochs):
        model.train()
        clock.start()
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            optimizer.zero_grad()
            with autocast(device, precision):
                loss = nn.functional.cross_entropy(model(images), labels)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            loss.item()
        clock.stop()
    return clock.times


def hand_optimised(data, device, precision, epochs, batch_size, mode="eager"):
    """Data on the device, a permutation per epoch, fused AdamW, the loss summed on the device, no sync in
    an epoch. mode "graph": the whole step (gather, forward, backward, AdamW(fused, capturable)) captured
    once in a CUDA graph and replayed (the ceiling of what launches cost); "compile": the step under
    torch.compile(mode="reduce-overhead")."""
    if mode != "eager" and device.type != "cuda":
        raise Skip("CUDA only")
    torch.manual_seed(0)
    model = FashionMnistCNN().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True, capturable=mode == "graph")
    x, y = data.x.to(device), data.labels.to(device)
    steps = x.shape[0] // batch_size  # whole batches: a graph replays one shape
    index = torch.zeros(batch_size, dtype=torch.long, device=device)
    total = torch.zeros((), device=device)

    def step():
        with autocast(device, precision):
            loss = nn.functional.cross_entropy(model(x[index]), y[index])
        loss.backward()
        optimizer.step()
        total.add_(loss.detach())

    def eager_step():
        optimizer.zero_grad(set_to_none=True)
        step()

    run = torch.compile(eager_step, mode="reduce-overhead") if mode == "compile" else eager_step
    if mode == "graph":  # torch.cuda.graph's whole-network recipe
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                eager_step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        optimizer.zero_grad(set_to_none=True)  # the captured backward allocates the gradients, replays overwrite them
        with torch.cuda.graph(graph):
            step()
        run = graph.replay
    clock = EpochClock(device)
    for _ in range(epochs):
        model.train()
        clock.start()
        order = torch.randperm(x.shape[0], device=device)
        for begin in range(0, steps * batch_size, batch_size):
            index.copy_(order[begin:begin + batch_size])
            run()
        clock.stop()
    return clock.times


def lightning_loop(data, device, precision, epochs, batch_size):
    """PyTorch Lightning as its users write it: a LightningModule, a DataLoader, Trainer.fit."""
    L = import_lightning()
    if L is None:
        raise Skip("lightning is not installed")

    torch.manual_seed(0)
    module = lightning_module(L, FashionMnistCNN(),
                              lambda net, batch: nn.functional.cross_entropy(net(batch[0]), batch[1]),
                              lambda net: torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.0))
    timer = lightning_epoch_timer(L, device)
    trainer = L.Trainer(max_epochs=epochs, accelerator="gpu" if device.type == "cuda" else device.type, devices=1,
                        precision={"bf16-mixed": "bf16-mixed", "16-mixed": "16-mixed"}.get(precision, "32-true"),
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[timer])
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data.x, data.labels), batch_size=batch_size,
                                         shuffle=True, pin_memory=device.type == "cuda")
    trainer.fit(module, loader)
    return timer.times


def gpucore_train(data, device, precision, epochs, batch_size, cuda_graphs=False):
    """gpucore.train with the data in memory (normalised), no validation, no mid-epoch host reads."""
    if cuda_graphs and device.type != "cuda":
        raise Skip("CUDA only")
    with tempfile.TemporaryDirectory() as run_dir:
        result = gpucore.train(
            dict(epochs=epochs, batch_size=batch_size, lr=1e-3, device=str(device), run_dir=run_dir, progress=False,
                 schedule="constant", weight_decay=0.0, normalize=False, seed=0, precision=precision,
                 val_fraction=0.0, log_every_n_steps=10**6, report=False, cuda_graphs=cuda_graphs),
            train_data=(data.x, data.labels))
    return [row["epoch_time_s"] for row in result.history]


def rows(precision):
    """name -> (function, precision): the rows of the table."""
    table = {
        "mnist-gpu.py as written": (seeds_script, "32"),
        "seed-style loop": (seed_style, precision),
        "hand-optimised eager loop": (hand_optimised, precision),
        "hand-optimised loop in a CUDA graph (ceiling)": (lambda *a: hand_optimised(*a, mode="graph"), precision),
        "hand-optimised loop under torch.compile reduce-overhead": (lambda *a: hand_optimised(*a, mode="compile"), precision),
        "PyTorch Lightning": (lightning_loop, precision),
        "gpucore.train": (gpucore_train, precision),
        "gpucore.train with cuda_graphs": (lambda *a: gpucore_train(*a, cuda_graphs=True), precision),
    }
    if precision != "32":  # what reduced precision gains: the same rows in float32
        table["hand-optimised eager loop in float32"] = (hand_optimised, "32")
        table["gpucore.train in float32"] = (gpucore_train, "32")
    return table


def host_syncs_per_step(run, steps, device):
    """(syncs of a 2 x steps epoch - syncs of a steps epoch) / steps, by torch's sync debugger; None off CUDA."""
    if device.type != "cuda":
        return None

    def syncs(n):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                run(n)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        return sum("synchronizing CUDA operation" in str(w.message) for w in caught)

    return (syncs(2 * steps) - syncs(steps)) / steps


def percentile(values, fraction):
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def sweep(table, data, batch_sizes, device, args):
    """(results by row and batch size, skipped rows with their reasons): every row of `table` at each batch size,
    `args.rounds` interleaved rounds, then each row's op and sync counts; prints each batch size's table."""
    results, skipped = {}, {}
    train_data = data.first(args.train_size)
    for batch_size in batch_sizes:
        samples = {name: [] for name in table}
        for _ in range(args.rounds):
            for name, (train, precision) in table.items():
                if name in skipped:
                    continue
                gc.collect()  # the last row's cyclic garbage (CUDA graphs, tensors) freed here, not in a forked worker
                try:
                    times = train(train_data, device, precision, args.epochs, batch_size)
                except Skip as reason:
                    skipped[name] = str(reason)
                    continue
                steps = args.train_size // batch_size
                timed = times[1:] or times
                samples[name].append(1000 * sum(timed) / (len(timed) * steps))
        print(f"\nbatch {batch_size}")
        print(f"  {'row':<48}{'ms/step':>9}{'p10-p90':>16}{'samples/s':>11}{'ops/step':>10}{'syncs/step':>12}")
        for name, ms in samples.items():
            if not ms:
                continue
            ops = syncs = None
            if args.count_steps:
                train, precision = table[name]
                run = lambda n: train(data.first(n * batch_size), device, precision, 1, batch_size)  # noqa: E731
                ops = sum(per_step(run, args.count_steps).values())
                syncs = host_syncs_per_step(run, args.count_steps, device)
            median = statistics.median(ms)
            row = {"ms_per_step": median, "p10": percentile(ms, 0.1), "p90": percentile(ms, 0.9),
                   "samples_per_s": batch_size * 1000 / median, "ops_per_step": ops, "host_syncs_per_step": syncs,
                   "rounds": ms}
            results.setdefault(name, {})[batch_size] = row
            print(f"  {name:<48}{median:>9.2f}{row['p10']:>8.2f}-{row['p90']:<7.2f}{row['samples_per_s']:>11.0f}"
                  f"{'' if ops is None else f'{ops:.1f}':>10}{'n/a' if syncs is None else f'{syncs:g}':>12}")
    return results, skipped


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch-sizes", default="64,128,256,512,1024")
    parser.add_argument("--train-size", type=int, default=12288)
    parser.add_argument("--epochs", type=int, default=2, help="per run; the first is the warm-up")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; median and p10-p90 over them")
    parser.add_argument("--count-steps", type=int, default=8, help="steps of the op and sync counts (0: skip)")
    parser.add_argument("--only", help="comma-separated row names")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)

    device = gpucore.select_device(args.device).device
    policy = gpucore.resolve_precision("auto", device)
    policy.apply()
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    if any(args.train_size % batch_size for batch_size in batch_sizes):
        parser.error(f"--train-size {args.train_size} must be a multiple of every batch size (whole batches)")
    data = Data.synthetic(max(args.train_size, 2 * args.count_steps * max(batch_sizes)))
    table = rows(policy.precision)
    if args.only:
        table = {name: table[name] for name in args.only.split(",")}
    print(f"device: {device_label(device)}, torch {torch.__version__}, precision {policy.precision} (float32 rows "
          f"say so), {args.train_size} images, {args.rounds} rounds of {args.epochs} epochs")
    with collecting_new_objects_only():  # the gc.collect() before each run
        results, skipped = sweep(table, data, batch_sizes, device, args)
    for name, reason in skipped.items():
        print(f"  skipped: {name}: {reason}")
    return result_json({"device": device_label(device), "precision": policy.precision, "train_size": args.train_size,
                        "epochs": args.epochs, "rounds": args.rounds, "rows": results, "skipped": skipped},
                       args.json)


if __name__ == "__main__":
    main()
