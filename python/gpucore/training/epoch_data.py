"""The training and validation data of a run, served epoch by epoch to the C++ engine as a BatchSource:
gpucore's own batch sources for tensors and gpucore.data sets, torch's DataLoader for anything else."""
from __future__ import annotations

import itertools
from typing import List, Optional

import torch

from .. import _C

from ..data.loader import at_own_sizes, batch_source, choose_cache, data_stats, is_native, skipped_files
from ..data.readers import ImageFiles
from ..errors import ConfigError
from ..transforms import validation_form
from . import distributed
from .position import check_whole_batches


class EpochData:
    """One data set, served epoch by epoch as a C++ BatchSource."""

    def __init__(self, data, config, device: str, batch_size: int, training: bool, normalization,
                 world: distributed.World):
        self.batch_size = batch_size
        self.seed, self.device = config.seed, device
        self.fixed_batch_size = isinstance(data, torch.utils.data.DataLoader)  # the user's loader batches itself
        self.training, self.world = training, world
        self._tensors = self._loader = self._generator = self._sampler = None
        self._data = data
        # Images of their own sizes, brought to one by the first transforms (RandomResizedCrop, Resize + CenterCrop).
        self.own_sizes = isinstance(data, ImageFiles) and at_own_sizes(data, config.transforms, config.crop_padding,
                                                                        config.hflip)
        self.description = describe(data, self.own_sizes)
        shuffle = training and config.shuffle
        drop_last = training and config.drop_last
        wants_augment = training and (config.crop_padding > 0 or config.hflip or bool(config.transforms))
        if is_native(data):
            self._tensors = batch_source(data, choose_cache(data, config.cache, torch.device(device)),
                                         batch_size=self.batch_size, shuffle=shuffle, drop_last=drop_last,
                                         seed=config.seed, device=torch.device(device),
                                         crop_padding=config.crop_padding if training else 0,
                                         hflip=config.hflip and training,
                                         transforms=config.transforms if training else validation_form(
                                             config.transforms),
                                         normalization=normalization,
                                         prefetch=config.prefetch)
            if training:  # this rank's share from the start: total_batches() counts the shard's batches
                self._tensors.set_shard(world.rank, world.size)
                self._tensors.start_epoch(0)
        elif wants_augment:
            raise ConfigError("crop_padding, hflip and transforms apply to image tensors and gpucore.data sets; "
                              "transform a torch Dataset or DataLoader yourself")
        elif isinstance(data, torch.utils.data.DataLoader):
            self._loader = data
        elif isinstance(data, torch.utils.data.Dataset):
            self._generator = torch.Generator()
            sampler = None
            if training and world.size > 1:  # equal shards per rank, reshuffled per epoch by set_epoch
                sampler = torch.utils.data.distributed.DistributedSampler(
                    data, num_replicas=world.size, rank=world.rank, shuffle=shuffle, seed=config.seed,
                    drop_last=drop_last)
            self._sampler = sampler
            self._loader = torch.utils.data.DataLoader(data, batch_size=self.batch_size,
                                                       shuffle=shuffle and sampler is None, sampler=sampler,
                                                       drop_last=drop_last, generator=self._generator,
                                                       pin_memory=device.startswith("cuda"))
        else:
            raise ConfigError(
                "training data must be (inputs, targets) tensors, a torch Dataset or a DataLoader, got "
                f"{type(data).__name__}"
            )

    @property
    def data(self):
        """The data set served: (inputs, targets) tensors, gpucore image files, a torch Dataset or DataLoader."""
        return self._data

    def skipped_files(self) -> List[str]:
        """Image files left out so far, "path: why": at decode, or while streaming."""
        return skipped_files(self._data, self._tensors)

    def total_batches(self) -> int:
        return len(self._tensors) if self._tensors is not None else len(self._loader)

    @property
    def reshards(self) -> bool:
        """Whether the rest of an epoch can be served from any sample on, at any world size (gpucore's sources)."""
        return self._tensors is not None

    def first_image_size(self) -> tuple:
        """(height, width) of the first readable image of an image-file data set."""
        return tuple(self._data.image_shape()[1:])

    def epoch(self, epoch: int, first_sample: int = 0):
        """Epoch `epoch`'s batches from sample `first_sample` of its order over all ranks on (a resume
        mid-epoch): gpucore's sources shard the rest among this run's ranks; a torch loader skips whole
        batches, at the world size and batch size that consumed them."""
        if self._tensors is not None:
            if self.training:
                self._tensors.set_shard(self.world.rank, self.world.size, first_sample)
            self._tensors.start_epoch(epoch)
            return self._tensors
        skip = check_whole_batches(first_sample, self.batch_size, self.world.size, epoch)
        if self._generator is not None:  # the same order per (seed, epoch) as TensorBatches promises
            self._generator.manual_seed(self.seed * 1000003 + epoch)
        if self._sampler is not None:
            self._sampler.set_epoch(epoch)
        return _C.PythonBatches(_Skipped(self._loader, skip), torch.device(self.device))

    def batches(self, epoch: int = 0):
        """Epoch `epoch`'s batches in Python, (inputs, targets) pairs as the engine gets them (gpucore's sources:
        augmented, standardised, on the device; a torch loader's: as it yields them)."""
        source = self.epoch(epoch)
        if self._tensors is None:
            yield from self._loader
            return
        while (batch := source.next()) is not None:
            yield batch


def normalization_of(data, config, device: str):
    """(mean, std) per channel of the training inputs when config key `normalize` asks for them, else None."""
    if config.normalize and is_native(data):
        return data_stats(data, choose_cache(data, config.cache, torch.device(device)),
                          at_own_sizes(data, config.transforms, config.crop_padding, config.hflip))
    return None


def make_train_set(data, config, device: str, normalization, world: distributed.World, batch_size: int) -> EpochData:
    """The training set in batches of `batch_size` (config key batch_size, or half of it after an out-of-memory
    retry), sharded over the ranks."""
    return EpochData(data, config, device, batch_size, training=True, normalization=normalization, world=world)


def make_val_set(data, config, device: str, normalization) -> Optional[EpochData]:
    """The validation set (every rank evaluates all of it), or None."""
    if data is None:
        return None
    return EpochData(data, config, device, config.eval_batch_size, training=False, normalization=normalization,
                     world=distributed.World())


def describe(data, own_sizes: bool = False) -> str:
    """What one sample of `data` looks like, for errors; `own_sizes`: image files read at their own sizes."""
    if isinstance(data, ImageFiles):
        if own_sizes:
            return f"{data.channels}-channel uint8 images of their own sizes from '{data.origin}'"
        channels, height, width = data.image_shape()
        return f"{channels} x {height} x {width} uint8 images from '{data.origin}'"
    if is_native(data):
        return f"inputs of shape {tuple(data[0].shape[1:])} ({data[0].dtype}) and targets of shape " \
               f"{tuple(data[1].shape[1:])} per sample"
    return f"batches from a {type(data).__name__}"


class _Skipped:
    """A loader's batches from `skip` on, with a len()."""

    def __init__(self, loader, skip):
        self.loader, self.skip = loader, skip

    def __len__(self):
        return max(len(self.loader) - self.skip, 0)

    def __iter__(self):
        return itertools.islice(iter(self.loader), self.skip, None)
