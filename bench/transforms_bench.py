"""Image transforms throughput, side by side in one run: images per second through a `transforms` list on a
device-resident uint8 batch, gpucore's pipeline (parameters drawn per epoch, one op per transform on the whole
batch, then the fused normalise) against torchvision.transforms.v2 applied per sample (what a torch Dataset
does) and, for the crop_padding/hflip shorthands, against the single fused gpucore::augment op they were
before the list existed.

    python bench/transforms_bench.py [--device auto] [--images 512] [--size 32] [--batch 128] [--json out.json]

Not a test.
"""
import argparse
import os
import sys
import time

import torch

import gpucore
from gpucore import _C, transforms

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import device_label, import_torchvision, report, sync  # noqa: E402

MEAN, STD = [0.5, 0.5, 0.5], [0.25, 0.25, 0.25]


def gpucore_rate(images, value, batch, device, epochs=2):
    config = _C.AugmentConfig()
    config.enabled = True
    config.transforms = transforms.specs(value)
    config.mean, config.std = MEAN, STD
    source = _C.TensorBatches(images, torch.arange(images.shape[0]), batch, True, False, 0, device, config)
    start = None
    for epoch in range(epochs + 1):  # the first epoch warms up
        if epoch == 1:
            sync(device)
            start = time.perf_counter()
        source.start_epoch(epoch)
        while source.next() is not None:
            pass
    sync(device)
    return epochs * images.shape[0] / (time.perf_counter() - start)


def fused_rate(images, padding, batch, device, epochs=2):
    """The shorthands as one gpucore::augment call per batch (what crop_padding/hflip ran before the list)."""
    images = images.to(device)
    n = images.shape[0]
    sync(device)
    start = time.perf_counter()
    for _ in range(epochs):
        corners = torch.randint(-padding, padding + 1, (n, 2), device=device)
        flips = torch.randint(0, 2, (n,), device=device).bool()
        for begin in range(0, n, batch):
            index = torch.arange(begin, min(begin + batch, n), device=device)
            torch.ops.gpucore.augment(images[index], corners[index], flips[index], MEAN, STD, torch.float32)
    sync(device)
    return epochs * n / (time.perf_counter() - start)


def torchvision_rate(images, pipeline, epochs=1):
    start = time.perf_counter()
    for _ in range(epochs):
        for image in images:
            pipeline(image)
    return epochs * images.shape[0] / (time.perf_counter() - start)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    device = gpucore.select_device(args.device).device if args.device == "auto" else torch.device(args.device)
    import_torchvision()
    from torchvision.transforms import v2

    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (args.images, 3, args.size, args.size), generator=generator, dtype=torch.uint8)
    size = args.size
    lists = {
        "crop_padding 4 + hflip": ([{"RandomCrop": {"size": size, "padding": 4}}, "RandomHorizontalFlip"],
                                   v2.Compose([v2.RandomCrop(size, padding=4), v2.RandomHorizontalFlip()])),
        "RandomResizedCrop + hflip": ([{"RandomResizedCrop": {"size": size}}, "RandomHorizontalFlip"],
                                      v2.Compose([v2.RandomResizedCrop(size), v2.RandomHorizontalFlip()])),
        "RandomAffine (bilinear)": ([{"RandomAffine": {"degrees": 15, "translate": [0.1, 0.1], "scale": [0.9, 1.1],
                                                       "interpolation": "bilinear"}}],
                                    v2.RandomAffine(15, translate=(0.1, 0.1), scale=(0.9, 1.1),
                                                    interpolation=v2.InterpolationMode.BILINEAR)),
        "ColorJitter": ([{"ColorJitter": {"brightness": 0.4, "contrast": 0.4, "saturation": 0.4, "hue": 0.1}}],
                        v2.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1)),
        "TrivialAugmentWide": (["TrivialAugmentWide"], v2.TrivialAugmentWide()),
        "RandAugment (2 ops)": ([{"RandAugment": {"num_ops": 2, "magnitude": 9}}], v2.RandAugment(num_ops=2, magnitude=9)),
    }
    facts = dict(device=device_label(device), images=args.images, size=args.size, batch=args.batch)
    results = {}
    for name, (value, reference) in lists.items():
        to_float = v2.Compose([reference, v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
        rates = {"gpucore transforms": gpucore_rate(images, value, args.batch, device),
                 "torchvision v2 per sample": torchvision_rate(images, to_float)}
        if name.startswith("crop_padding"):
            rates["gpucore::augment fused"] = fused_rate(images, 4, args.batch, device)
        results[name] = report(f"{name}: {facts['device']}, {args.images} images {size} x {size}, batch {args.batch}",
                               "images/s", rates, "gpucore transforms", facts)
    if args.json:
        import json

        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)
    return results


if __name__ == "__main__":
    main()
