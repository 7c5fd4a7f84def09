"""LabeledData: samples in memory (inputs[i], targets[i]), what the readers of arrays (IDX, .npy, .npz) and
gpucore.data.from_tensors return, and the base of ImageFiles (image_files.py)."""
from __future__ import annotations

from typing import List, Optional, Sequence

import torch

from ..errors import ConfigError


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
