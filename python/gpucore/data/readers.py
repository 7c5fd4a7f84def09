"""Data sets read by gpucore's native readers (IDX, .npy, PNG/JPEG) into memory.

Each data set holds `inputs` (uint8 N x C x H x W for images) and `targets`, and can be passed to
gpucore.train as train_data/val_data or to gpucore.DataLoader. Errors name the file. Image files
(ImageFolder, Files, CSV) are decoded only when asked: all at once into memory (cache device/host), or
batch by batch on reader threads while training runs (cache none), for data sets larger than memory.
"""
from __future__ import annotations

import csv
import os
import re
import warnings
from typing import Callable, List, Optional, Sequence, Tuple, Union

import torch

from .. import _C, _build_info
from ..errors import ConfigError
from ..values import is_int
from .class_folders import IMAGE_EXTENSIONS, is_system_file, read_class_folder

# The longest shorter side of an image kept in memory at its own size (ImageFiles.images_at_own_size): a 4000 x 3000
# phone photo would take 36 MB decoded; at 512 it takes 1 MB and still leaves a 224 crop room to be drawn.
DEFAULT_MAX_RESOLUTION = 512
# How JPEGs are decoded (data_kwargs decode): "fast", at the DCT scale that keeps what is used at least its output
# size, or "exact", at full size (ImageFiles).
DEFAULT_DECODE = "fast"
_DECODE_MODES = ("fast", "exact")
# Image format by file extension (its reader is optional at build time).
_FORMATS = {".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg"}


def _require_readers(paths: Sequence[str], origin: str) -> None:
    """Fails before any decoding when a file's format has no reader in this build (its library was
    missing when gpucore was built), instead of failing, or being skipped, file by file."""
    for path in paths:
        format_name = _FORMATS.get(os.path.splitext(path)[1].lower())
        if format_name is not None and format_name not in _build_info.IMAGE_FORMATS:
            raise ConfigError(f"{origin}: '{path}' {_C.missing_reader_message(format_name)}")


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


def _threads(threads: Optional[int]) -> int:
    return threads if threads is not None else max(1, min(8, os.cpu_count() or 1))


def _on_error(on_error: str) -> bool:
    if on_error not in ("raise", "skip"):
        raise ConfigError(f"on_error must be 'raise' or 'skip', got '{on_error}'")
    return on_error == "skip"


class LabeledData(torch.utils.data.Dataset):
    """In-memory samples: inputs[i], targets[i].

    Args:
        inputs: N x C x H x W uint8 images (or any features).
        targets: N class indices (or the task's targets).
        classes: class names, or None.
        skipped: the files left out (on_error: skip), with the reason.
        origin: where the data came from, for error messages.
    """

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


def _image_size(size) -> Tuple[int, int]:
    """(height, width) from None (keep; (0, 0)), an int (square) or a pair."""
    if size is None:
        return 0, 0
    pair = (size, size) if isinstance(size, int) else tuple(size)
    if len(pair) != 2 or not all(is_int(v) and v > 0 for v in pair):
        raise ConfigError(f"image size must be a positive int or [height, width] of positive ints, got {size!r}")
    return pair


class ImageFiles(LabeledData):
    """Image files and their targets, decoded on demand.

    `inputs` decodes every file once (on `threads` threads) and keeps the result; gpucore.DataLoader(cache="none")
    and config `cache: none` decode batch by batch instead.

    Args:
        paths: the image files (PNG, JPEG).
        targets: one target per file, or None for segmentation pairs.
        classes: class names, or None.
        channels: 1 (grey) or 3 (RGB): what every image is decoded to.
        size: None (all images must share one size, unless the transforms list starts with RandomResizedCrop or
            Resize + CenterCrop, which crop each image at its own size), an int or (height, width): resized like
            torchvision's Resize (bilinear, antialiased).
        threads: decoding threads (default: the CPU count).
        on_error: "raise", or "skip": leave unreadable files out and list them in `skipped`.
        origin: where the files came from, for error messages.
        mask_paths: segmentation: one mask per image (resized with nearest) instead of `targets`; the decoded
            masks are the targets, as class ids: a palette PNG's indices, a grey PNG's values (white, 255, is class
            1). JPEG masks are refused (lossy compression invents class ids), as are colour masks whose channels
            differ.
        max_resolution: images kept in memory at their own sizes (no size, a transforms list that crops each image:
            images_at_own_size) are kept with their shorter side at most this long, resized down like torchvision's
            Resize(max_resolution) where longer, as FFCV's max_resolution does; 0: at full size.
        exif_orientation: turn each image (and mask) upright as its EXIF orientation tag says, as
            PIL.ImageOps.exif_transpose and torchvision's decode_image(apply_exif_orientation=True) do; False: as
            stored.
        decode: "fast" (default): JPEGs of images at their own sizes are decoded at the DCT scale (1/2, 1/4, 1/8 of
            each side, as Pillow's draft() does) that keeps what the transforms use at least their output size, and
            streamed ones only the part the first transform crops (RandomResizedCrop's box); "exact": every pixel at
            full size, as decoding the whole image (the crop alone still, bit for bit). docs/guides/data.md says how
            far "fast" is from "exact".
        root: the folder the paths are named relative to in the data set's identity (default: their common folder).
        unread: "path: why" of files found beside them and never decoded, for what a run reports as skipped.

    Raises:
        ConfigError: no files, files and targets that differ in number, channels other than 1 or 3, a format whose
            reader was not built, a JPEG mask.
    """

    def __init__(self, paths: Sequence[str], targets: Optional[torch.Tensor], classes: Optional[List[str]] = None, *,
                 channels: int = 3, size=None, threads: Optional[int] = None, on_error: str = "raise",
                 origin: str = "image files", mask_paths: Optional[Sequence[str]] = None,
                 max_resolution: int = DEFAULT_MAX_RESOLUTION, exif_orientation: bool = True,
                 root: Optional[str] = None, unread: Sequence[str] = (), decode: str = DEFAULT_DECODE):
        count = len(mask_paths) if mask_paths is not None else (targets.shape[0] if targets is not None else None)
        if count != len(paths) or (mask_paths is None) == (targets is None):
            raise ConfigError(f"{origin}: {len(paths)} image files need as many targets or mask files (one of the "
                              f"two), got {count}")
        if not paths:
            raise ConfigError(f"{origin}: no image files")
        if channels not in (1, 3):
            raise ConfigError(f"channels must be 1 (grey) or 3 (RGB), got {channels!r}")
        _require_readers(list(paths) + list(mask_paths or []), origin)
        jpeg_mask = next((p for p in mask_paths or [] if _FORMATS.get(os.path.splitext(p)[1].lower()) == "jpeg"), None)
        if jpeg_mask is not None:  # refused before anything is decoded, on_error skip or not; the C++ reader says why
            _C.decode_image(jpeg_mask, 1, mask=True)
        if not isinstance(exif_orientation, bool):
            raise ConfigError(f"exif_orientation must be true or false, got {exif_orientation!r}")
        self.exif_orientation = exif_orientation
        if decode not in _DECODE_MODES:
            raise ConfigError(f"decode must be one of {', '.join(_DECODE_MODES)} ('fast': JPEGs decoded at the DCT "
                              f"scale that keeps what is used at least its output size; 'exact': at full size), got "
                              f"{decode!r}")
        self.decode = decode
        self.paths, self.classes = list(paths), classes
        # The folder the files' names are relative to, for the data set's identity and the val_fraction split.
        self.root = root if root is not None else os.path.commonpath([os.path.dirname(os.path.abspath(p))
                                                                      for p in self.paths])
        self.unread = list(unread)  # "path: why" of files found but never decoded (formats gpucore does not read)
        self.mask_paths = list(mask_paths) if mask_paths is not None else None
        self._targets = targets
        self.channels, self.size, self.threads = channels, _image_size(size), _threads(threads)
        self.skip_errors, self.origin = _on_error(on_error), origin
        if isinstance(max_resolution, bool) or not isinstance(max_resolution, int) or max_resolution < 0:
            raise ConfigError(f"max_resolution must be an integer >= 0 (0: images at full size), got "
                              f"{max_resolution!r}")
        self.max_resolution = max_resolution
        self.skipped: List[str] = []
        self._inputs: Optional[torch.Tensor] = None
        self._own_size: Optional[List[torch.Tensor]] = None

    @property
    def inputs(self) -> torch.Tensor:
        if self._inputs is None:
            images, kept, self.skipped = _C.decode_images(self.paths, self.channels, self.threads, self.skip_errors,
                                                          *self.size, exif_orientation=self.exif_orientation)
            if self.mask_paths is not None:
                masks, mask_kept, mask_skipped = _C.decode_images(self.mask_paths, 1, self.threads, self.skip_errors,
                                                                  *self.size, exif_orientation=self.exif_orientation,
                                                                  mask=True)
                image_row = {path_index: row for row, path_index in enumerate(kept)}
                mask_row = {path_index: row for row, path_index in enumerate(mask_kept)}
                both = sorted(image_row.keys() & mask_row.keys())  # a pair is kept when image and mask both read
                images = images[[image_row[i] for i in both]]
                masks = masks[[mask_row[i] for i in both]]
                if images.shape[1:3] != masks.shape[1:3]:
                    raise ConfigError(f"segmentation '{self.origin}': masks are {tuple(masks.shape[1:3])}, images "
                                      f"{tuple(images.shape[1:3])} (give a size to resize both)")
                self.skipped += mask_skipped
                self.mask_paths = [self.mask_paths[i] for i in both]
                self._targets, kept = _C.mask_classes(masks[..., 0]), both
            else:
                self._targets = self._targets[kept]
            self.paths = [self.paths[i] for i in kept]
            self._inputs = _images_nchw(images)
        return self._inputs

    @property
    def targets(self) -> torch.Tensor:
        """Class labels as given, or the decoded masks' class ids for segmentation pairs."""
        if self.mask_paths is not None:
            self.inputs  # noqa: B018  (decodes the masks with the images)
        return self._targets

    def images_at_own_size(self) -> List[torch.Tensor]:
        """Every image decoded once (on `threads` threads) at its own size, its shorter side at most max_resolution,
        and kept: what a data set of mixed sizes caches for transforms that crop each image at its own size.

        Returns:
            uint8 H x W x C tensors, one per file kept (unreadable ones are left out with on_error skip).
        """
        if self._own_size is None:
            images, kept, skipped, downsized = _C.decode_images_at_own_size(
                self.paths, self.channels, self.threads, self.skip_errors, self.max_resolution, self.exif_orientation,
                self.decode)
            if downsized:  # what FFCV's max_resolution does, said where it happens
                warnings.warn(f"{self.origin}: {downsized} of {len(images)} images have a shorter side longer than "
                              f"max_resolution {self.max_resolution} and are kept in memory resized down to it (config "
                              "key data_kwargs: {max_resolution: N}; 0 keeps them at full size; cache: none reads "
                              "each at full size)", stacklevel=2)
            self.skipped = skipped
            self._targets = self._targets[kept]
            self.paths = [self.paths[i] for i in kept]
            self._own_size = images
        return self._own_size

    @property
    def decoded(self) -> bool:
        return self._inputs is not None or self._own_size is not None

    def __len__(self) -> int:
        return len(self.paths)

    def image_shape(self) -> Tuple[int, int, int]:
        """The shape of one decoded image, from `size` or the first file.

        Returns:
            (channels, height, width).
        """
        if self._inputs is not None:
            return tuple(self._inputs.shape[1:])
        if self.size != (0, 0):
            return (self.channels, *self.size)
        for path in self.paths:  # the first readable one, when unreadable files are skipped
            try:
                first = _C.decode_image(path, self.channels, self.exif_orientation)
                return self.channels, first.shape[0], first.shape[1]
            except ConfigError:
                if not self.skip_errors:
                    raise
        raise ConfigError(f"{self.origin}: none of the {len(self)} image files could be read")

    def nbytes(self) -> int:
        """Memory the decoded uint8 images (and int64 mask class ids) take.

        Returns:
            Bytes.
        """
        channels, height, width = self.image_shape()
        return len(self) * height * width * (channels + (8 if self.mask_paths is not None else 0))

    def subset(self, index: Sequence[int]) -> "ImageFiles":
        """The files at `index`, with their targets (and the decoded images where decoded already).

        Args:
            index: positions in this set.

        Returns:
            A new ImageFiles.
        """
        index = [int(i) for i in index]
        masks = [self.mask_paths[i] for i in index] if self.mask_paths is not None else None
        part = ImageFiles([self.paths[i] for i in index], None if masks is not None else self._targets[index],
                          self.classes, channels=self.channels, size=self.size if self.size != (0, 0) else None,
                          threads=self.threads, on_error="skip" if self.skip_errors else "raise", origin=self.origin,
                          mask_paths=masks, max_resolution=self.max_resolution,
                          exif_orientation=self.exif_orientation, root=self.root, unread=self.unread,
                          decode=self.decode)
        if self._inputs is not None:
            part._inputs, part._targets = self._inputs[index], self._targets[index]
        if self._own_size is not None:
            part._own_size, part._targets = [self._own_size[i] for i in index], self._targets[index]
        return part

    def sample_stats(self, limit: int = 1024, own_sizes: bool = False) -> Tuple[list, list]:
        """Per-channel mean and standard deviation of the images scaled to [0, 1]: exact when decoded, else from up to
        `limit` files spread evenly over the set (streaming never decodes the whole set for it).

        Args:
            limit: the most files read when the set is not decoded.
            own_sizes: of the images at their own sizes, as images_at_own_size keeps them (shorter side at most
                max_resolution), instead of resized to one size.

        Returns:
            (mean, std), one value per channel each.
        """
        from .tensor_inputs import input_stats, pixel_stats

        if own_sizes:
            images = self._own_size
            if images is None:
                step = max(1, len(self) // limit)
                images = _C.decode_images_at_own_size(self.paths[::step][:limit], self.channels, self.threads, True,
                                                      self.max_resolution, self.exif_orientation, self.decode)[0]
            if not images:
                raise ConfigError(f"{self.origin}: none of the sampled image files could be read")
            return pixel_stats(image.reshape(-1, self.channels).t() for image in images)  # H x W x C each
        if self._inputs is not None:
            return input_stats(self._inputs)
        step = max(1, len(self) // limit)
        images, _, _ = _C.decode_images(self.paths[::step][:limit], self.channels, self.threads, True,
                                        *self.image_shape()[1:], exif_orientation=self.exif_orientation)
        if images.shape[0] == 0:
            raise ConfigError(f"{self.origin}: none of the sampled image files could be read")
        return input_stats(_images_nchw(images))

    def __getitem__(self, index):
        return self.inputs[index], self.targets[index]

    def __repr__(self) -> str:
        return (f"ImageFiles({self.origin}: {len(self)} files" + (f", {len(self.classes)} classes" if self.classes else "")
                + (f", resized to {self.size[0]}x{self.size[1]}" if self.size != (0, 0) else "")
                + (f", {len(self.skipped)} skipped" if self.skipped else "") + ")")


def _images_nchw(images: torch.Tensor) -> torch.Tensor:
    return images.permute(0, 3, 1, 2).contiguous()


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
        raise ConfigError(f"image folder '{root}' holds no .png/.jpg/.jpeg files in its class subfolders")
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
                 on_error: str = "raise", *, exif_orientation: bool = True) -> ImageFiles:
    """An image folder and a mask folder paired by file name (without extension); decoded on demand, into memory or
    streamed. Masks are PNGs of class ids, a palette's indices or grey values (white, 255, is class 1), and get the
    images' geometric transforms; JPEG masks and colour masks whose channels differ are refused.

    Args:
        images: the images' folder.
        masks: the masks' folder.
        channels: the images' channels, 1 or 3.
        size: None, an int or (height, width): images resized bilinearly, masks with nearest.
        threads: decoding threads (default: the CPU count).
        on_error: "raise", or "skip" to leave unreadable pairs out.
        exif_orientation: turn each image and mask upright as its EXIF orientation tag says (default); False: as
            stored.

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
                      exif_orientation=exif_orientation)
