"""Augmentation throughput, side by side in one run: images per second from a JPEG (or PNG) folder to ready
training batches on the device through the ImageNet-style pipeline RandomResizedCrop(224), RandomHorizontalFlip,
ColorJitter(0.4, 0.4, 0.4), Normalize. gpucore (native decoding on reader threads, the `transforms` list as
fused batch ops) against torch's DataLoader with torchvision.transforms.v2 (PIL decoding, per-sample
transforms, all cores as workers, pin_memory on CUDA).

    python bench/augment_bench.py [--device auto] [--images 1024] [--format jpeg] [--epochs 3] [--json out.json]

The images are real photographs (scikit-learn's two bundled samples) cut into random 256 x 320 windows, so
both sides decode and resample the same files. gpucore runs streamed (cache "none": every epoch decodes
every file, like torch's workers) and cached (the decoded uint8 images kept; only the transforms run each
epoch). Epoch 1 includes worker start-up; the reported rate is over the later epochs. Not a test.
"""
import argparse
import io
import os
import sys
import tempfile
import time

import torch
from torch.utils.data import DataLoader as TorchDataLoader

import gpucore

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import PilImageFolder, device_label, import_torchvision, report, sync  # noqa: E402

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
HEIGHT, WIDTH = 256, 320
TRANSFORMS = [{"RandomResizedCrop": {"size": 224}}, "RandomHorizontalFlip",
              {"ColorJitter": {"brightness": 0.4, "contrast": 0.4, "saturation": 0.4}},
              {"Normalize": {"mean": MEAN, "std": STD}}]


def torchvision_pipeline(size=224):
    import_torchvision()
    from torchvision.transforms import v2
    return v2.Compose([v2.PILToTensor(), v2.RandomResizedCrop(size, antialias=True), v2.RandomHorizontalFlip(),
                       v2.ColorJitter(0.4, 0.4, 0.4), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])


def write_photo_folder(root, images, image_format, classes=10):
    """`images` random HEIGHT x WIDTH windows of the bundled photographs, saved as JPEG (quality 90) or PNG."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_sample_image

    photos = [load_sample_image(name) for name in ("china.jpg", "flower.jpg")]
    rng = np.random.default_rng(0)
    for index in range(images):
        photo = photos[index % len(photos)]
        top = rng.integers(0, photo.shape[0] - HEIGHT + 1)
        left = rng.integers(0, photo.shape[1] - WIDTH + 1)
        folder = os.path.join(root, f"class_{index % classes}")
        os.makedirs(folder, exist_ok=True)
        extension = "jpg" if image_format == "jpeg" else "png"
        buffer = io.BytesIO()
        Image.fromarray(photo[top:top + HEIGHT, left:left + WIDTH]).save(buffer, format=image_format.upper(),
                                                                          quality=90)
        with open(os.path.join(folder, f"{index:06d}.{extension}"), "wb") as handle:
            handle.write(buffer.getvalue())


def later_epochs_rate(make_iterable, epochs, images, device):
    """Images per second over epochs 2.. (epoch 1 starts workers and, when cached, decodes the folder)."""
    iterable = make_iterable()
    times = []
    for _ in range(epochs):
        start = time.perf_counter()
        for x, _ in iterable:
            x = x.to(device, non_blocking=True)
        sync(device)
        times.append(time.perf_counter() - start)
    return images * (len(times) - 1) / sum(times[1:])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--images", type=int, default=1024)
    parser.add_argument("--format", choices=["jpeg", "png"], default="jpeg")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if args.epochs < 2:
        raise SystemExit("--epochs must be >= 2: the rate is measured over the epochs after the first")
    device = gpucore.select_device(args.device).device
    cores = os.cpu_count() or 1
    rates = {}
    with tempfile.TemporaryDirectory() as root:
        write_photo_folder(root, args.images, args.format)

        def ours(cache):
            dataset = gpucore.data.read_image_folder(root, threads=cores)
            return gpucore.DataLoader(dataset, args.batch_size, device=device, transforms=TRANSFORMS, cache=cache,
                                      shuffle=True)

        def theirs():
            return TorchDataLoader(PilImageFolder(root, torchvision_pipeline()), batch_size=args.batch_size,
                                   shuffle=True, num_workers=cores,
                                   pin_memory=device.type == "cuda", persistent_workers=True)

        for name, make in ((f"gpucore {args.format} folder streamed", lambda: ours("none")),
                           (f"gpucore {args.format} folder cached", lambda: ours("auto")),
                           (f"torch DataLoader + torchvision v2, {cores} workers", theirs)):
            rates[name] = later_epochs_rate(make, args.epochs, args.images, device)
    title = (f"device: {device_label(device)}, {cores} cores, {args.images} {args.format} photos of {HEIGHT}x{WIDTH} "
             "-> RandomResizedCrop(224) + flip + ColorJitter + Normalize")
    return report(title, "images/s", rates, f"gpucore {args.format} folder streamed",
                  {"device": device_label(device), "cores": cores, "images": args.images, "format": args.format},
                  args.json)


if __name__ == "__main__":
    main()
