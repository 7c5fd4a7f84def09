"""Photometric transforms per image: gpucore's fused per-sample op (the `transforms` list's uint8 stage on one batch)
against torchvision.transforms.v2 applied image by image (what a DataLoader worker does), on the same uint8 images.

    python bench/color_bench.py [--device auto] [--images 512] [--size 32] [--rounds 3] [--json out.json]

Both sides draw their own parameters per image (same distributions); gpucore's time includes drawing them on the
host and copying them to the device. torchvision runs in this process, one image after another (a DataLoader
spreads that over its workers: divide its time by their number to compare with N workers).
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

LISTS = {
    "ColorJitter": [{"ColorJitter": {"brightness": 0.4, "contrast": 0.4, "saturation": 0.4, "hue": 0.1}}],
    "TrivialAugmentWide": ["TrivialAugmentWide"],
    "RandAugment": [{"RandAugment": {"num_ops": 2, "magnitude": 9}}],
}


def timed(run, device, rounds):
    """Best of `rounds` wall times of run()."""
    best = float("inf")
    for _ in range(rounds):
        sync(device)
        start = time.perf_counter()
        run()
        sync(device)
        best = min(best, time.perf_counter() - start)
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    import_torchvision()
    from torchvision.transforms import v2
    device = gpucore.select_device(args.device).device
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (args.images, 3, args.size, args.size), generator=generator, dtype=torch.uint8)
    on_device = images.to(device)
    reference = {
        "ColorJitter": v2.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1),
        "TrivialAugmentWide": v2.TrivialAugmentWide(),
        "RandAugment": v2.RandAugment(num_ops=2, magnitude=9),
    }
    rates = {}
    for name, listed in LISTS.items():
        specs = transforms.specs(listed)
        ours = timed(lambda: _C.apply_transforms(on_device, specs, [], [], 0), device, args.rounds)
        theirs = timed(lambda: [reference[name](image) for image in images], torch.device("cpu"), args.rounds)
        rates[f"gpucore {name}"] = args.images / ours
        rates[f"torchvision {name}, per image"] = args.images / theirs
    first = next(iter(rates))
    return report(f"photometric transforms, {args.images} images 3 x {args.size} x {args.size}, {device_label(device)}",
                  "images/s", rates, first, {"device": device_label(device), "images": args.images, "size": args.size},
                  args.json)


if __name__ == "__main__":
    main()
