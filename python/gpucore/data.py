"""Data sets read by gpucore's native readers (IDX, .npy, PNG/JPEG) into memory.

Each data set holds `inputs` (uint8 N x C x H x W for images) and `targets`, and can be passed to
gpucore.train as train_data/val_data. Errors name the file. The threaded pinned pipeline and the fused
on-device transforms of the data-loading design are not here yet: these readers decode everything once.
"""
from __future__ import annotations

import csv
import os
from typing import Callable, List, Optional, Sequence

import torch

from . import _C

ConfigError = _C.ConfigError
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg")


def _threads(threads: Optional[int]) -> int:
    return threads if threads is not None else max(1, min(8, os.cpu_count() or 1))


def _on_error(on_error: str) -> bool:
    if on_error not in ("raise", "skip"):
        raise ConfigError(f"on_error must be 'raise' or 'skip', got '{on_error}'")
    return on_error == "skip"


class Dataset(torch.utils.data.Dataset):
    """In-memory samples: inputs[i], targets[i]. `skipped` lists the files left out (on_error: skip)."""

    def __init__(self, inputs: torch.Tensor, targets: torch.Tensor, classes: Optional[List[str]] = None,
                 skipped: Sequence[str] = (), origin: str = "tensors"):
        if inputs.shape[0] != targets.shape[0]:
            raise ConfigError(f"{origin}: {inputs.shape[0]} inputs but {targets.shape[0]} targets")
        self.inputs, self.targets, self.classes = inputs, targets, classes
        self.skipped, self.origin = list(skipped), origin

    def __len__(self) -> int:
        return self.inputs.shape[0]

    def __getitem__(self, index):
        return self.inputs[index], self.targets[index]

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.origin}: {len(self)} samples of {tuple(self.inputs.shape[1:])}"
                + (f", {len(self.classes)} classes" if self.classes else "")
                + (f", {len(self.skipped)} skipped" if self.skipped else "") + ")")


def _images_nchw(images: torch.Tensor) -> torch.Tensor:
    return images.permute(0, 3, 1, 2).contiguous()


def IDX(images: str, labels: str) -> Dataset:
    """MNIST-style IDX image and label files, plain or .gz."""
    x, y = _C.read_idx(images), _C.read_idx(labels)
    if x.dim() != 3:
        raise ConfigError(f"IDX images '{images}' have {x.dim()} dimensions; expected N x H x W")
    if y.dim() != 1 or y.shape[0] != x.shape[0]:
        raise ConfigError(f"IDX labels '{labels}' hold {tuple(y.shape)} for {x.shape[0]} images in '{images}'")
    return Dataset(x.unsqueeze(1), y.long(), origin=images)


def Npy(inputs: str, targets: str) -> Dataset:
    """Arrays saved with numpy.save: images uint8 (N, H, W) or (N, C, H, W), or any float features."""
    x, y = _C.read_npy(inputs), _C.read_npy(targets)
    if x.dtype == torch.uint8 and x.dim() == 3:
        x = x.unsqueeze(1)
    return Dataset(x, y if y.is_floating_point() else y.long(), origin=inputs)


def Tensors(inputs: torch.Tensor, targets: torch.Tensor) -> Dataset:
    return Dataset(inputs, targets)


def _decode(paths: List[str], channels: int, threads: Optional[int], on_error: str):
    images, kept, skipped = _C.decode_images(paths, channels, _threads(threads), _on_error(on_error))
    return _images_nchw(images), kept, skipped


def ImageFolder(root: str, channels: int = 3, threads: Optional[int] = None, on_error: str = "raise") -> Dataset:
    """One subfolder per class (sorted names are the classes), PNG/JPEG images of one size."""
    if not os.path.isdir(root):
        raise ConfigError(f"image folder '{root}' does not exist")
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    if not classes:
        raise ConfigError(f"image folder '{root}' has no class subfolders")
    paths, labels = [], []
    for label, name in enumerate(classes):
        folder = os.path.join(root, name)
        for file in sorted(os.listdir(folder)):
            if file.lower().endswith(IMAGE_EXTENSIONS):
                paths.append(os.path.join(folder, file))
                labels.append(label)
    if not paths:
        raise ConfigError(f"image folder '{root}' holds no .png/.jpg/.jpeg files in its class subfolders")
    images, kept, skipped = _decode(paths, channels, threads, on_error)
    return Dataset(images, torch.tensor(labels)[kept], classes, skipped, origin=root)


def Files(paths: Sequence[str], labels: Optional[Sequence] = None, *, label_from_name: Optional[Callable] = None,
          channels: int = 3, threads: Optional[int] = None, on_error: str = "raise") -> Dataset:
    """Images from a list of files with `labels`, or labels computed from each file's name."""
    paths = list(paths)
    if (labels is None) == (label_from_name is None):
        raise ConfigError("Files needs either labels or label_from_name")
    if labels is None:
        labels = [label_from_name(os.path.splitext(os.path.basename(p))[0]) for p in paths]
    if len(labels) != len(paths):
        raise ConfigError(f"Files: {len(paths)} files but {len(labels)} labels")
    images, kept, skipped = _decode(paths, channels, threads, on_error)
    return Dataset(images, torch.as_tensor(labels)[kept], skipped=skipped, origin=f"{len(paths)} files")


def captcha_labels(alphabet: str, length: int) -> Callable[[str], List[int]]:
    """label_from_name for captcha images named by their text ("a3x9.png"): one class index per character."""
    index = {character: i for i, character in enumerate(alphabet)}

    def label(name: str) -> List[int]:
        text = name.split("_")[0]
        if len(text) != length or any(c not in index for c in text):
            raise ConfigError(f"captcha file name '{name}' is not {length} characters of '{alphabet}'")
        return [index[c] for c in text]
    return label


def CSV(path: str, image_column: str = "image", label_column: str = "label", root: Optional[str] = None,
        channels: int = 3, threads: Optional[int] = None, on_error: str = "raise") -> Dataset:
    """Images listed in a CSV file with an integer label per row; paths relative to `root` (default: the CSV's folder)."""
    root = root if root is not None else os.path.dirname(os.path.abspath(path))
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    if rows and (image_column not in rows[0] or label_column not in rows[0]):
        raise ConfigError(f"CSV '{path}' has columns {list(rows[0])}; expected '{image_column}' and '{label_column}'")
    try:
        labels = [int(row[label_column]) for row in rows]
    except ValueError as exc:
        raise ConfigError(f"CSV '{path}': column '{label_column}' must hold integers ({exc})") from exc
    return Files([os.path.join(root, row[image_column]) for row in rows], labels, channels=channels, threads=threads,
                 on_error=on_error)


def Segmentation(images: str, masks: str, channels: int = 3, threads: Optional[int] = None) -> Dataset:
    """Image folder + mask folder paired by file name (without extension); masks are grey class ids (255 -> 1)."""
    def stems(folder):
        if not os.path.isdir(folder):
            raise ConfigError(f"segmentation folder '{folder}' does not exist")
        return {os.path.splitext(f)[0]: os.path.join(folder, f) for f in sorted(os.listdir(folder))
                if f.lower().endswith(IMAGE_EXTENSIONS)}
    image_files, mask_files = stems(images), stems(masks)
    missing = sorted(set(image_files) ^ set(mask_files))
    if missing:
        raise ConfigError(f"segmentation: '{missing[0]}' has an image or a mask but not both "
                          f"({len(missing)} unpaired in '{images}' and '{masks}')")
    names = sorted(image_files)
    x, _, _ = _decode([image_files[n] for n in names], channels, threads, "raise")
    y, _, _ = _decode([mask_files[n] for n in names], 1, threads, "raise")
    if x.shape[-2:] != y.shape[-2:]:
        raise ConfigError(f"segmentation: masks are {tuple(y.shape[-2:])}, images {tuple(x.shape[-2:])}")
    y = y[:, 0].long()
    y = torch.where(y == 255, torch.ones_like(y), y)
    return Dataset(x, y, origin=images)
