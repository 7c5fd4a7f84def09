"""gpucore.DataLoader: batches ready on the device for any training loop, from a data set's plan (plan.py) and its
C++ batch source (epoch_data.py)."""
from __future__ import annotations

from typing import Any, Tuple, Union

import torch

from ..device.select import select_device
from ..errors import ConfigError
from .epoch_data import batch_source, skipped_files
from .image_files import ImageFiles
from .labeled_data import LabeledData
from .plan import is_native, plan_data


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
        self.plan = plan_data(data, device=self.device, training=True, transforms=transforms,
                              crop_padding=crop_padding, hflip=hflip, cache=cache, normalize=normalize)
        self.cache = self.plan.cache
        self.dataset = dataset
        self._batches = batch_source(self.plan, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last,
                                     seed=seed, device=self.device, prefetch=prefetch, dtype=dtype,
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
