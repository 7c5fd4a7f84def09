"""Config key tta (test-time augmentation): what validation, the report, gpucore evaluate, predict and the ONNX
export run instead of the bare model. hflip averages the outputs on each image and on its horizontal mirror, as
airbench does (Keller Jordan, "94% on CIFAR-10 in 3.29 seconds on a single GPU", 2024: worth about as much as a
fifth more training there); training itself is unchanged."""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from ..errors import ConfigError

TTA_CHOICES = ["none", "hflip"]


class FlipAverage(nn.Module):
    """The mean of `model`'s outputs on N x C x H x W images and on their mirrors (flipped along the width).
    Outputs with a width of their own (N x C x H x W: segmentation logits) are mirrored back before the mean."""

    def __init__(self, model: Callable[[torch.Tensor], torch.Tensor]):
        super().__init__()
        self.model = model
        self.training = getattr(model, "training", False)  # the wrapped model's mode, without changing it

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.dim() != 4:
            raise ConfigError(f"config key 'tta': hflip mirrors images of N x C x H x W, got inputs of shape "
                              f"{tuple(images.shape)}; use tta: none for data that are not images")
        outputs, mirrored = self.model(images), self.model(images.flip(-1))
        if not isinstance(outputs, torch.Tensor):
            raise ConfigError(f"config key 'tta': hflip averages a model's output tensor, but the model returns "
                              f"{type(outputs).__name__}; use tta: none")
        if outputs.dim() == 4:
            mirrored = mirrored.flip(-1)
        return (outputs + mirrored) / 2


def with_tta(model: Callable[[torch.Tensor], torch.Tensor], tta: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """`model` as config key tta asks it to be evaluated: itself for none, wrapped in FlipAverage for hflip."""
    if tta == "none":
        return model
    if tta == "hflip":
        return FlipAverage(model)
    raise ConfigError(f"config key 'tta': '{tta}' is not one of {', '.join(TTA_CHOICES)}")
