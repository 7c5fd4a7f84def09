"""Data sets read by gpucore's native readers (IDX, .npy, PNG/JPEG) into memory.

Each data set holds `inputs` (uint8 N x C x H x W for images) and `targets`, and can be passed to
gpucore.train as train_data/val_data or to gpucore.DataLoader. Errors name the file. Arrays are read into memory
(LabeledData, labeled_data.py); image files (ImageFolder, Files, CSV) are ImageFiles (image_files.py), decoded only
when asked: all at once into memory (cache device/host), or batch by batch on reader threads while training runs
(cache none), for data sets larger than memory.
"""
from __future__ import annotations

import inspect
import os
from typing import Callable, List, Optional, Sequence, Tuple, Union

import torch

from .. import _C
from ..errors import ConfigError
from ..values import is_int
from .class_folders import IMAGE_EXTENSIONS, READ_FORMATS, is_system_file, read_class_folder
from .image_files import DEFAULT_DECODE, DEFAULT_MAX_RESOLUTION, ImageFiles
from . import label_files
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
               classes: Optional[Sequence[str]] = None, channels: int = 3, size=None, threads: Optional[int] = None,
               on_error: str = "raise", max_resolution: int = DEFAULT_MAX_RESOLUTION, exif_orientation: bool = True,
               decode: str = DEFAULT_DECODE) -> ImageFiles:
    """Images from a list of files with `labels`, or labels computed from each file's name; decoded on demand.

    Args:
        paths: the image files.
        labels: one label per file: a class name (the classes are sorted(set(labels)) unless `classes` gives
            them), an integer class id, or any targets torch.as_tensor takes (a list of ids per file: captcha).
        label_from_name: instead of labels, a function of a file's name without extension (captcha_labels).
        classes: the class names in target order; labels are then names of it or indices into it.
        channels: 1 (grey) or 3 (RGB).
        size: None, an int or (height, width) to resize to.
        threads: decoding threads (default: the CPU count).
        on_error: "raise", or "skip" to leave unreadable files out.
        max_resolution: the longest shorter side of an image cached at its own size (ImageFiles); 0: full size.
        exif_orientation: turn each image upright as its EXIF orientation tag says (default); False: as stored.
        decode: "fast" or "exact", how JPEGs are decoded (ImageFiles).

    Returns:
        ImageFiles; `classes` the class names of labels given by name (or `classes`), else None.

    Raises:
        ConfigError: both or neither of labels and label_from_name, as many labels as files needed, names mixed with
            ids, an empty name, a label `classes` lacks (naming the file).
    """
    paths = list(paths)
    if (labels is None) == (label_from_name is None):
        raise ConfigError("read_files needs either labels or label_from_name")
    if labels is None:
        labels = [label_from_name(os.path.splitext(os.path.basename(p))[0]) for p in paths]
    labels = list(labels)
    if len(labels) != len(paths):
        raise ConfigError(f"read_files: {len(paths)} files but {len(labels)} labels")
    if classes is not None or any(isinstance(label, str) for label in labels):
        targets, classes = label_files.encode_single(labels, [f"file '{p}'" for p in paths], "label",
                                         "read_files", None if classes is None else [str(c) for c in classes])
    else:
        targets = torch.as_tensor(labels)
    return ImageFiles(paths, targets, classes, channels=channels, size=size, threads=threads,
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


def read_label_file(path: str, image_column: Optional[str] = None,
                    label_column: Union[str, Sequence[str], None] = None,
                    root: Union[str, Sequence[str], None] = None, channels: int = 3, size=None,
                    threads: Optional[int] = None, on_error: str = "raise", *,
                    multi_label: Optional[bool] = None, classes: Optional[Sequence[str]] = None,
                    separator: str = label_files.DEFAULT_SEPARATOR, exif_orientation: bool = True,
                    max_resolution: int = DEFAULT_MAX_RESOLUTION, decode: str = DEFAULT_DECODE) -> ImageFiles:
    """Images listed in a label file with their labels, as Kaggle (labels.csv, train.csv) and Hugging Face
    (metadata.csv, metadata.jsonl) ship them: a CSV (.tsv: tab-separated) or JSON Lines file (.jsonl) with a row per
    image, its file and its label.

    Labels are class names (the classes are sorted(set(labels)) unless `classes` gives them) or integer class ids
    (no class names; as many classes as the largest id + 1). Several labels per image (multi-label, multi-hot targets
    for loss bce_with_logits or multilabel_soft_margin) come as a JSON list, as one CSV cell of labels separated by
    spaces, '|', ';' or ',' (`multi_label=True`; an empty cell is an image with none of the labels), or as one 0/1
    column per class (`label_column=[names]`: the columns are the classes, in that order).

    Args:
        path: the label file (.csv, .tsv or .jsonl).
        image_column: the column of image files (default: the one column named file_name, filename, file, image,
            image_id, path, id, ...; label_files.IMAGE_COLUMNS).
        label_column: the column of labels (default: the one named label, labels, class, category, target, breed,
            tags, ...; label_files.LABEL_COLUMNS, or the other column of two), or a list of 0/1 columns, one per class.
        root: the folder the files are relative to (default: the label file's folder), or several, each file taken
            from the first that holds it (Kaggle: the label file's folder and train/). A file named without extension
            (Kaggle's ids) is found as NAME.png, NAME.jpg or NAME.jpeg.
        channels: 1 (grey) or 3 (RGB).
        size: None, an int or (height, width) to resize to.
        threads: decoding threads (default: the CPU count).
        on_error: "raise", or "skip" to leave unreadable (and missing) files out.
        multi_label: several labels per row; None: where a JSONL label is a list.
        classes: the class names in target order (a validation or test file: the training set's); labels may then
            be names or indices into it.
        separator: where a multi-label CSV cell separates its labels (a regular expression).
        exif_orientation: turn each image upright as its EXIF orientation tag says (default); False: as stored.
        max_resolution: the longest shorter side of an image cached at its own size (ImageFiles); 0: full size.
        decode: "fast" or "exact", how JPEGs are decoded (ImageFiles).

    Returns:
        ImageFiles; `classes` the class names (None for integer ids); multi-label: float32 N x classes targets.

    Raises:
        ConfigError: no rows, a missing or ambiguous column, an empty label or file, a file that does not exist (or
            fits two files by its name without extension), a file listed twice, names mixed with ids, a label that
            is not one of `classes`, a 0/1 column with another value; each naming the line.
    """
    columns_form = label_column is not None and not isinstance(label_column, str)
    if columns_form:
        if not isinstance(label_column, (list, tuple)) or not label_column or not all(
                isinstance(c, str) and c for c in label_column):
            raise ConfigError(f"label_column must be a column name or a non-empty list of column names (one 0/1 "
                              f"column per class), got {label_column!r}")
        if len(set(label_column)) != len(label_column):
            raise ConfigError(f"label_column lists a column twice: {list(label_column)}")
        if classes is not None:
            raise ConfigError("with label_column=[columns] the columns are the classes; leave classes out")
    if classes is not None:
        classes = [str(c) for c in classes]
        if not classes or len(set(classes)) != len(classes):
            raise ConfigError(f"classes must be distinct names, got {classes}")
    table = label_files.read_table(path)
    image_column = label_files.pick_column(table, image_column, label_files.IMAGE_COLUMNS, "image files",
                                           "image_column")
    if columns_form:
        missing = [c for c in label_column if c not in table.columns]
        if missing:
            raise ConfigError(f"{table.kind} '{path}' has columns {table.columns}; expected '{image_column}', "
                              f"{', '.join(repr(c) for c in label_column)} (missing: {', '.join(missing)})")
    else:
        label_column = label_files.pick_column(table, label_column, label_files.LABEL_COLUMNS, "labels",
                                               "label_column", exclude=[image_column])
    roots = ([os.path.dirname(os.path.abspath(path))] if root is None
             else [os.fspath(root)] if isinstance(root, (str, os.PathLike)) else [os.fspath(r) for r in root])
    if not roots:
        raise ConfigError("root must be a folder or a non-empty list of folders")
    targets, classes = label_files.labels_of(table, label_column, multi_label, classes, separator)
    files = label_files.resolve_files(table, image_column, roots, check=on_error == "raise")
    return ImageFiles(files, targets, classes, channels=channels, size=size, threads=threads, on_error=on_error,
                      origin=f"{table.kind} '{path}'", max_resolution=max_resolution,
                      exif_orientation=exif_orientation, root=roots[0], decode=decode)


def read_csv(path: str, image_column: Optional[str] = None, label_column: Union[str, Sequence[str], None] = None,
             root: Union[str, Sequence[str], None] = None, channels: int = 3, size=None, threads: Optional[int] = None,
             on_error: str = "raise", **options) -> ImageFiles:
    """Images listed in a CSV file with their labels: read_label_file, which reads JSON Lines as well.

    Args:
        path: the CSV file.
        image_column: the column of image files (default: the one of the usual names).
        label_column: the column of labels (default: the one of the usual names), or a list of 0/1 columns.
        root: the folder (or folders) the files are relative to (default: the CSV's folder).
        channels: 1 (grey) or 3 (RGB).
        size: None, an int or (height, width) to resize to.
        threads: decoding threads (default: the CPU count).
        on_error: "raise", or "skip" to leave unreadable files out.
        **options: read_label_file's multi_label, classes, separator, exif_orientation, max_resolution, decode.

    Returns:
        ImageFiles.
    """
    return read_label_file(path, image_column, label_column, root, channels, size, threads, on_error, **options)


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


def reader_keywords(reader: Callable, set_by_caller: Sequence[str] = ()) -> Tuple[str, ...]:
    """The keyword arguments reader `reader` takes (its parameters with a default, the paths not), without those
    `set_by_caller`: what config key data_kwargs may give it, as messages list them."""
    return tuple(name for name, parameter in inspect.signature(reader).parameters.items()
                 if parameter.default is not inspect.Parameter.empty and name not in set_by_caller)


# How every image reader decodes (image folders, label files, segmentation pairs): the data_kwargs that carry over
# from a run's own data to other image data evaluated with its model.
DECODE_KEYWORDS = tuple(key for key in reader_keywords(read_image_folder)
                        if key in reader_keywords(read_label_file) and key in reader_keywords(read_segmentation))
