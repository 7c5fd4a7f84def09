"""ImageFiles: image files (PNG, JPEG, and the formats read through Pillow: pillow_formats.py) and their targets,
decoded only when asked: all at once into memory (cache device/host), at their own sizes for transforms that crop each
image, or batch by batch on reader threads while training runs (cache none), for data sets larger than memory. The
readers of image files (readers.py: read_image_folder, read_files, read_csv, read_segmentation) return it.
"""
from __future__ import annotations

import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional, Sequence, Tuple

import torch

from .. import _C, _build_info
from ..errors import ConfigError
from ..values import is_int
from .labeled_data import LabeledData

# The longest shorter side of an image kept in memory at its own size (ImageFiles.images_at_own_size): a 4000 x 3000
# phone photo would take 36 MB decoded; at 512 it takes 1 MB and still leaves a 224 crop room to be drawn.
DEFAULT_MAX_RESOLUTION = 512
# How JPEGs are decoded (data_kwargs decode): "fast", at the DCT scale that keeps what is used at least its output
# size, or "exact", at full size (ImageFiles).
DEFAULT_DECODE = "fast"
_DECODE_MODES = ("fast", "exact")
# Image format by file extension (its reader is optional at build time).
_FORMATS = {".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg"}
# The class id of void (unlabelled) mask pixels: VOC's object borders and Cityscapes trainIds' 255, kept as 255 (and
# ADE20K's 0 with reduce_zero_label). Config key ignore_index, unset, is this value for mask folders, so that no loss
# or metric counts them.
MASK_VOID = 255


def mask_table(values: torch.Tensor, reduce_zero_label: bool) -> torch.Tensor:
    """The one rule by which gpucore reads segmentation masks: each uint8 mask value's class id (int64[256]), for a
    data set whose masks hold `values` (bool[256]: the values present anywhere in the set; decided per set, never per
    file, so that a VOC mask that holds only background and border is read as the others are).

    - reduce_zero_label (ADE20K, mmsegmentation's convention): 0 ("other") is void, values 1 to 254 are classes 0
      to 253, 255 stays void.
    - Black-and-white masks (0 and 255 the only values in the whole set): 255 is the foreground, class 1.
    - Otherwise each value is its class (a palette's index, a grey level), and 255 is void (MASK_VOID).
    """
    table = torch.arange(256, dtype=torch.int64)
    if reduce_zero_label:
        table = torch.where(table == 0, MASK_VOID, table - 1)
        table[255] = MASK_VOID
    elif values[255] and not values[1:255].any():
        table[255] = 1
    return table


def read_masks_alike(*data_sets) -> None:
    """The segmentation pairs among `data_sets` (a run's training and validation data, ImageFiles or not) read by one
    mask_table decided from all their masks' values, so that a validation folder is read as its training folder even
    where its own values alone would decide otherwise (only 0 and 255 in a few VOC masks).

    Raises:
        ConfigError: the sets disagree about reduce_zero_label.
    """
    mask_sets = [data for data in data_sets if isinstance(data, ImageFiles) and data.mask_paths is not None]
    if len(mask_sets) < 2:
        return
    if len({data.reduce_zero_label for data in mask_sets}) > 1:
        raise ConfigError("segmentation: " + ", ".join(f"'{data.origin}' reduce_zero_label {data.reduce_zero_label}"
                                                       for data in mask_sets)
                          + ": a run's masks are read by one convention; give them the same reduce_zero_label")
    present = torch.stack([data.mask_values().sum(0) > 0 for data in mask_sets]).any(0)
    table = mask_table(present, mask_sets[0].reduce_zero_label)
    for data in mask_sets:
        data.read_masks_as(table)


def _require_readers(paths: Sequence[str], origin: str) -> None:
    """Fails before any decoding when a file's format has no reader in this build (its library was
    missing when gpucore was built), instead of failing, or being skipped, file by file."""
    for path in paths:
        format_name = _FORMATS.get(os.path.splitext(path)[1].lower())
        if format_name is not None and format_name not in _build_info.IMAGE_FORMATS:
            raise ConfigError(f"{origin}: '{path}' {_C.missing_reader_message(format_name)}")


def _threads(threads: Optional[int]) -> int:
    return threads if threads is not None else max(1, min(8, os.cpu_count() or 1))


def _on_error(on_error: str) -> bool:
    if on_error not in ("raise", "skip"):
        raise ConfigError(f"on_error must be 'raise' or 'skip', got '{on_error}'")
    return on_error == "skip"


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
        paths: the image files (PNG, JPEG, WebP, BMP, GIF, TIFF, PPM, HEIC, AVIF).
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
            masks are the targets, as class ids: a palette PNG's indices, a grey PNG's values, read by the rule
            mask_table decides for the whole set (255 is void, except in black-and-white masks, where it is class 1).
            JPEG masks are refused (lossy compression invents class ids), as are colour masks whose channels differ.
        reduce_zero_label: masks of ADE20K's convention: value 0 ("other") is void and the classes are shifted down
            by one (mmsegmentation's reduce_zero_label).
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
                 root: Optional[str] = None, unread: Sequence[str] = (), decode: str = DEFAULT_DECODE,
                 reduce_zero_label: bool = False):
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
        if not isinstance(reduce_zero_label, bool):
            raise ConfigError(f"reduce_zero_label must be true or false, got {reduce_zero_label!r}")
        if reduce_zero_label and mask_paths is None:
            raise ConfigError(f"{origin}: reduce_zero_label reads segmentation masks; these image files have class "
                              "labels, not masks")
        self.reduce_zero_label = reduce_zero_label
        self._mask_values: Optional[torch.Tensor] = None  # pixels of each value per mask file (mask_values)
        self._mask_table: Optional[torch.Tensor] = None  # each mask value's class id, for the whole set
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
                table = self.mask_table  # from every file's values, before unreadable pairs are left out
                self.mask_paths, self._mask_values = [self.mask_paths[i] for i in both], self.mask_values()[both]
                self._targets, kept = _C.mask_classes(masks[..., 0], table), both
            else:
                self._targets = self._targets[kept]
            self.paths = [self.paths[i] for i in kept]
            self._inputs = _images_nchw(images)
        return self._inputs

    def mask_values(self) -> torch.Tensor:
        """Each mask file's values, counted once at its own size by decoding the masks alone on `threads` threads
        (the C++ decoder releases the GIL): the same counts whether the set is cached or streamed, resized or not.

        Returns:
            int64 N x 256: pixels of each value per mask file; a row of zeros for an unreadable mask (on_error skip).

        Raises:
            ConfigError: image files without masks; an unreadable mask (on_error raise), naming the file.
        """
        if self.mask_paths is None:
            raise ConfigError(f"{self.origin}: these image files have class labels, not masks")
        if self._mask_values is None:
            def count(path: str) -> torch.Tensor:
                try:
                    mask = _C.decode_image(path, 1, self.exif_orientation, mask=True)
                except ConfigError:
                    if not self.skip_errors:
                        raise
                    return torch.zeros(256, dtype=torch.int64)
                return torch.bincount(mask.reshape(-1).long(), minlength=256)

            with ThreadPoolExecutor(self.threads) as pool:
                self._mask_values = torch.stack(list(pool.map(count, self.mask_paths)))
        return self._mask_values

    @property
    def mask_table(self) -> torch.Tensor:
        """Each uint8 mask value's class id (int64[256]) for this whole set (mask_table: the one rule)."""
        if self._mask_table is None:
            self._mask_table = mask_table(self.mask_values().sum(0) > 0, self.reduce_zero_label)
        return self._mask_table

    def check_mask_classes(self, classes: int, ignore_index: Optional[int], whose: str) -> None:
        """Every mask value, as mask_table reads it, is a class the model scores or ignore_index: where torch's loss
        would fail on it at a step (on CUDA as a device assert), or, worse, the loss and metrics would count it.

        Args:
            classes: the model's output count (2 for a loss of one output per pixel).
            ignore_index: the class id no loss or metric counts; None: the loss ignores nothing.
            whose: the model, as the message names it.

        Raises:
            ConfigError: naming the first mask file, its value and the class it reads as, and what would fit.
        """
        present = self.mask_values() > 0
        read_as = self.mask_table.expand_as(present)
        wrong = present & (read_as >= classes) & (read_as != (ignore_index if ignore_index is not None else -1))
        if not wrong.any():
            return
        row, value = (int(i) for i in wrong.nonzero()[0])
        class_id = int(read_as[row, value])
        how = "" if class_id == value else f" (read as class {class_id})"
        if ignore_index is not None and class_id == MASK_VOID:
            fix = ("255 is the masks' void: leave ignore_index unset (255 for a segmentation folder) or set "
                   "ignore_index: 255, so that no loss or metric counts it")
        elif ignore_index is None:
            fix = ("a loss of one output per pixel takes masks of 0 and 1 (or black-and-white 0 and 255); masks of "
                   "more classes, or with void pixels, train with loss cross_entropy and an output per class")
        else:
            fix = (f"give the model {class_id + 1} or more outputs (model_kwargs: {{num_classes: N}}), or set "
                   f"ignore_index: {class_id} if it marks pixels no loss or metric should count" +
                   ("" if self.reduce_zero_label else "; masks of ADE20K's convention (0 is 'other', the classes "
                    "start at 1) read with data_kwargs reduce_zero_label: true"))
        ignored = f" and ignore_index is {ignore_index}" if ignore_index is not None else ""
        raise ConfigError(f"mask '{self.mask_paths[row]}' holds value {value}{how}, but {whose} scores classes 0 to "
                          f"{classes - 1}{ignored}: {fix}")

    def read_masks_as(self, table: torch.Tensor) -> None:
        """Reads the masks by `table`, decoding them again where they were decoded by another.

        Args:
            table: int64[256], a mask_table decided with other sets (a validation set is read as its training set).
        """
        if self._mask_table is not None and torch.equal(self._mask_table, table):
            return
        self._mask_table, self._inputs = table, None

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
        part = self._read_alike([self.paths[i] for i in index], None if masks is not None else self._targets[index],
                                masks, self.root, self.origin)
        if masks is not None:  # read by the whole set's rule (a split's part has fewer values to decide from)
            part._mask_values, part._mask_table = self.mask_values()[index], self.mask_table
        if self._inputs is not None:
            part._inputs, part._targets = self._inputs[index], self._targets[index]
        if self._own_size is not None:
            part._own_size, part._targets = [self._own_size[i] for i in index], self._targets[index]
        return part

    def joined(self, other: "ImageFiles") -> "ImageFiles":
        """These files and then `other`'s (another split of the same data set: the same classes or both masks), read
        as this set reads them; names relative to the folder both lie in.

        Args:
            other: the files to add.

        Returns:
            A new ImageFiles.

        Raises:
            ConfigError: sets of other classes, or one of masks and one of classes.
        """
        if (self.mask_paths is None) != (other.mask_paths is None) or self.classes != other.classes:
            raise ConfigError(f"'{self.origin}' and '{other.origin}' cannot be read as one data set: "
                              + ("one holds masks, the other classes" if (self.mask_paths is None)
                                 != (other.mask_paths is None) else f"classes {self.classes} and {other.classes}"))
        masks = self.mask_paths + other.mask_paths if self.mask_paths is not None else None
        targets = None if masks is not None else torch.cat([self._targets, other._targets])
        return self._read_alike(self.paths + other.paths, targets, masks, os.path.commonpath([self.root, other.root]),
                                f"{self.origin} and {other.origin}")

    def _read_alike(self, paths: List[str], targets: Optional[torch.Tensor], masks: Optional[List[str]], root: str,
                    origin: str) -> "ImageFiles":
        """Other files read with this set's settings (channels, size, decoding, ...)."""
        return ImageFiles(paths, targets, self.classes, channels=self.channels,
                          size=self.size if self.size != (0, 0) else None, threads=self.threads,
                          on_error="skip" if self.skip_errors else "raise", origin=origin, mask_paths=masks,
                          max_resolution=self.max_resolution, exif_orientation=self.exif_orientation, root=root,
                          unread=self.unread, decode=self.decode, reduce_zero_label=self.reduce_zero_label)

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
