"""Data sets read by gpucore's native readers (IDX, .npy, PNG/JPEG) into memory.

Each data set holds `inputs` (uint8 N x C x H x W for images) and `targets`, and can be passed to
gpucore.train as train_data/val_data or to gpucore.DataLoader. Errors name the file. Arrays are read into memory
(LabeledData, labeled_data.py); image files (ImageFolder, Files, CSV) are ImageFiles (image_files.py), decoded only
when asked: all at once into memory (cache device/host), or batch by batch on reader threads while training runs
(cache none), for data sets larger than memory.
"""
from __future__ import annotations

import csv
import os
import re
from typing import Callable, List, Optional, Sequence, Tuple, Union

import torch

from .. import _C
from ..errors import ConfigError
from ..values import is_int
from .class_folders import IMAGE_EXTENSIONS, READ_FORMATS, is_system_file, read_class_folder
from .image_files import DEFAULT_DECODE, DEFAULT_MAX_RESOLUTION, ImageFiles
from .labeled_data import LabeledData


def set_max_image_pixels(pixels: int) -> None:
    """The most pixels an image file may claim in its header; a larger claim is that file's error, checked before
    decoding allocates anything.

    Args:
        pixels: the limit (default 178,956,970, Pillow's error threshold; 0: no limit).

    Raises:
        ConfigError: not an integer >= 0.
    """
    if not is_int(pixels):
        raise ConfigError(f"max image pixels must be an integer >= 0 (0: no limit), got {pixels!r}")
    _C.set_max_image_pixels(pixels)


def max_image_pixels() -> int:
    """The most pixels an image file may claim in its header (set_max_image_pixels).

    Returns:
        The limit; 0: no limit.
    """
    return _C.max_image_pixels()


def read_idx(images: str, labels: str) -> LabeledData:
    """MNIST-style IDX image and label files (Fashion-MNIST, MNIST, EMNIST), plain or .gz.

    Args:
        images: the images file (...-images-idx3-ubyte[.gz]).
        labels: the labels file (...-labels-idx1-ubyte[.gz]).

    Returns:
        LabeledData: uint8 N x 1 x H x W images and int64 labels.

    Raises:
        ConfigError: a wrong magic number, a truncated file, counts that differ (naming the file).
    """
    x, y = _C.read_idx(images), _C.read_idx(labels)
    if x.dim() != 3:
        raise ConfigError(f"IDX images '{images}' have {x.dim()} dimensions; expected N x H x W")
    if y.dim() != 1 or y.shape[0] != x.shape[0]:
        raise ConfigError(f"IDX labels '{labels}' hold {tuple(y.shape)} for {x.shape[0]} images in '{images}'")
    return LabeledData(x.unsqueeze(1), y.long(), origin=images)


def read_npy(inputs: str, targets: str) -> LabeledData:
    """Arrays saved with numpy.save.

    Args:
        inputs: the inputs' .npy: images uint8 (N, H, W) or (N, C, H, W), or any float features.
        targets: the targets' .npy.

    Returns:
        LabeledData.

    Raises:
        ConfigError: a corrupt file, a shape the file does not hold, counts that differ.
    """
    return _arrays(_C.read_npy(inputs), _C.read_npy(targets), inputs)


def _arrays(x: torch.Tensor, y: torch.Tensor, origin: str) -> LabeledData:
    """Arrays as a data set: uint8 (N, H, W) images get their channel, integer targets become int64."""
    if x.dtype == torch.uint8 and x.dim() == 3:
        x = x.unsqueeze(1)
    return LabeledData(x, y if y.is_floating_point() else y.long(), origin=origin)


def read_npz(path: str, inputs: str = "x", targets: str = "y") -> LabeledData:
    """Two arrays of an archive saved with numpy.savez or savez_compressed, by name; images as read_npy takes them.

    Args:
        path: the .npz file.
        inputs: the inputs' array name.
        targets: the targets' array name.

    Returns:
        LabeledData.

    Raises:
        ConfigError: a missing array, a corrupt member (CRC checked), counts that differ.
    """
    arrays = _C.read_npz(path)
    missing = [name for name in (inputs, targets) if name not in arrays]
    if missing:
        raise ConfigError(f".npz file '{path}' has no array '{missing[0]}'; it holds {sorted(arrays)}")
    return _arrays(arrays[inputs], arrays[targets], path)


def from_tensors(inputs: torch.Tensor, targets: torch.Tensor) -> LabeledData:
    """Samples already in memory.

    Args:
        inputs: N x C x H x W uint8 images (or any features).
        targets: N targets.

    Returns:
        LabeledData.
    """
    return LabeledData(inputs, targets)


def read_image_folder(root: str, channels: int = 3, size=None, threads: Optional[int] = None,
                      on_error: str = "raise", max_resolution: int = DEFAULT_MAX_RESOLUTION, *,
                      classes: Optional[Sequence[str]] = None, classes_from: Optional[str] = None,
                      allow_empty: bool = False, exif_orientation: bool = True,
                      decode: str = DEFAULT_DECODE) -> ImageFiles:
    """One subfolder per class of PNG/JPEG images, read as torchvision's ImageFolder reads it (the sorted subfolder
    names are the classes; nested subfolders of a class are read, links followed), decoded on demand.

    Args:
        root: the folder.
        channels: 1 (grey) or 3 (RGB).
        size: None (the images' own sizes: one size, or mixed sizes for a transforms list that starts with
            RandomResizedCrop or Resize + CenterCrop), an int or (height, width) to resize to.
        threads: decoding threads (default: the CPU count).
        on_error: "raise", or "skip" to leave unreadable files out.
        max_resolution: the longest shorter side of an image cached at its own size (ImageFiles); 0: full size.
        classes: label by these class names, in this order (a validation or test folder: the training set's
            classes); a subfolder that is not one of them is a ConfigError, a class without a subfolder a warning.
            None: the folder's own subfolders.
        classes_from: where `classes` came from, for messages ("training folder 'data/train'", "the model").
        allow_empty: a class folder without images is a class all the same (else a ConfigError naming it).
        exif_orientation: turn each image upright as its EXIF orientation tag says (default); False: as stored.
        decode: "fast" (JPEGs decoded at a reduced DCT scale where what is used stays at least its output size) or
            "exact" (at full size); ImageFiles.

    Returns:
        ImageFiles; its `classes` are the class names, `unread` the image files of formats gpucore does not decode.

    Raises:
        ConfigError: a missing folder, no class subfolders, an empty class folder, a class `classes` lacks.
    """
    folder = read_class_folder(root, classes, allow_empty, classes_from)
    if not folder.paths:
        raise ConfigError(f"image folder '{root}' holds no image files ({READ_FORMATS}) in its class subfolders")
    return ImageFiles(folder.paths, torch.tensor(folder.labels), folder.classes, channels=channels, size=size,
                      threads=threads, on_error=on_error, origin=root, max_resolution=max_resolution,
                      exif_orientation=exif_orientation, root=root, unread=folder.unread, decode=decode)


def read_files(paths: Sequence[str], labels: Optional[Sequence] = None, *, label_from_name: Optional[Callable] = None,
          channels: int = 3, size=None, threads: Optional[int] = None, on_error: str = "raise",
          max_resolution: int = DEFAULT_MAX_RESOLUTION, exif_orientation: bool = True,
          decode: str = DEFAULT_DECODE) -> ImageFiles:
    """Images from a list of files with `labels`, or labels computed from each file's name; decoded on demand.

    Args:
        paths: the image files.
        labels: one label per file.
        label_from_name: instead of labels, a function of a file's name without extension (captcha_labels).
        channels: 1 (grey) or 3 (RGB).
        size: None, an int or (height, width) to resize to.
        threads: decoding threads (default: the CPU count).
        on_error: "raise", or "skip" to leave unreadable files out.
        max_resolution: the longest shorter side of an image cached at its own size (ImageFiles); 0: full size.
        exif_orientation: turn each image upright as its EXIF orientation tag says (default); False: as stored.
        decode: "fast" or "exact", how JPEGs are decoded (ImageFiles).

    Returns:
        ImageFiles.

    Raises:
        ConfigError: both or neither of labels and label_from_name, as many labels as files needed.
    """
    paths = list(paths)
    if (labels is None) == (label_from_name is None):
        raise ConfigError("Files needs either labels or label_from_name")
    if labels is None:
        labels = [label_from_name(os.path.splitext(os.path.basename(p))[0]) for p in paths]
    if len(labels) != len(paths):
        raise ConfigError(f"Files: {len(paths)} files but {len(labels)} labels")
    return ImageFiles(paths, torch.as_tensor(labels), channels=channels, size=size, threads=threads,
                      on_error=on_error, origin=f"{len(paths)} files", max_resolution=max_resolution,
                      exif_orientation=exif_orientation, decode=decode)


def captcha_labels(alphabet: str, length: int) -> Callable[[str], List[int]]:
    """A label_from_name for captcha images named by their text ("a3x9.png", or "a3x9_17.png").

    Args:
        alphabet: the characters, in class order.
        length: characters per captcha.

    Returns:
        A function of a file name giving one class index per character (it raises ConfigError for a name that is not
        `length` characters of the alphabet).
    """
    index = {character: i for i, character in enumerate(alphabet)}

    def label(name: str) -> List[int]:
        text = name.split("_")[0]
        if len(text) != length or any(c not in index for c in text):
            raise ConfigError(f"captcha file name '{name}' is not {length} characters of '{alphabet}'")
        return [index[c] for c in text]
    return label


def read_csv(path: str, image_column: str = "image", label_column: Union[str, Sequence[str]] = "label",
             root: Optional[str] = None, channels: int = 3, size=None, threads: Optional[int] = None,
             on_error: str = "raise", *, multi_label: bool = False,
             classes: Optional[Sequence[str]] = None, exif_orientation: bool = True) -> ImageFiles:
    """Images listed in a CSV file with their labels: an integer class per row, or several labels per row
    (multi-label, multi-hot targets for loss multilabel_soft_margin or bce_with_logits).

    Multi-label CSVs come in two forms: one column of labels separated by spaces (or ';'), class names or integer
    class ids (`multi_label=True`; an empty cell is an image with none of the labels), or one 0/1 column per class
    (`label_column=[names]`: the columns are the classes, in that order).

    Args:
        path: the CSV file.
        image_column: the column of image paths.
        label_column: the column of labels, or a list of 0/1 columns, one per class (multi-label).
        root: the folder the paths are relative to (default: the CSV's folder).
        channels: 1 (grey) or 3 (RGB).
        size: None, an int or (height, width) to resize to.
        threads: decoding threads (default: the CPU count).
        on_error: "raise", or "skip" to leave unreadable files out.
        multi_label: the label column holds several labels per row, separated by spaces.
        classes: with multi_label, the class names in target order (default: the names found, sorted; for integer
            ids, none, and as many classes as the largest id + 1). Labels may then be names or indices.
        exif_orientation: turn each image upright as its EXIF orientation tag says (default); False: as stored.

    Returns:
        ImageFiles; multi-label: float32 N x classes targets of 0 and 1, and `classes` the class names.

    Raises:
        ConfigError: a missing column, a label that is not an integer (single label), a label that is not a class,
            a 0/1 column with another value.
    """
    columns_form = not isinstance(label_column, str)
    if columns_form:
        if not isinstance(label_column, (list, tuple)) or not label_column or not all(
                isinstance(c, str) and c for c in label_column):
            raise ConfigError(f"read_csv: label_column must be a column name or a non-empty list of column names (one "
                              f"0/1 column per class), got {label_column!r}")
        if len(set(label_column)) != len(label_column):
            raise ConfigError(f"read_csv: label_column lists a column twice: {list(label_column)}")
        if classes is not None:
            raise ConfigError("read_csv: with label_column=[columns] the columns are the classes; leave classes out")
    if classes is not None:
        if not multi_label:
            raise ConfigError("read_csv: classes is for multi-label CSVs; pass multi_label=True (labels separated by "
                              "spaces) or label_column=[one 0/1 column per class]")
        classes = [str(c) for c in classes]
        if not classes or len(set(classes)) != len(classes):
            raise ConfigError(f"read_csv: classes must be distinct names, got {classes}")
    label_columns = list(label_column) if columns_form else [label_column]
    root = root if root is not None else os.path.dirname(os.path.abspath(path))
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        rows = []
        for row in reader:
            rows.append((reader.line_num, row))  # the file's line of the row's end (the header is line 1)
        columns = reader.fieldnames or []
    missing = [c for c in [image_column, *label_columns] if c not in columns]
    if rows and missing:
        expected = ", ".join(f"'{c}'" for c in [image_column, *label_columns])
        raise ConfigError(f"CSV '{path}' has columns {list(columns)}; expected {expected} (missing: "
                          f"{', '.join(missing)})")
    files, labels = [], []
    for line, row in rows:
        where = f"CSV '{path}' line {line}"
        image, values = row.get(image_column), [row.get(c) for c in label_columns]
        if image is None or any(value is None for value in values):
            named = " and ".join(f"'{c}'" for c in [image_column, *label_columns])
            raise ConfigError(f"{where} has {sum(value is not None for value in row.values())} of the header's "
                              f"{len(columns)} columns; every row needs {named}")
        if not image.strip():
            raise ConfigError(f"{where}: column '{image_column}' is empty; expected an image path (relative to "
                              f"'{root}')")
        if columns_form:
            flags = []
            for column, value in zip(label_columns, values):
                if value.strip() not in ("0", "1"):
                    raise ConfigError(f"{where}: column '{column}' is {value!r}; expected 0 or 1 (whether the image "
                                      f"has class '{column}')")
                flags.append(float(value.strip()))
            labels.append(flags)
        elif multi_label:
            labels.append((where, [token for token in re.split(r"[\s;]+", values[0].strip()) if token]))
        else:
            try:
                labels.append(int(values[0]))
            except ValueError:
                hint = ("; for several labels per row pass multi_label=True (labels separated by spaces) or "
                        "label_column=[one 0/1 column per class]") if len(values[0].split()) > 1 else ""
                raise ConfigError(f"{where}: column '{label_column}' is {values[0]!r}; expected an integer class id "
                                  f"(0, 1, ...){hint}") from None
        files.append(os.path.join(root, image))
        if on_error == "raise" and not os.path.isfile(files[-1]):
            raise ConfigError(f"{where}: image '{image}' does not exist (looked for '{files[-1]}'; paths are "
                              f"relative to '{root}')")
    if columns_form:
        targets = torch.tensor(labels, dtype=torch.float32).reshape(len(labels), len(label_columns))
        return ImageFiles(files, targets, list(label_columns), channels=channels, size=size, threads=threads,
                          on_error=on_error, origin=f"CSV '{path}'", exif_orientation=exif_orientation)
    if multi_label:
        targets, classes = _multi_hot(path, label_column, labels, classes)
        return ImageFiles(files, targets, classes, channels=channels, size=size, threads=threads, on_error=on_error,
                          origin=f"CSV '{path}'", exif_orientation=exif_orientation)
    return read_files(files, labels, channels=channels, size=size, threads=threads, on_error=on_error,
                      exif_orientation=exif_orientation)


def _multi_hot(path: str, column: str, rows: List[Tuple[str, List[str]]],
               classes: Optional[List[str]]) -> Tuple[torch.Tensor, Optional[List[str]]]:
    """read_csv(multi_label=True): the rows' labels as float32 N x classes of 0 and 1, and the class names (None for
    integer ids without `classes`)."""
    tokens = [token for _, row in rows for token in row]
    if classes is None:
        names = sorted({t for t in tokens if not _is_id(t)})
        ids = [t for t in tokens if _is_id(t)]
        if names and ids:
            raise ConfigError(f"CSV '{path}' column '{column}' mixes class names ({names[0]!r}) and integer class ids "
                              f"({ids[0]!r}); use one or the other, or pass classes=[names] so ids index them")
        if ids and min(int(t) for t in ids) < 0:
            raise ConfigError(f"CSV '{path}' column '{column}' has class id {min(int(t) for t in ids)}; ids are 0, 1, "
                              "...")
        count = len(names) if names else (max(int(t) for t in ids) + 1 if ids else 0)
        if count == 0:
            raise ConfigError(f"CSV '{path}' column '{column}' has no labels at all; a multi-label CSV needs class "
                              "names or ids separated by spaces (or pass classes=[names])")
        classes_out = names or None
    else:
        count, classes_out = len(classes), classes
    index = {name: i for i, name in enumerate(classes_out or [])}
    targets = torch.zeros(len(rows), count, dtype=torch.float32)
    for row_index, (where, row) in enumerate(rows):
        for token in row:
            if token in index:
                targets[row_index, index[token]] = 1.0
            elif _is_id(token) and 0 <= int(token) < count:
                targets[row_index, int(token)] = 1.0
            else:
                valid = (f"one of {', '.join(classes_out)} or an index 0 to {count - 1}" if classes_out else
                         f"an index 0 to {count - 1}")
                raise ConfigError(f"{where}: column '{column}' has label {token!r}, not a class; expected {valid}")
    return targets, classes_out


def _is_id(token: str) -> bool:
    """A CSV label written as an integer class id."""
    return re.fullmatch(r"-?[0-9]+", token) is not None


def read_segmentation(images: str, masks: str, channels: int = 3, size=None, threads: Optional[int] = None,
                 on_error: str = "raise", *, exif_orientation: bool = True,
                 reduce_zero_label: bool = False) -> ImageFiles:
    """An image folder and a mask folder paired by file name (without extension); decoded on demand, into memory or
    streamed. Masks are PNGs (or BMP, GIF and TIFF files of mode P or L) of class ids, a palette's indices or grey
    values, read by one rule for the whole set (image_files.mask_table): 255 is void (VOC's borders; config key
    ignore_index, unset, ignores it), except in black-and-white masks (0 and 255 the only values in the set), where it
    is class 1. They get the images' geometric transforms; JPEG masks and colour masks whose channels differ are
    refused.

    Args:
        images: the images' folder.
        masks: the masks' folder.
        channels: the images' channels, 1 or 3.
        size: None, an int or (height, width): images resized bilinearly, masks with nearest.
        threads: decoding threads (default: the CPU count).
        on_error: "raise", or "skip" to leave unreadable pairs out.
        exif_orientation: turn each image and mask upright as its EXIF orientation tag says (default); False: as
            stored.
        reduce_zero_label: masks of ADE20K's convention: 0 ("other") is void and value v is class v - 1
            (mmsegmentation's reduce_zero_label).

    Returns:
        ImageFiles whose targets are the masks.

    Raises:
        ConfigError: an image without its mask or the reverse, a JPEG mask.
    """
    def stems(folder):
        if not os.path.isdir(folder):
            raise ConfigError(f"segmentation folder '{folder}' does not exist")
        return {os.path.splitext(f)[0]: os.path.join(folder, f) for f in sorted(os.listdir(folder))
                if f.lower().endswith(IMAGE_EXTENSIONS) and not is_system_file(f)}
    image_files, mask_files = stems(images), stems(masks)
    missing = sorted(set(image_files) ^ set(mask_files))
    if missing:
        raise ConfigError(f"segmentation: '{missing[0]}' has an image or a mask but not both "
                          f"({len(missing)} unpaired in '{images}' and '{masks}')")
    names = sorted(image_files)
    return ImageFiles([image_files[n] for n in names], None, channels=channels, size=size, threads=threads,
                      on_error=on_error, origin=images, mask_paths=[mask_files[n] for n in names],
                      exif_orientation=exif_orientation, reduce_zero_label=reduce_zero_label)
