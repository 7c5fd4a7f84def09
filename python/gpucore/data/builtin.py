"""Training data for gpucore.train (config key `data`): the built-in synthetic sets, IDX/.npy/.npz
files (read into memory as (inputs, targets) tensors) and image folders of class subfolders or of images/ and masks/
(gpucore.data.ImageFiles, decoded into memory or streamed, as config key `cache` says; see loader.py).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

import torch

from .. import _C

from ..errors import ConfigError
from ..values import is_int
from . import label_files, readers
from .image_files import ImageFiles
from .identity import held_out_by_name, relative_names
from .torch_samples import dataset_samples



def synthetic_fashion(train_size: int = 12000, val_size: int = 2000, seed: int = 0, size: int = 28):
    """Ten classes of 28x28 grey-scale shapes (bars, rings, boxes, crosses, ...) at random positions,
    scales, thicknesses and contrasts, with noise: Fashion-MNIST-shaped and learnable, made offline.

    Returns ((x_train, y_train), (x_val, y_val)) with x uint8 (N, 1, 28, 28) and y int64.
    """
    generator = torch.Generator().manual_seed(seed)
    total = train_size + val_size
    labels = torch.randint(0, 10, (total,), generator=generator)

    def uniform(low, high):
        return low + (high - low) * torch.rand(total, 1, 1, generator=generator)

    coords = torch.arange(size, dtype=torch.float32)
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    cy, cx = uniform(9, 19), uniform(9, 19)
    radius, width = uniform(5, 9), uniform(1.2, 2.5)
    dy, dx = yy - cy, xx - cx
    dist = torch.sqrt(dy**2 + dx**2)
    box = torch.maximum(dy.abs(), dx.abs())
    period = uniform(4, 7)
    shapes = torch.stack([
        (torch.cos(2 * math.pi * yy / period) > 0.3) & (box < radius + 2),             # 0 horizontal bars
        (torch.cos(2 * math.pi * xx / period) > 0.3) & (box < radius + 2),             # 1 vertical bars
        dist < radius,                                                                # 2 disc
        (dist - radius).abs() < width,                                                # 3 ring
        box < radius,                                                                 # 4 filled square
        (box - radius).abs() < width,                                                 # 5 square outline
        ((dy.abs() < width) | (dx.abs() < width)) & (box < radius + 1),               # 6 plus
        (((dy - dx).abs() < width * 1.4) | ((dy + dx).abs() < width * 1.4)) & (box < radius),  # 7 X
        (dy > -radius) & (dy.abs() + 0 < radius) & (dx.abs() < (dy + radius) * 0.6),   # 8 triangle
        ((dist - radius).abs() < width) | (dist < width * 1.2),                        # 9 ring with a dot
    ], dim=1).float()
    images = shapes[torch.arange(total), labels]
    contrast = uniform(0.55, 1.0)
    images = images * contrast + 0.18 * torch.randn(total, size, size, generator=generator)
    images = (images.clamp(0, 1) * 255).round().to(torch.uint8).unsqueeze(1)
    return (images[:train_size], labels[:train_size]), (images[train_size:], labels[train_size:])


def synthetic_sequences(train_size: int = 4096, val_size: int = 512, seed: int = 0, steps: int = 24, classes: int = 10,
                        max_length: int = 6, noise: float = 0.3):
    """Sequences for CTC models (the kind of a TFNet-style text-line recogniser): each token k (1..classes-1) shows as 2-3
    noisy frames of a feature pattern, separated by blank frames; targets are (N, max_length) class indices
    padded with -1. Returns ((x_train, y_train), (x_val, y_val)) with x float (N, steps, classes)."""
    generator = torch.Generator().manual_seed(seed)
    total = train_size + val_size
    if 3 * max_length + 1 > steps:
        raise ConfigError(f"synthetic_sequences: {max_length} tokens need at least {3 * max_length + 1} steps, got {steps}")
    x = torch.zeros(total, steps, classes)
    y = torch.full((total, max_length), -1, dtype=torch.long)
    lengths = torch.randint(1, max_length + 1, (total,), generator=generator)
    tokens = torch.randint(1, classes, (total, max_length), generator=generator)
    widths = torch.randint(2, 4, (total, max_length), generator=generator)
    for i in range(total):
        t = 0
        for j in range(int(lengths[i])):
            x[i, t, 0] = 1.0  # a blank frame before every token
            t += 1
            width = int(widths[i, j])
            x[i, t:t + width, int(tokens[i, j])] = 1.0
            t += width
        x[i, t:, 0] = 1.0
        y[i, :int(lengths[i])] = tokens[i, :int(lengths[i])]
    x += noise * torch.randn(x.shape, generator=generator)
    return (x[:train_size], y[:train_size]), (x[train_size:], y[train_size:])

_GLYPHS = {  # a 5 x 7 bitmap font for the built-in captcha generator
    "0": (".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."),
    "1": ("..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."),
    "2": (".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"),
    "3": ("#####", "...#.", "..#..", "...#.", "....#", "#...#", ".###."),
    "4": ("...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."),
    "5": ("#####", "#....", "####.", "....#", "....#", "#...#", ".###."),
    "6": ("..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."),
    "7": ("#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."),
    "8": (".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."),
    "9": (".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."),
    "a": (".###.", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"),
    "b": ("####.", "#...#", "#...#", "####.", "#...#", "#...#", "####."),
    "c": (".###.", "#...#", "#....", "#....", "#....", "#...#", ".###."),
    "d": ("###..", "#..#.", "#...#", "#...#", "#...#", "#..#.", "###.."),
    "e": ("#####", "#....", "#....", "####.", "#....", "#....", "#####"),
    "f": ("#####", "#....", "#....", "####.", "#....", "#....", "#...."),
    "g": (".###.", "#...#", "#....", "#.###", "#...#", "#...#", ".####"),
    "h": ("#...#", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"),
    "i": (".###.", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."),
    "j": ("..###", "...#.", "...#.", "...#.", "...#.", "#..#.", ".##.."),
    "k": ("#...#", "#..#.", "#.#..", "##...", "#.#..", "#..#.", "#...#"),
    "l": ("#....", "#....", "#....", "#....", "#....", "#....", "#####"),
    "m": ("#...#", "##.##", "#.#.#", "#.#.#", "#...#", "#...#", "#...#"),
    "n": ("#...#", "#...#", "##..#", "#.#.#", "#..##", "#...#", "#...#"),
    "o": (".###.", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."),
    "p": ("####.", "#...#", "#...#", "####.", "#....", "#....", "#...."),
    "q": (".###.", "#...#", "#...#", "#...#", "#.#.#", "#..#.", ".##.#"),
    "r": ("####.", "#...#", "#...#", "####.", "#.#..", "#..#.", "#...#"),
    "s": (".####", "#....", "#....", ".###.", "....#", "....#", "####."),
    "t": ("#####", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.."),
    "u": ("#...#", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."),
    "v": ("#...#", "#...#", "#...#", "#...#", "#...#", ".#.#.", "..#.."),
    "w": ("#...#", "#...#", "#...#", "#.#.#", "#.#.#", "#.#.#", ".#.#."),
    "x": ("#...#", "#...#", ".#.#.", "..#..", ".#.#.", "#...#", "#...#"),
    "y": ("#...#", "#...#", ".#.#.", "..#..", "..#..", "..#..", "..#.."),
    "z": ("#####", "....#", "...#.", "..#..", ".#...", "#....", "#####"),
}
CAPTCHA_ALPHABET = "".join(_GLYPHS)


def synthetic_captcha(train_size: int = 10000, val_size: int = 1000, seed: int = 0, length: int = 4,
                      height: int = 60, width: int = 160):
    """Captcha images like those of captcha-trainer scripts (160 x 60 RGB, 4 characters of 0-9a-z) drawn from a built-in bitmap
    font: scaled glyphs at jittered positions in random colours over a noisy background with stray lines.
    Targets are (N, length) indices into CAPTCHA_ALPHABET. Returns ((x_train, y_train), (x_val, y_val))."""
    generator = torch.Generator().manual_seed(seed)
    total = train_size + val_size
    font = torch.tensor([[[c == "#" for c in row] for row in _GLYPHS[ch]] for ch in CAPTCHA_ALPHABET])  # 36 x 7 x 5
    labels = torch.randint(0, len(CAPTCHA_ALPHABET), (total, length), generator=generator)
    images = (torch.rand(total, 3, height, width, generator=generator) * 60 + 170).to(torch.uint8)
    slot = width // length
    for i in range(total):
        for j in range(length):
            scale = int(torch.randint(4, 7, (1,), generator=generator))
            glyph = font[labels[i, j]].repeat_interleave(scale, 0).repeat_interleave(scale, 1)
            gh, gw = glyph.shape
            top = int(torch.randint(0, max(height - gh, 1), (1,), generator=generator))
            left = j * slot + int(torch.randint(0, max(slot - gw, 1), (1,), generator=generator))
            colour = torch.randint(0, 120, (3, 1, 1), generator=generator).to(torch.uint8)
            region = images[i, :, top:top + gh, left:left + gw]
            images[i, :, top:top + gh, left:left + gw] = torch.where(glyph[:gh, :region.shape[2]], colour, region)
        for _ in range(2):  # stray lines across the text
            row = int(torch.randint(0, height, (1,), generator=generator))
            images[i, :, row, :] = torch.randint(0, 120, (3, 1), generator=generator).to(torch.uint8)
    return (images[:train_size], labels[:train_size]), (images[train_size:], labels[train_size:])


FASHION_MNIST_ENV = "GPUCORE_FASHION_MNIST"
# Where the original IDX files are looked for after data_kwargs `path` and $GPUCORE_FASHION_MNIST:
# Debian/Ubuntu's dataset-fashion-mnist package, then a user cache folder.
FASHION_MNIST_PLACES = ["/usr/share/datasets/fashion-mnist", "~/.cache/gpucore/fashion-mnist"]
_FASHION_MNIST_FILES = "train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, " \
                       "t10k-labels-idx1-ubyte.gz"


def find_fashion_mnist(path: Optional[str] = None) -> Optional[str]:
    """The folder holding Fashion-MNIST's four IDX files, or None. An explicit `path` must hold them."""
    if path is not None:
        folder = os.path.expanduser(path)
        if _find(folder, "train-images-idx3-ubyte") is None:
            raise ConfigError(f"config key 'data_kwargs': path '{path}' holds no Fashion-MNIST IDX files "
                              f"({_FASHION_MNIST_FILES})")
        return folder
    candidates = [os.environ[FASHION_MNIST_ENV]] if os.environ.get(FASHION_MNIST_ENV) else []
    for folder in candidates + [os.path.expanduser(place) for place in FASHION_MNIST_PLACES]:
        if _find(folder, "train-images-idx3-ubyte") is not None:
            return folder
    return None


def _searched_places() -> str:
    """Where find_fashion_mnist looks, for messages that say where to put the files."""
    return ", ".join([f"${FASHION_MNIST_ENV}"] + FASHION_MNIST_PLACES)


def fashion_mnist(path: Optional[str] = None, train_size: Optional[int] = None, val_size: Optional[int] = None):
    """The real Fashion-MNIST from its original IDX files: 60,000 training images, and the 10,000 test
    images as the validation split (the first train_size / val_size of each when given). Where the files
    are nowhere, a warning says where to put them and the synthetic set stands in."""
    folder = find_fashion_mnist(path)
    if folder is None:
        import warnings

        warnings.warn(f"Fashion-MNIST's files were not found ({_searched_places()}; or data_kwargs path). Install "
                      f"Debian/Ubuntu's dataset-fashion-mnist, or put {_FASHION_MNIST_FILES} in one of those folders. "
                      "Training on the SYNTHETIC Fashion-MNIST-shaped set instead: its accuracy means nothing for "
                      "the real data.", RuntimeWarning, stacklevel=3)
        return synthetic_fashion(**{k: v for k, v in (("train_size", train_size), ("val_size", val_size)) if v})
    train, test = _load_folder(folder, {})
    if test is None:
        raise ConfigError(f"Fashion-MNIST folder '{folder}' has no test files (t10k-images-idx3-ubyte[.gz])")
    return tuple((x[:size], y[:size]) if size is not None else (x, y)
                 for (x, y), size in ((train, train_size), (test, val_size)))


def fashion_mnist_foreground(path: Optional[str] = None, train_size: int = 6000, val_size: int = 1000, size: int = 64,
                             seed: int = 0):
    """Foreground segmentation made from the real Fashion-MNIST: each garment, enlarged 1.5 to 2.25 times, pasted
    at a random place onto a size x size RGB background textured with stripes, checks or blotches in random
    colours, and drawn in a random colour shaded by its own intensity. The mask (the target, (N, size, size)
    floats) is the garment's pixels: intensity above 10% after the enlargement. Training images come from
    Fashion-MNIST's training files, validation images from its test files, so the held-out garments are unseen."""
    folder = find_fashion_mnist(path)
    if folder is None:
        raise ConfigError(f"data set 'fashion_mnist_foreground' needs the real Fashion-MNIST's files ("
                          f"{_FASHION_MNIST_FILES}) in one of {_searched_places()}, or data_kwargs path; "
                          "Debian/Ubuntu's dataset-fashion-mnist installs them")
    if not is_int(size) or size < 42:
        raise ConfigError(f"config key 'data_kwargs': size of data set 'fashion_mnist_foreground' must be an integer "
                          f">= 42 (a 28-pixel garment enlarged 1.5 times must fit), got {size!r}")
    train, test = _load_folder(folder, {})
    return (_pasted_garments(train[0][:train_size], size, seed), _pasted_garments(test[0][:val_size], size, seed + 1))


def _pasted_garments(garments: torch.Tensor, size: int, seed: int):
    """(images (N, 3, size, size) uint8, masks (N, size, size) float) for fashion_mnist_foreground."""
    generator = torch.Generator().manual_seed(seed)
    count = garments.shape[0]
    rand = lambda *shape: torch.rand(*shape, generator=generator)  # noqa: E731
    y, x = torch.meshgrid(torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32), indexing="ij")
    angle, period = rand(count, 1, 1) * math.pi, 3 + rand(count, 1, 1) * 9
    stripes = torch.sin(2 * math.pi * (x * angle.cos() + y * angle.sin()) / period) > 0
    checks = ((x / period).floor() + (y / period).floor()) % 2 == 1
    blotches = torch.nn.functional.interpolate(rand(count, 1, size // 8, size // 8), size=(size, size),
                                               mode="bilinear", align_corners=False)[:, 0] > 0.5
    kind = torch.randint(0, 3, (count, 1, 1), generator=generator)
    pattern = torch.where(kind == 0, stripes, torch.where(kind == 1, checks, blotches)).float()[:, None]
    first, second = rand(count, 3, 1, 1) * 255, rand(count, 3, 1, 1) * 255
    images = first + (second - first) * pattern
    images += (rand(count, 3, size, size) - 0.5) * 30  # grain
    masks = torch.zeros(count, size, size)
    colours = rand(count, 3, 1, 1) * 255
    sides = (28 * (1.5 + 0.75 * rand(count))).long().clamp(max=size)
    corners = (rand(count, 2) * (size - sides + 1)[:, None]).long()
    for side in sides.unique().tolist():  # one resize per garment size
        chosen = (sides == side).nonzero()[:, 0]
        alphas = torch.nn.functional.interpolate(garments[chosen].float().reshape(-1, 1, 28, 28) / 255,
                                                 size=(side, side), mode="bilinear", align_corners=False).clamp(0, 1)
        for i, alpha in zip(chosen.tolist(), alphas):
            top, left = corners[i].tolist()
            region = images[i, :, top:top + side, left:left + side]
            shaded = colours[i] * (0.35 + 0.65 * alpha)
            images[i, :, top:top + side, left:left + side] = region * (1 - alpha.sqrt()) + shaded * alpha.sqrt()
            masks[i, top:top + side, left:left + side] = (alpha[0] > 0.1).float()
    return images.clamp(0, 255).round().to(torch.uint8), masks


BUILTIN = {"fashion_mnist": fashion_mnist, "synthetic_fashion": synthetic_fashion,
           "synthetic_sequences": synthetic_sequences, "synthetic_captcha": synthetic_captcha,
           "fashion_mnist_foreground": fashion_mnist_foreground}
# Class names of the built-in sets (captcha: the classes of each character head).
CLASS_NAMES = {
    "fashion_mnist": ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                      "Ankle boot"],
    "synthetic_fashion": ["horizontal bars", "vertical bars", "disc", "ring", "square", "square outline", "plus", "X",
                          "triangle", "ring with dot"],
    "synthetic_captcha": list(CAPTCHA_ALPHABET),
}


def class_names(name: str, kwargs: dict) -> Optional[list]:
    """The class names of built-in data set `name`, None for others (image folders carry their own)."""
    if name == "fashion_mnist" and find_fashion_mnist(kwargs.get("path")) is None:
        name = "synthetic_fashion"  # the stand-in fashion_mnist trains on when the files are nowhere
    names = CLASS_NAMES.get(name)
    return list(names) if names is not None else None


def _find(folder: str, *names: str) -> Optional[str]:
    for name in names:
        for candidate in (name, name + ".gz"):
            path = os.path.join(folder, candidate)
            if os.path.isfile(path):
                return path
    return None


# A data folder's held-out subfolders beside train/, in the order its held-out split is looked for (Hugging Face's
# validation/, the usual val/ and valid/, then test/).
HELD_OUT_FOLDERS = ("validation", "val", "valid", "test")


def held_out_folders(name: str) -> List[str]:
    """The held-out subfolders (HELD_OUT_FOLDERS, in that order) beside train/ of data folder `name`; none for other
    data."""
    path = os.path.expanduser(name)
    if not os.path.isdir(os.path.join(path, "train")):
        return []
    return [folder for folder in HELD_OUT_FOLDERS if os.path.isdir(os.path.join(path, folder))]


def _load_folder(path: str, kwargs: dict, classes: Optional[List[str]] = None, multi_label: Optional[bool] = None,
                 held_out: Sequence[str] = HELD_OUT_FOLDERS):
    """IDX files, .npy files, a folder with label files (_label_file_layout), or image folders (class subfolders, or
    images/ and masks/; either optionally under train/ and the first of `held_out` (HELD_OUT_FOLDERS): a held-out
    folder of classes labelled by train/'s class names, or all of them by `classes`, a trained model's)."""
    def pair(dataset):
        return dataset.inputs, dataset.targets

    train_images = _find(path, "train-images-idx3-ubyte", "train-images.idx3-ubyte")
    if train_images:
        train = pair(readers.read_idx(train_images, _required(path, "train-labels-idx1-ubyte", "train-labels.idx1-ubyte")))
        test_images = _find(path, "t10k-images-idx3-ubyte", "t10k-images.idx3-ubyte")
        val = (pair(readers.read_idx(test_images, _required(path, "t10k-labels-idx1-ubyte", "t10k-labels.idx1-ubyte")))
               if test_images else None)
        return train, val
    arrays = {name[:-4]: os.path.join(path, name) for name in os.listdir(path) if name.endswith(".npy")}
    splits = _pick_splits(arrays, lambda x, y: pair(readers.read_npy(x, y)))
    if splits is not None:
        return splits
    labelled = _label_file_layout(path, kwargs, classes, multi_label, held_out)
    if labelled is not None:
        return labelled
    model_classes = "the model" if classes is not None else None
    if os.path.isdir(os.path.join(path, "train")):
        train = _image_folder(os.path.join(path, "train"), kwargs, classes, model_classes)
        for name in held_out:
            if os.path.isdir(os.path.join(path, name)):
                return train, _image_folder(os.path.join(path, name), kwargs, train.classes,
                                            model_classes or f"training folder '{train.origin}'")
        return train, None
    if any(os.path.isdir(os.path.join(path, entry)) for entry in os.listdir(path)):
        return _image_folder(path, kwargs, classes, model_classes), None
    raise ConfigError(f"data folder '{path}' holds no IDX files (train-images-idx3-ubyte[.gz]), no x_train.npy/"
                      "y_train.npy or x.npy/y.npy, no label file (metadata.csv/.jsonl, or labels.csv/train.csv beside "
                      "train/), no class subfolders of images and no images/ and masks/ subfolders")


def _label_file_layout(path: str, kwargs: dict, classes: Optional[List[str]], multi_label: Optional[bool],
                       held_out: Sequence[str]):
    """(train, val) of a folder whose labels are in a label file, else None: Hugging Face's image folder (metadata.csv
    or metadata.jsonl beside the images, at the top: no held-out split; or in train/ and in the first of `held_out`
    (HELD_OUT_FOLDERS) that has one: the held-out split, labelled by train/'s classes) or Kaggle's layout (labels.csv,
    train.csv, train_labels.csv or trainLabels.csv beside train/, its files found beside the label file or in train/;
    an unlabelled test/ is for gpucore predict)."""
    top = label_files.metadata_file(path)
    if top is not None:
        return _label_file(top, kwargs, classes, multi_label), None
    train_metadata = (label_files.metadata_file(os.path.join(path, "train"))
                      if os.path.isdir(os.path.join(path, "train")) else None)
    if train_metadata is not None:
        train = _label_file(train_metadata, kwargs, classes, multi_label)
        for name in held_out:
            held_out = (label_files.metadata_file(os.path.join(path, name))
                        if os.path.isdir(os.path.join(path, name)) else None)
            if held_out is not None:
                multi = train.targets.dim() == 2 if multi_label is None else multi_label
                return train, _label_file(held_out, kwargs, train.classes if classes is None else classes, multi)
        return train, None
    kaggle = label_files.kaggle_label_file(path)
    if kaggle is not None:
        return _label_file(kaggle, kwargs, classes, multi_label), None
    return None


def _label_file(path: str, kwargs: dict, classes: Optional[List[str]], multi_label: Optional[bool]):
    """read_label_file with config key data_kwargs; `classes` (a trained model's, or the training file's) and the
    task's `multi_label` where data_kwargs does not give them; a Kaggle label file's images also looked for in train/
    beside it (label_files.kaggle_roots)."""
    options = dict(kwargs)
    roots = label_files.kaggle_roots(path)
    if roots is not None:
        options.setdefault("root", roots)
    if classes is not None:
        options["classes"] = classes
    if multi_label is not None:
        options.setdefault("multi_label", multi_label)
    try:
        return readers.read_label_file(path, **options)
    except TypeError as exc:
        raise ConfigError(f"config key 'data_kwargs' does not fit the label-file reader of '{path}' "
                          f"({', '.join(readers.reader_keywords(readers.read_label_file))}): {exc}") from exc


# Subfolder pairs that make a folder a segmentation layout (images and their masks, as read_segmentation pairs them),
# never class subfolders.
_SEGMENTATION_LAYOUTS = (("images", "masks"), ("image", "mask"), ("images", "labels"))


def _segmentation_layout(root: str) -> Optional[Tuple[str, str]]:
    """(images folder, masks folder) where `root` holds a pair of _SEGMENTATION_LAYOUTS subfolders, else None."""
    subfolders = {entry.lower(): entry for entry in os.listdir(root) if os.path.isdir(os.path.join(root, entry))}
    for images, masks in _SEGMENTATION_LAYOUTS:
        if images in subfolders and masks in subfolders:
            return os.path.join(root, subfolders[images]), os.path.join(root, subfolders[masks])
    return None


def _image_folder(root: str, kwargs: dict, classes: Optional[List[str]] = None,
                  classes_from: Optional[str] = None) -> ImageFiles:
    """A folder of images/ and masks/ (read_segmentation: the masks are the targets), else of class subfolders,
    labelled by `classes` when given (a held-out folder: its training set's)."""
    pair = _segmentation_layout(root)
    try:
        if pair is not None:
            return readers.read_segmentation(*pair, **kwargs)
        return readers.read_image_folder(root, **kwargs, classes=classes, classes_from=classes_from)
    except TypeError as exc:
        reader = (f"segmentation reader ({', '.join(readers.reader_keywords(readers.read_segmentation))})"
                  if pair is not None else "image-folder reader "
                  f"({', '.join(readers.reader_keywords(readers.read_image_folder, ('classes', 'classes_from')))})")
        raise ConfigError(f"config key 'data_kwargs' does not fit the {reader} of folder '{root}': {exc}") from exc


def _required(folder: str, *names: str) -> str:
    path = _find(folder, *names)
    if path is None:
        raise ConfigError(f"data folder '{folder}' has IDX images but no {names[0]}[.gz] beside them")
    return path


# Array names of a training split and of its validation split (the first one present), in the order they are looked for.
_SPLIT_NAMES = (("x_train", "y_train", (("x_val", "y_val"), ("x_test", "y_test"))), ("x", "y", ()))


def _pick_splits(arrays: dict, load: Callable):
    """(train, val) from the first of _SPLIT_NAMES that `arrays` holds (val may be None), else None;
    load(x, y) turns two of its entries into an (inputs, targets) pair."""
    for x, y, held_out in _SPLIT_NAMES:
        if x in arrays and y in arrays:
            val = next((load(arrays[vx], arrays[vy]) for vx, vy in held_out if vx in arrays and vy in arrays), None)
            return load(arrays[x], arrays[y]), val
    return None


def _load_npz(path: str):
    arrays = _C.read_npz(path)
    splits = _pick_splits(arrays, lambda x, y: (x, y))
    if splits is not None:
        return splits
    raise ConfigError(f"data: '{path}' has arrays {sorted(arrays)}; expected x_train and y_train (optionally x_val/y_val "
                      "or x_test/y_test), or x and y")


# Config key `data` of a run whose training data was given to gpucore.train in Python (train_data): nothing reads it
# back; what needs the run's data is told to pass it (--data, train_data).
PYTHON_DATA = "python:train_data"


def is_python_data(name: str) -> bool:
    return isinstance(name, str) and name.startswith("python:")


def read_data(name: str, kwargs: dict, classes: Optional[List[str]] = None, multi_label: Optional[bool] = None,
              held_out: Sequence[str] = HELD_OUT_FOLDERS):
    """(train, val) as config key `data` names them, each (inputs, targets) tensors or ImageFiles; val is None when
    the data has no validation split of its own (val_size: 0 included). `classes`: image folders and label files
    labelled by these class names (a trained model's) instead of their own. `multi_label`: whether label files hold
    several labels per row (the task's; data_kwargs multi_label wins; None: JSONL lists say). `held_out`: a folder's
    held-out subfolders beside train/, the first found is val (gpucore evaluate's split test looks for test/ first)."""
    if is_python_data(name):
        raise ConfigError(f"config key 'data': '{name}' records that the run's data was given to gpucore.train in "
                          "Python, which cannot be read back; pass the data again (train_data=... in Python, --data "
                          "on the command line), or set data to a built-in data set "
                          f"({', '.join(BUILTIN)}), a folder or a .npz file")
    if name in BUILTIN:
        for size_key, least in (("train_size", 1), ("val_size", 0)):
            size = kwargs.get(size_key, least)
            if size is not None and (not is_int(size) or size < least):
                raise ConfigError(f"config key 'data_kwargs': {size_key} of data set '{name}' must be an integer "
                                  f">= {least}, got {size!r}")
        try:
            train, val = BUILTIN[name](**kwargs)
        except TypeError as exc:
            raise ConfigError(f"config key 'data_kwargs' does not fit data set '{name}': {exc}") from exc
    else:
        path = os.path.expanduser(name)
        if os.path.isdir(path):
            train, val = _load_folder(path, kwargs, classes, multi_label, held_out)
        elif path.endswith(".npz") and os.path.isfile(path):
            train, val = _load_npz(path)
        elif path.lower().endswith(label_files.LABEL_FILE_EXTENSIONS) and os.path.isfile(path):
            train, val = _label_file(path, kwargs, classes, multi_label), None
        else:
            raise ConfigError(
                f"config key 'data': '{name}' is neither a built-in data set ({', '.join(BUILTIN)}), a .npz file, "
                f"a label file ({', '.join(label_files.LABEL_FILE_EXTENSIONS)} of image files and labels) nor a "
                "folder (IDX files, .npy files, a label file beside the images, class subfolders of images, or "
                "images/ and masks/)"
            )
    if isinstance(val, tuple) and len(val[0]) == 0:  # val_size: 0 means no validation data
        val = None
    return train, val


# Config key val_fraction unset (null): the share held out of config key `data` when it has no validation split.
# The caller's own training data (gpucore.train(train_data=...)) is split only when val_fraction is set.
DATA_VAL_FRACTION = 0.1


def load_data(name: str, kwargs: dict, val_fraction: Optional[float], seed: int,
              classes: Optional[List[str]] = None, multi_label: Optional[bool] = None):
    """(train, val) for config key `data`, each (inputs, targets) tensors or ImageFiles; val may be None. Data without
    a validation split of its own has the seeded share `val_fraction` (None: DATA_VAL_FRACTION) held out (split).
    `classes`, `multi_label`: as read_data."""
    train, val = read_data(name, kwargs, classes, multi_label)
    if val is None:
        train, val, _ = split(train, DATA_VAL_FRACTION if val_fraction is None else val_fraction, seed)
    return train, val


@dataclass(frozen=True)
class ValSplit:
    """The samples a seeded `val_fraction` split held out for validation (training_stats.json's "validation")."""

    fraction: float
    seed: int
    samples: int  # of the training data before the split
    val_index: List[int]  # positions in it, in the order the validation set serves them
    how: str  # how the positions were drawn, in words

    def to_dict(self) -> dict:
        return {"val_fraction": self.fraction, "seed": self.seed, "samples": self.samples,
                "val_samples": len(self.val_index), "train_samples": self.samples - len(self.val_index),
                "how": self.how, "val_indices": list(self.val_index)}


# How split() draws the held-out positions, in training_stats.json's words.
_BY_POSITION = ("torch.randperm(samples, generator=torch.Generator().manual_seed(seed)): the first val_samples positions "
                "are validation (val_indices, in this order), the rest training in their order")
_BY_FILE_NAME = ("by file: a file is validation when blake2b(f'{seed}\\0{path relative to the folder}', digest_size=8) "
                 "read as a big-endian number / 2^64 is below val_fraction (at least one file), so files added later "
                 "never move an earlier file between training and validation; val_indices in file order")


def split_indices(count: int, fraction: float, seed: int) -> Tuple[List[int], List[int]]:
    """(train, val) positions of `count` samples, the seeded share `fraction` held out: the same for a seed on every
    rank and after a resume, whatever the global random state."""
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed)).tolist()
    held_out = max(1, int(round(count * fraction)))
    if held_out >= count:
        raise ConfigError(f"config key 'val_fraction': {fraction} of {count} training sample(s) leaves none to train "
                          "on; use a smaller val_fraction (in [0, 1)), more data, or pass val_data")
    return order[held_out:], order[:held_out]


def split(dataset, fraction: float, seed: int):
    """(train, val, ValSplit) of a data set, the seeded share `fraction` held out for validation (image files by
    their names, held_out_by_name; other data by position); (dataset, None, None) for fraction 0. Takes (inputs,
    targets) tensors, ImageFiles, and torch Datasets with a length (as DatasetSamples' subsets; gpucore.train serves its
    other gpucore data sets as tensors); a DataLoader, an IterableDataset or anything else is a ConfigError."""
    if not fraction:
        return dataset, None, None
    count = _split_length(dataset)
    if isinstance(dataset, ImageFiles):
        train_index, val_index = held_out_by_name(relative_names(dataset), fraction, seed)
        record = ValSplit(fraction=fraction, seed=seed, samples=count, val_index=val_index, how=_BY_FILE_NAME)
        return dataset.subset(train_index), dataset.subset(val_index), record
    train_index, val_index = split_indices(count, fraction, seed)
    record = ValSplit(fraction=fraction, seed=seed, samples=count, val_index=val_index, how=_BY_POSITION)
    if isinstance(dataset, (tuple, list)):
        inputs, targets = dataset
        train, val = (torch.tensor(i, dtype=torch.long) for i in (train_index, val_index))
        return (inputs[train], targets[train]), (inputs[val], targets[val]), record
    samples = dataset_samples(dataset)  # a torch Dataset: as DatasetSamples reads it, given so already by train()
    return samples.subset(train_index), samples.subset(val_index), record


def _split_length(dataset) -> int:
    """The number of samples a val_fraction split divides; ConfigError, naming what would work, for data it cannot."""
    what = type(dataset).__name__
    if isinstance(dataset, torch.utils.data.DataLoader):
        loader = "a torch DataLoader" + ("" if what == "DataLoader" else f" ({what})")
        raise ConfigError(f"config key 'val_fraction' holds out a share of the training data, but train_data is "
                          f"{loader}, which cannot be split without rebuilding it: pass val_data, set "
                          "val_fraction: 0 (no validation), or pass the DataLoader's Dataset as train_data")
    if isinstance(dataset, (tuple, list)) and len(dataset) == 2 and all(isinstance(t, torch.Tensor) for t in dataset):
        if dataset[0].shape[0] != dataset[1].shape[0]:
            raise ConfigError(f"train_data: {dataset[0].shape[0]} inputs but {dataset[1].shape[0]} targets")
        return dataset[0].shape[0]
    if isinstance(dataset, torch.utils.data.IterableDataset) or not isinstance(dataset, torch.utils.data.Dataset) \
            or not hasattr(dataset, "__len__"):
        raise ConfigError(f"config key 'val_fraction' holds out a share of the training data, but train_data is a "
                          f"{what}, which has no samples to pick by position: pass (inputs, targets) tensors, a "
                          "gpucore data set or a torch Dataset with a length; or pass val_data, or set val_fraction: 0")
    return len(dataset)
