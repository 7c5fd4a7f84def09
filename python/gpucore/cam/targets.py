"""What a CAM explains: one score per sample of the model's output, the class logit by default, or a callable's value
(a segmentation class over a mask, a multi-head model's class of one head)."""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from ..errors import ConfigError


def segmentation_target(category: int, mask: Optional[torch.Tensor] = None) -> Callable:
    """Target for segmentation outputs (N, K, H, W): class `category` summed over `mask` (H x W or N x H x W) or the image."""
    def score(output: torch.Tensor) -> torch.Tensor:
        if output.dim() != 4 or not 0 <= category < output.shape[1]:
            raise ConfigError(f"segmentation target {category} needs an output of N x K x H x W with K > {category}, "
                              f"got {tuple(output.shape)}")
        logits = output[:, category]
        return (logits * mask.to(logits)).flatten(1).sum(1) if mask is not None else logits.flatten(1).sum(1)
    return score


def head_target(head: int, category: int, classes: int) -> Callable:
    """Target for multi-head outputs (captcha: N x heads*classes): class `category` of head `head`."""
    def score(output: torch.Tensor) -> torch.Tensor:
        per_head = output.reshape(output.shape[0], -1, classes)
        if not (0 <= head < per_head.shape[1] and 0 <= category < classes):
            raise ConfigError(f"head target ({head}, {category}) is out of range for {per_head.shape[1]} heads of "
                              f"{classes} classes")
        return per_head[:, head, category]
    return score


def class_scorer(category: int) -> Callable:
    return lambda output: output[:, category]


def target_scores(output: torch.Tensor, targets: Any) -> torch.Tensor:
    """One scalar per sample: the logit of the target class (argmax when targets is None) or a callable's value."""
    n = output.shape[0]
    if callable(targets):
        score = targets(output)
        if not isinstance(score, torch.Tensor) or score.shape != (n,):
            raise ConfigError(f"a target callable must return one score per sample, shape ({n},), got "
                              f"{tuple(score.shape) if isinstance(score, torch.Tensor) else type(score).__name__}")
        return score
    if output.dim() != 2:
        raise ConfigError(f"class targets need an output of N x classes, got {tuple(output.shape)}; pass a callable "
                          "(gpucore.cam.segmentation_target, head_target) for other outputs")
    if targets is None:
        index = output.argmax(1)
    else:
        index = torch.as_tensor(targets, device=output.device).long().reshape(-1)
        if index.numel() == 1:
            index = index.expand(n)
        if index.numel() != n:
            raise ConfigError(f"targets has {index.numel()} entries for {n} inputs")
        bad = [int(t) for t in index.tolist() if not 0 <= t < output.shape[1]]
        if bad:
            raise ConfigError(f"target {bad[0]} is out of range for an output of {output.shape[1]} classes")
    return output.gather(1, index.reshape(n, 1)).reshape(n)
