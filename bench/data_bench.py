"""Data loading throughput, side by side in one run: images per second from files to ready batches on
the device, gpucore (native readers + DataLoader) against torch's DataLoader (PIL decode, the same
transforms: random crop with padding 4, horizontal flip, normalisation; num_workers = the same core
count, pin_memory on CUDA), on a PNG image folder and on data in memory, where the fair baseline is plain
PyTorch on a device-resident tensor (x_dev[idx] and the same transforms as batched tensor ops).

    python bench/data_bench.py [--device auto] [--images 4000] [--size 32] [--epochs 3] [--json out.json]

Each epoch is timed. gpucore runs the folder twice: cached (the first epoch decodes the whole folder,
later epochs serve it resident) and streamed (cache="none": reader threads decode every epoch into a
pinned ring, the path for data sets larger than memory, comparable with torch's DataLoader, which also
decodes every epoch). Not a test.
"""
import argparse
import functools
import os
import sys
import tempfile
import time

import torch
from torch.utils.data import DataLoader as TorchDataLoader
from torch.utils.data import Dataset as TorchDataset

import gpucore
from gpucore.data.png import encode_png

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import PilImageFolder, device_label, report, sync  # noqa: E402

MEAN, STD = [0.5, 0.5, 0.5], [0.25, 0.25, 0.25]


def transform(image: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """uint8 C x H x W -> random crop (padding 4), flip, normalised float: what torchvision users write."""
    x = torch.nn.functional.pad(image.float().div(255), (4, 4, 4, 4))
    dy, dx = torch.randint(0, 9, (2,), generator=generator).tolist()
    x = x[:, dy:dy + image.shape[1], dx:dx + image.shape[2]]
    if torch.rand(1, generator=generator).item() < 0.5:
        x = x.flip(-1)
    return (x - torch.tensor(MEAN)[:, None, None]) / torch.tensor(STD)[:, None, None]


def pil_transform(picture, generator: torch.Generator) -> torch.Tensor:
    """A PIL RGB image -> `transform` of its uint8 C x H x W tensor."""
    import numpy as np

    return transform(torch.from_numpy(np.asarray(picture).copy()).permute(2, 0, 1), generator)


class TensorImages(TorchDataset):
    def __init__(self, images, labels):
        self.images, self.labels = images, labels
        self.generator = torch.Generator().manual_seed(0)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        return transform(self.images[index], self.generator), self.labels[index]


class DeviceTensorBatches:
    """The fair device baseline in plain PyTorch: the data set resident on the device, each batch a gather
    x_dev[idx] of a per-epoch permutation, then the same transforms batched on the device (random crop of the
    zero-padded images, flip, normalisation)."""

    def __init__(self, images, labels, batch_size, device):
        self.images, self.labels = images.to(device), labels.to(device)
        self.batch_size, self.device = batch_size, device
        self.mean = torch.tensor(MEAN, device=device)[:, None, None]
        self.std = torch.tensor(STD, device=device)[:, None, None]

    def __iter__(self):
        n, channels, height, width = self.images.shape
        order = torch.randperm(n, device=self.device)
        for begin in range(0, n, self.batch_size):
            index = order[begin:begin + self.batch_size]
            x = torch.nn.functional.pad(self.images[index].float().div_(255), (4, 4, 4, 4))
            b = x.shape[0]
            rows = torch.randint(0, 9, (b, 1), device=self.device) + torch.arange(height, device=self.device)
            cols = torch.randint(0, 9, (b, 1), device=self.device) + torch.arange(width, device=self.device)
            cols = torch.where(torch.rand(b, 1, device=self.device) < 0.5, cols.flip(1), cols)
            x = x[torch.arange(b, device=self.device)[:, None, None, None],
                  torch.arange(channels, device=self.device)[None, :, None, None], rows[:, None, :, None],
                  cols[:, None, None, :]]
            yield (x - self.mean) / self.std, self.labels[index]


def timed_epochs(make_iterable, epochs, device):
    times = []
    start = time.perf_counter()
    iterable = make_iterable()
    for _ in range(epochs):
        for x, y in iterable:
            x = x.to(device, non_blocking=True)
        sync(device)
        now = time.perf_counter()
        times.append(now - start)
        start = now
    return times


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--images", type=int, default=4000)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    try:
        import PIL  # noqa: F401
    except ImportError:
        raise SystemExit("data_bench needs Pillow for the torch DataLoader side: pip install pillow")
    device = gpucore.select_device(args.device).device
    cores = os.cpu_count() or 1
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (args.images, 3, args.size, args.size), generator=generator, dtype=torch.uint8)
    labels = torch.randint(0, 10, (args.images,), generator=generator)
    rates = {}
    with tempfile.TemporaryDirectory() as root:
        for index in range(args.images):
            folder = os.path.join(root, f"class_{int(labels[index])}")
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, f"{index:06d}.png"), "wb") as handle:
                handle.write(encode_png(images[index].permute(1, 2, 0)))

        def ours(cache="auto"):
            dataset = gpucore.data.read_image_folder(root, threads=cores)
            return gpucore.DataLoader(dataset, args.batch_size, device=device, crop_padding=4, hflip=True,
                                      normalize=(MEAN, STD), cache=cache)

        def ours_streamed():
            return ours(cache="none")

        def theirs():
            folder = PilImageFolder(root, functools.partial(pil_transform, generator=torch.Generator().manual_seed(0)))
            return TorchDataLoader(folder, batch_size=args.batch_size, shuffle=True, num_workers=cores,
                                   pin_memory=device.type == "cuda", persistent_workers=True)

        for name, make in (("gpucore PNG folder", ours), ("gpucore PNG folder streamed", ours_streamed),
                           ("torch DataLoader PNG folder", theirs)):
            times = timed_epochs(make, args.epochs, device)
            rates[f"{name}, epoch 1"] = args.images / times[0]
            rates[f"{name}, later epochs"] = args.images * (len(times) - 1) / sum(times[1:])

    def ours_idx():
        return gpucore.DataLoader((images, labels), args.batch_size, device=device, crop_padding=4, hflip=True,
                                  normalize=(MEAN, STD), cache="device")

    def theirs_idx():
        return TorchDataLoader(TensorImages(images, labels), batch_size=args.batch_size, shuffle=True,
                               num_workers=cores, pin_memory=device.type == "cuda", persistent_workers=True)

    def plain_device():
        return DeviceTensorBatches(images, labels, args.batch_size, device)

    for name, make in (("gpucore in-memory (device-resident)", ours_idx),
                       ("plain PyTorch x_dev[idx] (device-resident)", plain_device),
                       ("torch DataLoader in-memory", theirs_idx)):
        times = timed_epochs(make, args.epochs, device)
        rates[name] = args.images * (len(times) - 1) / sum(times[1:])
    title = f"device: {device_label(device)}, {cores} cores, {args.images} images of {args.size}x{args.size}"
    return report(title, "images/s", rates, "gpucore PNG folder streamed, later epochs",
                  {"device": device_label(device), "cores": cores, "images": args.images, "size": args.size}, args.json)


if __name__ == "__main__":
    main()
