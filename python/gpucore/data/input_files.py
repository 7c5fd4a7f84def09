"""Images to run a trained model on, from what a user points at: a folder of PNG/JPEG files (class subfolders
allowed), one image file, a .npy/.npz array or an IDX image file. Read by gpucore's native readers; used by
`gpucore predict` and `gpucore gradcam`."""
from __future__ import annotations

import os
from typing import Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch

from .. import _C, transforms

from ..errors import ConfigError
from . import readers
from .class_folders import READ_FORMATS, read_folder_tree
from .image_files import DEFAULT_MAX_RESOLUTION
from .torch_samples import _part, _uint8_image

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
    skipped: Tuple[str, ...] = ()    # on_error skip: "path: why" of each image file left out, unreadable


def read_input_images(path: str, channels: int, size: Optional[Tuple[int, int]] = None,
                      origin: str = "inputs", max_resolution: Optional[int] = None,
                      exif_orientation: bool = True, on_error: str = "raise") -> InputImages:
    """The images at `path` with `channels` (1 or 3) channels. Image files are decoded to that many channels
    and resized to `size` (height, width) when given (None: they must share one size, unless `max_resolution` is
    given: then each is read at its own size, its shorter side at most max_resolution (0: full size), as a list);
    arrays must already have the channels and, when given, the size: (N, H, W) for grey, (N, C, H, W) or
    (N, H, W, C). A .npz gives its array 'x' or, without one, its only array. `origin` names the argument in
    errors; `exif_orientation`: image files turned upright by their EXIF orientation, as the model's run read them;
    `on_error`: "raise" (an unreadable image file is a ConfigError naming it) or "skip" (left out, listed in
    `skipped` with the reason)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return _image_files(path, channels, size, origin, max_resolution, exif_orientation, on_error)
    if not os.path.exists(path):
        raise ConfigError(f"{origin} '{path}' does not exist")
    name = os.path.basename(path).lower()
    if name.endswith(readers.IMAGE_EXTENSIONS):
        return _decode([path], [os.path.basename(path)], [""], channels, size, max_resolution, exif_orientation,
                       on_error, origin)
    if name.endswith(ARRAY_EXTENSIONS):
        array = _C.read_npy(path) if name.endswith(".npy") else _npz_images(path, origin)
    elif name.endswith(IDX_SUFFIXES):
        array = _C.read_idx(path)
    else:
        raise ConfigError(f"{origin} '{path}': unknown format; expected {FORMATS}")
    return InputImages(_channels_first(array, channels, size, f"{origin} '{path}'"), None, None)


def _image_files(folder: str, channels: int, size, origin: str, max_resolution: Optional[int],
                 exif_orientation: bool, on_error: str) -> InputImages:
    """The images at the folder's top and in its subfolders (nested ones too), as a class folder is read."""
    return _decode(*_folder_files(folder, origin), channels, size, max_resolution, exif_orientation, on_error, origin)


def _folder_files(folder: str, origin: str) -> Tuple[List[str], List[str], List[str]]:
    """(paths, names relative to the folder, subfolders of its top) of the image files in a folder and its
    subfolders."""
    tree = read_folder_tree(folder)
    if not tree.paths:
        raise ConfigError(f"{origin}: folder '{folder}' holds no image files ({READ_FORMATS}), nor do its subfolders")
    return (tree.paths, [os.path.relpath(p, folder) for p in tree.paths],
            [tree.classes[label] if label >= 0 else "" for label in tree.labels])


def photo_chunks(path: str, channels: int, count: int, origin: str = "inputs",
                 exif_orientation: bool = True) -> Iterator[InputImages]:
    """The images at `path` as read_input_images reads them, each at its own full size, `count` files at a time, so
    a folder of large photos is never decoded whole; an array comes as one chunk."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        yield read_input_images(path, channels, None, origin, max_resolution=0, exif_orientation=exif_orientation)
        return
    paths, names, folders = _folder_files(path, origin)
    for start in range(0, len(paths), count):
        part = slice(start, start + count)
        yield _decode(paths[part], names[part], folders[part], channels, None, 0, exif_orientation, "raise", origin)


def _decode(paths: List[str], names: List[str], folders: List[str], channels: int, size,
            max_resolution: Optional[int], exif_orientation: bool, on_error: str, origin: str) -> InputImages:
    """The image files decoded, with the names and folders of those kept (all of them unless on_error skips some)."""
    own_sizes = size is None and max_resolution is not None
    files = readers.read_files(paths, list(range(len(paths))), channels=channels, size=None if own_sizes else size,
                               on_error=on_error, exif_orientation=exif_orientation,
                               max_resolution=max_resolution if own_sizes else DEFAULT_MAX_RESOLUTION,
                               decode="exact")  # whatever the run's decode: predictions from the truest pixels
    images = ([image.permute(2, 0, 1) for image in files.images_at_own_size()] if own_sizes else files.inputs)
    if not len(images):
        raise ConfigError(f"{origin}: none of the {len(paths)} image files could be read: " + "; ".join(files.skipped))
    kept = files.targets.tolist()  # each file's position, as its label
    return InputImages(images, [names[i] for i in kept], [folders[i] for i in kept], tuple(files.skipped))


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


IN_MEMORY = ("PIL images, uint8 tensors (C x H x W or H x W) or uint8 numpy arrays (H x W x C or H x W), of any sizes; "
             "float images of one size go as one N x C x H x W tensor instead")


def read_size(height: int, width: int, size: Optional[Tuple[int, int]] = None,
               max_resolution: Optional[int] = None) -> Tuple[int, int]:
    """(height, width) an image of height x width is read at: `size` when given, else its own, its shorter side brought
    down to max_resolution where longer (None or 0: as it is), as the readers keep images at their own sizes."""
    if size is not None:
        return tuple(size)
    if max_resolution and min(height, width) > max_resolution:
        return transforms.output_size([{"Resize": {"size": max_resolution}}], height, width)
    return height, width


def uint8_images(images: Sequence, channels: int, origin: str = "inputs") -> List[torch.Tensor]:
    """In-memory images as uint8 C x H x W tensors of `channels` channels (a PIL image converted to L or RGB, a grey
    tensor's channel repeated); a ConfigError names a bad element by its index, its type and what is taken."""
    if not isinstance(images, (list, tuple)) or not images:
        raise ConfigError(f"{origin}: give a non-empty list of {IN_MEMORY}")
    result = []
    for index, image in enumerate(images):
        try:
            tensor = _uint8_image(image, channels)
        except ConfigError:
            raise ConfigError(f"{origin}[{index}] is {_part(image)}; a list of images holds {IN_MEMORY}") from None
        if tensor.shape[0] == 1 and channels == 3:
            tensor = tensor.expand(3, -1, -1)
        if tensor.shape[0] != channels:
            raise ConfigError(f"{origin}[{index}] is {_part(image)}: {tensor.shape[0]} channels where the model takes "
                              f"{channels}; a list of images holds {IN_MEMORY}")
        result.append(tensor)
    return result


def images_from_list(images: Sequence, channels: int, size: Optional[Tuple[int, int]] = None,
                     max_resolution: Optional[int] = None, origin: str = "inputs") -> InputImages:
    """In-memory images, each brought to what read_input_images makes of an image file: `channels` channels
    (uint8_images), resized to `size` (height, width) when given, else with `max_resolution` given, each at its own
    size, its shorter side at most max_resolution (0: full size), as a list; else they must share one size. Resized as
    the readers resize (gpucore's resized_crop over the whole image: torchvision's antialiased bilinear, rounded as it
    rounds), so an image gives what the same pixels saved as a PNG file give. A ConfigError names a bad element by its
    index."""
    read = []
    for tensor in uint8_images(images, channels, origin):
        height, width = tensor.shape[1:]
        target = read_size(height, width, size, max_resolution)
        if target != (height, width):
            whole = torch.tensor([[0, 0, height, width]])
            tensor = torch.ops.gpucore.resized_crop(tensor.unsqueeze(0), whole, list(target), "bilinear", True)[0]
        read.append(tensor.contiguous())
    if size is None and max_resolution is not None:
        return InputImages(read, None, None)
    first = tuple(read[0].shape[1:])
    index = next((i for i, image in enumerate(read) if tuple(image.shape[1:]) != first), None)
    if index is not None:
        raise ConfigError(f"{origin}[{index}] is {tuple(read[index].shape[1:])} but {origin}[0] is {first}: the model "
                          "takes images of one size (its run read them so); give them at one size")
    return InputImages(torch.stack(read), None, None)
