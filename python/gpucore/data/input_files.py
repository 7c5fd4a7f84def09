"""Images to run a trained model on, from what a user points at: a folder of PNG/JPEG files (class subfolders
allowed), one image file, a .npy/.npz array or an IDX image file. Read by gpucore's native readers; used by
`gpucore predict` and `gpucore gradcam`."""
from __future__ import annotations

import os
from typing import List, NamedTuple, Optional, Tuple, Union

import torch

from .. import _C

from ..errors import ConfigError
from . import readers
from .class_folders import read_folder_tree

ARRAY_EXTENSIONS = (".npy", ".npz")
IDX_SUFFIXES = ("-ubyte", ".idx", "-ubyte.gz", ".idx.gz")
FORMATS = ("a folder of .png/.jpg/.jpeg images (class subfolders allowed), one such image, a .npy or .npz array, "
           "or an IDX image file (...-idx3-ubyte[.gz])")


class InputImages(NamedTuple):
    # N x C x H x W as read (uint8 from image and IDX files; arrays keep their dtype); image files read at their own
    # sizes: a list of uint8 C x H x W
    images: Union[torch.Tensor, List[torch.Tensor]]
    files: Optional[List[str]]       # image files: paths relative to the folder (the file's name for one file)
    folders: Optional[List[str]]     # image files: each file's subfolder of the folder's top ("" at the top), e.g.
                                     # its class


def read_input_images(path: str, channels: int, size: Optional[Tuple[int, int]] = None,
                      origin: str = "inputs", max_resolution: Optional[int] = None,
                      exif_orientation: bool = True) -> InputImages:
    """The images at `path` with `channels` (1 or 3) channels. Image files are decoded to that many channels
    and resized to `size` (height, width) when given (None: they must share one size, unless `max_resolution` is
    given: then each is read at its own size, its shorter side at most max_resolution (0: full size), as a list);
    arrays must already have the channels and, when given, the size: (N, H, W) for grey, (N, C, H, W) or
    (N, H, W, C). A .npz gives its array 'x' or, without one, its only array. `origin` names the argument in
    errors; `exif_orientation`: image files turned upright by their EXIF orientation, as the model's run read them."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return _image_files(path, channels, size, origin, max_resolution, exif_orientation)
    if not os.path.exists(path):
        raise ConfigError(f"{origin} '{path}' does not exist")
    name = os.path.basename(path).lower()
    if name.endswith(readers.IMAGE_EXTENSIONS):
        images = _decode([path], channels, size, max_resolution, exif_orientation)
        return InputImages(images, [os.path.basename(path)], [""])
    if name.endswith(ARRAY_EXTENSIONS):
        array = _C.read_npy(path) if name.endswith(".npy") else _npz_images(path, origin)
    elif name.endswith(IDX_SUFFIXES):
        array = _C.read_idx(path)
    else:
        raise ConfigError(f"{origin} '{path}': unknown format; expected {FORMATS}")
    return InputImages(_channels_first(array, channels, size, f"{origin} '{path}'"), None, None)


def _image_files(folder: str, channels: int, size, origin: str, max_resolution: Optional[int],
                 exif_orientation: bool) -> InputImages:
    """The images at the folder's top and in its subfolders (nested ones too), as a class folder is read."""
    tree = read_folder_tree(folder)
    if not tree.paths:
        raise ConfigError(f"{origin}: folder '{folder}' holds no .png, .jpg or .jpeg files (nor do its subfolders)")
    images = _decode(tree.paths, channels, size, max_resolution, exif_orientation)
    return InputImages(images, [os.path.relpath(p, folder) for p in tree.paths],
                       [tree.classes[label] if label >= 0 else "" for label in tree.labels])


def _decode(paths: List[str], channels: int, size, max_resolution: Optional[int], exif_orientation: bool):
    if size is not None or max_resolution is None:
        return readers.read_files(paths, [0] * len(paths), channels=channels, size=size,
                                  exif_orientation=exif_orientation).inputs
    # decoded at full size before the bound (decode: exact), whatever the run's decode: the truest pixels
    files = readers.read_files(paths, [0] * len(paths), channels=channels, max_resolution=max_resolution,
                               exif_orientation=exif_orientation, decode="exact")
    return [image.permute(2, 0, 1) for image in files.images_at_own_size()]


def _npz_images(path: str, origin: str) -> torch.Tensor:
    arrays = _C.read_npz(path)
    if "x" in arrays:
        return arrays["x"]
    if len(arrays) != 1:
        raise ConfigError(f"{origin} '{path}' holds arrays {sorted(arrays)}: name the images 'x' or keep one array")
    return next(iter(arrays.values()))


def _channels_first(array: torch.Tensor, channels: int, size, origin: str) -> torch.Tensor:
    """(N, H, W) grey, (N, C, H, W) or (N, H, W, C) -> (N, C, H, W), told apart by `channels` and `size`."""
    if array.dim() == 3 and channels == 1:
        array = array.unsqueeze(1)
    if array.dim() == 4:
        first = array.shape[1] == channels and (not size or tuple(array.shape[2:]) == tuple(size))
        last = array.shape[3] == channels and (not size or tuple(array.shape[1:3]) == tuple(size))
        if first:
            return array
        if last:
            return array.permute(0, 3, 1, 2).contiguous()
    wanted = f"{size[0]} x {size[1]}" if size else "H x W"
    raise ConfigError(f"{origin} holds an array of shape {tuple(array.shape)}; expected images of {channels} "
                      f"channel(s) and {wanted} pixels: N x H x W (grey), N x C x H x W or N x H x W x C")
