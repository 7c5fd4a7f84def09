"""Where a data set lives while it trains (cache), the C++ batch source that serves it, and
gpucore.DataLoader: batches ready on the device for any training loop."""
from __future__ import annotations

from typing import Any, List, Optional, Tuple, Union

import torch

from .. import _C
from .. import transforms as transforms_list
from ..config import KEY_BY_NAME
from ..device.select import memory_stats, select_device
from ..errors import ConfigError
from .readers import LabeledData, ImageFiles
from .tensor_inputs import as_images, input_stats, prepare_inputs



def is_native(data) -> bool:
    """Data gpucore's C++ sources serve: (inputs, targets) tensors or image files."""
    return isinstance(data, ImageFiles) or (isinstance(data, (tuple, list)) and len(data) == 2
                                            and all(isinstance(t, torch.Tensor) for t in data))


def skipped_files(data, source) -> List[str]:
    """Files left out of `data` (on_error skip), "path: why", each once: at decode and while `source` streams."""
    streamed = source.skipped() if isinstance(source, _C.FileBatches) else []
    return sorted(set(getattr(data, "skipped", [])) | set(streamed))


def choose_cache(data, cache: str, device: torch.device) -> str:
    """device, host or none for `data` ((inputs, targets) tensors or ImageFiles) and config `cache`.

    auto: on the device when the decoded data takes at most a quarter of its free memory (host memory
    for CPU training), else in host memory when image files fit in half of the available memory, else
    streamed from the files. In-memory tensors are never "none".
    """
    caches = KEY_BY_NAME["cache"].choices
    if cache not in caches:
        raise ConfigError(f"cache must be one of {', '.join(caches)}, got '{cache}'")
    files = isinstance(data, ImageFiles)
    if cache == "none" and not files:
        raise ConfigError("cache 'none' streams image files from disk (ImageFolder, Files, CSV or an image-folder "
                          "'data'); this data set is already in memory: use auto, device or host")
    if cache != "auto":
        return cache
    nbytes = data.nbytes() if files else sum(t.numel() * t.element_size() for t in data)
    in_memory = not files or data.decoded or nbytes <= (memory_stats("cpu")["free"] or 0) // 2
    if device.type == "cuda":
        if nbytes <= torch.cuda.mem_get_info(device)[0] // 4:
            return "device"
        return "host" if in_memory else "none"
    return "device" if in_memory else "none"


def at_own_sizes(data, transforms: Any = (), crop_padding: int = 0, hflip: bool = False) -> bool:
    """Whether `data`'s images come at their own sizes, each through the first transforms of the list (with hflip's
    shorthand) that bring any size to one (RandomResizedCrop, Resize + CenterCrop; the C++ pipeline's per-image
    transforms), as torchvision crops one image at a time: image files read without a size. crop_padding's
    RandomCrop is of the images' one size: with it they keep the size of the first (one size for all)."""
    if (not isinstance(data, ImageFiles) or data.size != (0, 0) or data.mask_paths is not None or not transforms
            or crop_padding):
        return False
    return transforms_list.per_image(transforms_list.training_form(transforms, 0, hflip, (0, 0)))


def data_stats(data, cache: str, own_sizes: bool = False) -> Tuple[list, list]:
    """Per-channel (mean, std) of a data set placed by `cache`, for normalisation: exact for data in
    memory, from a sample of the files when streaming. `own_sizes` (at_own_sizes): images kept at their own sizes."""
    if isinstance(data, ImageFiles):
        if own_sizes and cache != "none":
            data.images_at_own_size()  # decoded once, as the batches will read them: exact statistics
        return data.sample_stats(own_sizes=own_sizes) if cache == "none" or own_sizes else input_stats(data.inputs)
    return input_stats(data[0])


def batch_source(data, cache: str, *, batch_size: int, shuffle: bool, drop_last: bool, seed: int,
                 device: torch.device, crop_padding: int = 0, hflip: bool = False, transforms: Any = (),
                 normalization: Optional[Tuple[list, list]] = None, prefetch: int = 4,
                 dtype: torch.dtype = torch.float32, channels_last: bool = False) -> _C.EpochBatches:
    """The C++ source of `data` ((inputs, targets) tensors or ImageFiles) placed by `cache` (choose_cache).

    Images (N x C x H x W, or uint8 N x H x W) stay as they are (uint8: a quarter of float32's memory);
    each batch goes through `transforms` (a config `transforms` list; crop_padding and hflip its shorthands),
    is scaled and normalised on the training device, as `dtype` (float32, float16, bfloat16), channels-last
    if asked. Other inputs are standardised once here.
    """
    transform = _C.AugmentConfig()  # for images; other inputs get none
    transform.enabled = True
    transform.dtype, transform.channels_last = dtype, channels_last
    if normalization is not None:
        transform.mean, transform.std = normalization
    if isinstance(data, ImageFiles) or as_images(data[0]).dim() == 4:
        height, width = data.image_shape()[1:] if isinstance(data, ImageFiles) else as_images(data[0]).shape[2:]
        transform.transforms = transforms_list.specs(
            transforms_list.training_form(transforms, crop_padding, hflip, (height, width)))
    own_sizes = at_own_sizes(data, transforms, crop_padding, hflip)
    if isinstance(data, ImageFiles) and (cache == "none" or own_sizes):
        # Streamed, or cached at their own sizes: each image (decoded, or taken from memory) goes through the list's
        # per-image transforms on a reader thread; the rest of the list runs on the batch.
        config = _C.FileBatchesConfig()
        config.channels, (config.height, config.width) = data.channels, (0, 0) if own_sizes else data.image_shape()[1:]
        config.resize = data.size != (0, 0)
        config.threads, config.prefetch, config.skip_errors = data.threads, prefetch, data.skip_errors
        config.exif_orientation = data.exif_orientation
        config.own_sizes = own_sizes
        images = data.images_at_own_size() if own_sizes and cache != "none" else []
        segmentation = data.mask_paths is not None  # the masks are read with their images, batch by batch
        return _C.FileBatches(data.paths, None if segmentation else data.targets, batch_size, shuffle, drop_last,
                              seed, device, transform, config, data.mask_paths or [], images)
    inputs, targets = (data.inputs, data.targets) if isinstance(data, ImageFiles) else data
    inputs = as_images(inputs)
    if inputs.dim() != 4:
        if crop_padding > 0 or hflip or transforms:
            raise ConfigError(f"crop_padding, hflip and transforms need N x C x H x W images, got inputs "
                              f"{tuple(inputs.shape)}")
        transform, inputs = _C.AugmentConfig(), prepare_inputs(inputs, normalization)
    return _C.TensorBatches(inputs, targets, batch_size, shuffle, drop_last, seed, device, transform,
                            resident=cache == "device")


class DataLoader:
    """Iterates `(inputs, targets)` on the device, one epoch per `for` loop, like torch's DataLoader.

    Images stay uint8 until each batch is transformed, scaled and normalised on the device. Order and augmentation
    depend only on (seed, epoch, sample), so state_dict()/load_state_dict() resume mid-epoch exactly.

    Args:
        dataset: a gpucore.data set or (inputs, targets) tensors.
        batch_size: samples per batch.
        shuffle: a new order every epoch.
        device: auto, cpu, cuda, cuda:N or mps: where the batches are made.
        crop_padding: random crop of the image padded by this many pixels (a RandomCrop shorthand; 0: off).
        hflip: random horizontal flip (a RandomHorizontalFlip shorthand).
        transforms: a list as config key `transforms` takes (the transforms reference lists every name).
        normalize: True for the data set's per-channel mean and std, (mean, std) lists, or False.
        drop_last: leave out the last incomplete batch.
        seed: the seed of order and augmentation.
        rank: this process's shard, for distributed training.
        world_size: the number of shards (equal lengths; every sample once per epoch across ranks).
        cache: "device" (the data set on the device: each step is a gather and the fused op, no host work), "host"
            (host memory, batches copied over pinned memory), "none" (image files decoded batch by batch on reader
            threads into a pinned ring) or "auto" (device when it fits a quarter of the free device memory, else
            host, else none).
        prefetch: cache "none": batches decoded ahead.
        dtype: float32, float16 or bfloat16 batches.
        channels_last: batches in channels-last memory format.

    Raises:
        ConfigError: data that is neither a gpucore.data set nor tensors, a bad transform, cache or shard.
    """

    def __init__(self, dataset: Union[LabeledData, Tuple[torch.Tensor, torch.Tensor]], batch_size: int,
                 shuffle: bool = True, device: Union[str, torch.device] = "auto", *, crop_padding: int = 0,
                 hflip: bool = False, transforms: Any = (), normalize: Union[bool, Tuple[list, list]] = True, drop_last: bool = False,
                 seed: int = 0, rank: int = 0, world_size: int = 1, cache: str = "auto", prefetch: int = 4,
                 dtype: torch.dtype = torch.float32, channels_last: bool = False):
        in_memory = isinstance(dataset, LabeledData) and not isinstance(dataset, ImageFiles)
        data = (dataset.inputs, dataset.targets) if in_memory else dataset
        if not is_native(data):
            raise ConfigError("DataLoader needs a gpucore.data set or (inputs, targets) tensors; for a torch "
                              "Dataset use torch.utils.data.DataLoader")
        self.device = select_device(device).device if str(device) == "auto" else torch.device(device)
        self.cache = choose_cache(data, cache, self.device)
        self.dataset = dataset
        own_sizes = at_own_sizes(data, transforms, crop_padding, hflip)
        normalization = (data_stats(data, self.cache, own_sizes) if normalize is True
                         else (tuple(normalize) if normalize else None))
        self._batches = batch_source(data, self.cache, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last,
                                     seed=seed, device=self.device, crop_padding=crop_padding, hflip=hflip,
                                     transforms=transforms,
                                     normalization=normalization, prefetch=prefetch, dtype=dtype,
                                     channels_last=channels_last)
        self._batches.set_shard(rank, world_size)
        self.epoch, self._position = 0, 0
        self._batches.start_epoch(0)

    def __len__(self) -> int:
        return self._batches.total_batches()

    @property
    def skipped(self) -> list:
        """Files left out so far (on_error="skip"), "path: why"."""
        return skipped_files(self.dataset, self._batches)

    def __iter__(self):
        self._batches.start_epoch(self.epoch, self._position)
        while True:
            batch = self._batches.next()
            if batch is None:
                break
            self._position += 1
            yield batch
        self.epoch, self._position = self.epoch + 1, 0

    def state_dict(self) -> dict:
        """Where the next batch comes from.

        Returns:
            {"epoch": the epoch, "position": batches already served in it}.
        """
        return {"epoch": self.epoch, "position": self._position}

    def load_state_dict(self, state: dict) -> None:
        """Continue where `state_dict()` was taken: the next batch is the one that would have come then.

        Args:
            state: what state_dict() returned.

        Raises:
            ConfigError: a state without integer epoch and position >= 0.
        """
        try:
            epoch, position = state["epoch"], state["position"]
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"DataLoader state must be a dict with 'epoch' and 'position', got {state!r}") from exc
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in (epoch, position)):
            raise ConfigError(f"DataLoader state: epoch and position must be integers >= 0, got epoch {epoch!r}, "
                              f"position {position!r}")
        if position > len(self):
            raise ConfigError(f"DataLoader state: position {position} is past the end of an epoch ({len(self)} "
                              "batches): a state of another data set or batch size?")
        self.epoch, self._position = epoch, position
