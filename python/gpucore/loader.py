"""gpucore.DataLoader: batches of an in-memory data set, ready on the device, for any training loop."""
from __future__ import annotations

from typing import Tuple, Union

import torch

from . import _C
from .data import Dataset
from .datasets import as_images, input_stats, tensor_batches
from .device import select_device

ConfigError = _C.ConfigError


class DataLoader:
    """Iterates `(inputs, targets)` on the device, one epoch per `for` loop, like torch's DataLoader.

    dataset: a gpucore.data set or (inputs, targets) tensors. Images stay as they are (uint8 on the device
    with cache="device"); each batch is scaled, randomly cropped (crop_padding) and flipped (hflip) and
    normalised (normalize: True for the data set's per-channel mean and std, or (mean, std) lists) by
    gpucore::augment. Order and augmentation depend only on (seed, epoch, sample); rank/world_size
    serve equal shards for distributed training. state_dict()/load_state_dict() resume mid-epoch.
    cache: "device" (the data set on the device: each step is a gather and the fused op, no host work),
    "host" (the data set stays in host memory; batches are copied over pinned), or "auto" (device when
    it takes at most a quarter of the device's free memory).
    """

    def __init__(self, dataset: Union[Dataset, Tuple[torch.Tensor, torch.Tensor]], batch_size: int,
                 shuffle: bool = True, device: Union[str, torch.device] = "auto", *, crop_padding: int = 0,
                 hflip: bool = False, normalize: Union[bool, Tuple[list, list]] = True, drop_last: bool = False,
                 seed: int = 0, rank: int = 0, world_size: int = 1, cache: str = "auto"):
        inputs, targets = (dataset.inputs, dataset.targets) if isinstance(dataset, Dataset) else dataset
        if not (isinstance(inputs, torch.Tensor) and isinstance(targets, torch.Tensor)):
            raise ConfigError("DataLoader needs a gpucore.data set or (inputs, targets) tensors; for a torch Dataset "
                              "use torch.utils.data.DataLoader")
        self.device = select_device(device).device if str(device) == "auto" else torch.device(device)
        if cache not in ("auto", "device", "host"):
            raise ConfigError(f"cache must be auto, device or host, got '{cache}'")
        if cache == "auto":
            cache = "device" if self._fits(inputs, targets) else "host"
        self.cache = cache
        normalization = input_stats(inputs) if normalize is True else (tuple(normalize) if normalize else None)
        source_device = str(self.device) if cache == "device" else "cpu"
        self._batches = tensor_batches(as_images(inputs), targets, batch_size=batch_size, shuffle=shuffle,
                                       drop_last=drop_last, seed=seed, device=source_device,
                                       crop_padding=crop_padding, hflip=hflip, normalization=normalization)
        self._batches.set_shard(rank, world_size)
        self.epoch, self._position = 0, 0
        self._batches.start_epoch(0)

    def _fits(self, inputs: torch.Tensor, targets: torch.Tensor) -> bool:
        if self.device.type != "cuda":
            return True
        size = inputs.numel() * inputs.element_size() + targets.numel() * targets.element_size()
        return size <= torch.cuda.mem_get_info(self.device)[0] // 4

    def __len__(self) -> int:
        return self._batches.total_batches()

    def __iter__(self):
        self._batches.start_epoch(self.epoch, self._position)
        pin = self.cache == "host" and self.device.type == "cuda"
        while True:
            batch = self._batches.next()
            if batch is None:
                break
            self._position += 1
            inputs, targets = batch
            if self.cache == "host":
                if pin:
                    inputs, targets = inputs.pin_memory(), targets.pin_memory()
                inputs = inputs.to(self.device, non_blocking=pin)
                targets = targets.to(self.device, non_blocking=pin)
            yield inputs, targets
        self.epoch, self._position = self.epoch + 1, 0

    def state_dict(self) -> dict:
        """Where the next batch comes from: epoch and batches already served in it."""
        return {"epoch": self.epoch, "position": self._position}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self._position = int(state["epoch"]), int(state["position"])
