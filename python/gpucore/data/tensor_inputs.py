"""Tensors as models take them: image layout, input statistics, standardisation, the deterministic transforms."""
from __future__ import annotations

from typing import Iterable, Optional, Tuple

import torch

from .. import transforms


def as_images(inputs: torch.Tensor) -> torch.Tensor:
    """uint8 (N, H, W) images get their channel: (N, 1, H, W). Everything else is returned as it is."""
    return inputs.unsqueeze(1) if inputs.dtype == torch.uint8 and inputs.dim() == 3 else inputs


def prepare_inputs(inputs: torch.Tensor, stats: Optional[Tuple[list, list]]) -> torch.Tensor:
    """Non-image inputs as float32, standardised with the (single-value) stats; shapes are kept, so
    sequence data (N, T, features) passes through. Images go through the transforms pipeline instead."""
    x = inputs if inputs.is_floating_point() else inputs.float()
    if stats is not None:
        x = (x - stats[0][0]) / stats[1][0]
    return x.contiguous()


def input_stats(inputs: torch.Tensor) -> Tuple[list, list]:
    """(mean, std) lists: per channel for N x C x H x W images (uint8 scaled to [0, 1]), one value otherwise."""
    x = as_images(inputs)
    if x.dim() == 4:
        values = x.transpose(0, 1).reshape(x.shape[1], -1)
        values = values.float().div_(255) if x.dtype == torch.uint8 else values.float()
        mean, std = values.mean(1), values.std(1)
    else:
        values = x.float()
        mean, std = values.mean().reshape(1), values.std().reshape(1)
    std = torch.where(std > 0, std, torch.ones_like(std))
    return mean.tolist(), std.tolist()


def pixel_stats(images: Iterable[torch.Tensor]) -> Tuple[list, list]:
    """Per-channel (mean, std) of uint8 C x H x W images of any sizes scaled to [0, 1], as input_stats gives them for
    images of one size, summed image by image in float64 (no copy of them all is made)."""
    count, total, squares = 0, 0.0, 0.0
    for image in images:
        values = image.reshape(image.shape[0], -1).double().div_(255)
        count, total, squares = count + values.shape[1], total + values.sum(1), squares + values.square().sum(1)
    mean = total / count
    std = ((squares - count * mean.square()) / max(count - 1, 1)).clamp_(min=0).sqrt_()
    std = torch.where(std > 0, std, torch.ones_like(std))
    return mean.tolist(), std.tolist()


def model_inputs(images: torch.Tensor, input_stats: Optional[dict], transforms_value=()) -> torch.Tensor:
    """Images (N x C x H x W, uint8 or float) as the model saw them in training: through `transforms_value` (a
    config `transforms` list; gpucore.load passes the deterministic form of its run's) and the fused normalise,
    with a checkpoint's `input_stats` ({"mean": [...], "std": [...]}, or None), as float32."""
    stats = (input_stats["mean"], input_stats["std"]) if input_stats else None
    return transforms.apply(as_images(images), transforms_value, stats)
