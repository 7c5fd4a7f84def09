"""Tensors as models take them: image layout, input statistics, standardisation, the deterministic transforms."""
from __future__ import annotations

import math
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
    """(mean, std) lists: per channel for N x C x H x W images (uint8 scaled to [0, 1]: pixel_stats), one value
    otherwise."""
    x = as_images(inputs)
    if x.dim() == 4 and x.dtype == torch.uint8:
        per_chunk = max(1, _PIXELS_PER_CHUNK // max(1, x[0].numel()))  # int32 copies of a few images at a time
        return pixel_stats(chunk.transpose(0, 1).reshape(x.shape[1], -1) for chunk in x.split(per_chunk))
    if x.dim() == 4:
        values = x.transpose(0, 1).reshape(x.shape[1], -1).float()
        mean, std = values.mean(1), values.std(1)
    else:
        values = x.float()
        mean, std = values.mean().reshape(1), values.std().reshape(1)
    std = torch.where(std > 0, std, torch.ones_like(std))
    return mean.tolist(), std.tolist()


_PIXELS_PER_CHUNK = 1 << 24


def pixel_stats(pixels: Iterable[torch.Tensor]) -> Tuple[list, list]:
    """Per-channel (mean, std) of uint8 pixels scaled to [0, 1], given as C x P tensors (an image's C x H x W reshaped,
    or a batch's channels): from exact integer sums, so the same pixels give the same statistics whether they come as
    one tensor, image by image or from files (tensors, a torch Dataset's images, a folder's)."""
    count, total, squares = 0, None, None
    for values in pixels:
        sums = values.sum(1, dtype=torch.int64)
        square_sums = values.int().square_().sum(1, dtype=torch.int64)
        count += values.shape[1]
        total, squares = (sums, square_sums) if total is None else (total + sums, squares + square_sums)
    mean, std = [], []
    for channel_sum, channel_squares in zip(total.tolist(), squares.tolist()):  # Python ints: exact to the division
        mean.append(channel_sum / (255 * count))
        variance = (channel_squares * count - channel_sum * channel_sum) / (count * max(count - 1, 1) * 255 * 255)
        std.append(math.sqrt(variance) if variance > 0 else 1.0)
    return mean, std


def model_inputs(images: torch.Tensor, input_stats: Optional[dict], transforms_value=()) -> torch.Tensor:
    """Images (N x C x H x W, uint8 or float) as the model saw them in training: through `transforms_value` (a
    config `transforms` list; gpucore.load passes the deterministic form of its run's) and the fused normalise,
    with a checkpoint's `input_stats` ({"mean": [...], "std": [...]}, or None), as float32."""
    stats = (input_stats["mean"], input_stats["std"]) if input_stats else None
    return transforms.apply(as_images(images), transforms_value, stats)
