"""The seeded val_fraction split: the share of the training data held out for validation (image files by their names,
other data by position), and its record (ValSplit, training_stats.json's "validation")."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Tuple

import torch

from ..errors import ConfigError
from .identity import held_out_by_name, relative_names
from .image_files import ImageFiles
from .torch_samples import dataset_samples


@dataclass(frozen=True)
class ValSplit:
    """The samples a seeded `val_fraction` split held out for validation (training_stats.json's "validation")."""

    fraction: float
    seed: int
    samples: int  # of the training data before the split
    val_index: List[int]  # positions in it, in the order the validation set serves them
    how: str  # how the positions were drawn, in words

    def to_dict(self) -> dict:
        return {"val_fraction": self.fraction, "seed": self.seed, "samples": self.samples,
                "val_samples": len(self.val_index), "train_samples": self.samples - len(self.val_index),
                "how": self.how, "val_indices": list(self.val_index)}


# How split() draws the held-out positions, in training_stats.json's words.
_BY_POSITION = ("torch.randperm(samples, generator=torch.Generator().manual_seed(seed)): the first val_samples positions "
                "are validation (val_indices, in this order), the rest training in their order")
_BY_FILE_NAME = ("by file: a file is validation when blake2b(f'{seed}\\0{path relative to the folder}', digest_size=8) "
                 "read as a big-endian number / 2^64 is below val_fraction (at least one file), so files added later "
                 "never move an earlier file between training and validation; val_indices in file order")


def split_indices(count: int, fraction: float, seed: int) -> Tuple[List[int], List[int]]:
    """(train, val) positions of `count` samples, the seeded share `fraction` held out: the same for a seed on every
    rank and after a resume, whatever the global random state."""
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed)).tolist()
    held_out = max(1, int(round(count * fraction)))
    if held_out >= count:
        raise ConfigError(f"config key 'val_fraction': {fraction} of {count} training sample(s) leaves none to train "
                          "on; use a smaller val_fraction (in [0, 1)), more data, or pass val_data")
    return order[held_out:], order[:held_out]


def split(dataset, fraction: float, seed: int):
    """(train, val, ValSplit) of a data set, the seeded share `fraction` held out for validation (image files by
    their names, held_out_by_name; other data by position); (dataset, None, None) for fraction 0. Takes (inputs,
    targets) tensors, ImageFiles, and torch Datasets with a length (as DatasetSamples' subsets; gpucore.train serves its
    other gpucore data sets as tensors); a DataLoader, an IterableDataset or anything else is a ConfigError."""
    if not fraction:
        return dataset, None, None
    count = _split_length(dataset)
    if isinstance(dataset, ImageFiles):
        train_index, val_index = held_out_by_name(relative_names(dataset), fraction, seed)
        record = ValSplit(fraction=fraction, seed=seed, samples=count, val_index=val_index, how=_BY_FILE_NAME)
        return dataset.subset(train_index), dataset.subset(val_index), record
    train_index, val_index = split_indices(count, fraction, seed)
    record = ValSplit(fraction=fraction, seed=seed, samples=count, val_index=val_index, how=_BY_POSITION)
    if isinstance(dataset, (tuple, list)):
        inputs, targets = dataset
        train, val = (torch.tensor(i, dtype=torch.long) for i in (train_index, val_index))
        return (inputs[train], targets[train]), (inputs[val], targets[val]), record
    samples = dataset_samples(dataset)  # a torch Dataset: as DatasetSamples reads it, given so already by train()
    return samples.subset(train_index), samples.subset(val_index), record


def _split_length(dataset) -> int:
    """The number of samples a val_fraction split divides; ConfigError, naming what would work, for data it cannot."""
    what = type(dataset).__name__
    if isinstance(dataset, torch.utils.data.DataLoader):
        loader = "a torch DataLoader" + ("" if what == "DataLoader" else f" ({what})")
        raise ConfigError(f"config key 'val_fraction' holds out a share of the training data, but train_data is "
                          f"{loader}, which cannot be split without rebuilding it: pass val_data, set "
                          "val_fraction: 0 (no validation), or pass the DataLoader's Dataset as train_data")
    if isinstance(dataset, (tuple, list)) and len(dataset) == 2 and all(isinstance(t, torch.Tensor) for t in dataset):
        if dataset[0].shape[0] != dataset[1].shape[0]:
            raise ConfigError(f"train_data: {dataset[0].shape[0]} inputs but {dataset[1].shape[0]} targets")
        return dataset[0].shape[0]
    if isinstance(dataset, torch.utils.data.IterableDataset) or not isinstance(dataset, torch.utils.data.Dataset) \
            or not hasattr(dataset, "__len__"):
        raise ConfigError(f"config key 'val_fraction' holds out a share of the training data, but train_data is a "
                          f"{what}, which has no samples to pick by position: pass (inputs, targets) tensors, a "
                          "gpucore data set or a torch Dataset with a length; or pass val_data, or set val_fraction: 0")
    return len(dataset)
