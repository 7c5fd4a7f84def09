"""Training data for gpucore.train (config key `data`): the built-in data sets (Fashion-MNIST here, the synthetic
ones in synthetic.py), IDX/.npy/.npz files (read into memory as (inputs, targets) tensors) and image folders of class
subfolders or of images/ and masks/ (gpucore.data.ImageFiles, decoded into memory or streamed, as config key `cache`
says: plan.py's choose_cache decides, epoch_data.py serves it); data without a validation split of its own gets the
seeded val_fraction share held out (split.py).
"""
from __future__ import annotations

import math
import os
from typing import Callable, List, Optional, Sequence, Tuple

import torch

from .. import _C

from ..errors import ConfigError
from ..values import is_int
from . import label_files, readers
from .clip_sequences import ClipSequences
from .image_files import ImageFiles
from .sign_layouts import find_sign_layout, gloss_vocabulary, read_sign_layout, sign_layout_splits
from .split import split
from .synthetic import CAPTCHA_ALPHABET, synthetic_captcha, synthetic_fashion, synthetic_sequences

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
    """The held-out subfolders (HELD_OUT_FOLDERS, in that order) beside train/ of data folder `name` (a sign-language
    layout's dev and test splits by the names that read them: validation, test); none for other data."""
    path = os.path.expanduser(name)
    if find_sign_layout(path) is not None:  # its dev and test splits, by the names that read them (_SIGN_SPLITS)
        splits = sign_layout_splits(path)
        return [folder for folder, split in (("validation", "dev"), ("test", "test")) if split in splits]
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

    if find_sign_layout(path) is not None:
        return _sign_language_folder(path, kwargs, classes, held_out)
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


# A sign-language layout's split served as the held-out split for each of HELD_OUT_FOLDERS' names.
_SIGN_SPLITS = {"validation": "dev", "val": "dev", "valid": "dev", "test": "test"}


def _sign_language_folder(path: str, kwargs: dict, vocabulary: Optional[List[str]], held_out: Sequence[str]):
    """(train, held-out) clips of a sign-language layout (sign_layouts.py: CE-CSL, PHOENIX-2014, labels.csv): its dev
    split (or test, the first of `held_out` it has), by the training split's gloss vocabulary or `vocabulary` (a
    trained model's); config key data_kwargs gives ClipSequences' keywords (size, frame_stride, rescale, ...) and
    on_error. The held-out split is never rescaled."""
    options = dict(kwargs)
    on_error = options.pop("on_error", "raise")
    layout = read_sign_layout(path, on_error)
    vocabulary = list(vocabulary) if vocabulary else gloss_vocabulary(layout.splits["train"])
    split = next((_SIGN_SPLITS[name] for name in held_out if _SIGN_SPLITS.get(name) in layout.splits), None)
    try:
        train = ClipSequences(layout.splits["train"], vocabulary, on_error=on_error, **options)
        val = None if split is None else ClipSequences(layout.splits[split], vocabulary, split=split,
                                                       on_error=on_error, **{**options, "rescale": 0.0})
    except TypeError as exc:
        raise ConfigError(f"config key 'data_kwargs' does not fit the clips of sign-language folder '{path}' "
                          f"({', '.join(readers.reader_keywords(ClipSequences.__init__, ('split',)))}): "
                          f"{exc}") from exc
    return train, val


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
