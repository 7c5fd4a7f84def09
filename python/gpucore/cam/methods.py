"""The CAM methods, pytorch-grad-cam's: each one's map of one layer from its activations (and the target score's
gradients), on gpucore's torch ops (gpucore::cam_weights, cam_weighted_sum; CPU and CUDA kernels)."""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import torch
from torch import nn

from .targets import class_scorer

_ops = torch.ops.gpucore


def projection(matrix: torch.Tensor) -> torch.Tensor:
    """First principal component of each N x C x H x W activation map, as N x H x W.

    The map is the centred HW x C matrix x projected on its top right singular vector v: x v = s u, the top
    left singular vector scaled by its singular value. Both come from the eigendecomposition of the smaller
    Gram matrix: x x^T (HW x HW; eigenvalue s^2, eigenvector u) when HW <= C, as for a ResNet's last block
    (49 x 49 instead of 2048 x 2048), else x^T x (C x C; eigenvector v).
    The sign is fixed so that the projection's value of largest magnitude is positive (an SVD alone leaves
    it to chance).
    """
    n, c, h, w = matrix.shape
    x = matrix.float().reshape(n, c, h * w).transpose(1, 2)  # N x HW x C
    x = x - x.mean(dim=1, keepdim=True)
    if h * w <= c:
        values, vectors = torch.linalg.eigh(x @ x.transpose(1, 2))  # ascending eigenvalues
        projection = vectors[..., -1] * values[..., -1:].clamp_min(0).sqrt()
    else:
        _, vectors = torch.linalg.eigh(x.transpose(1, 2) @ x)
        projection = (x @ vectors[..., -1:]).squeeze(-1)
    peak = projection.gather(1, projection.abs().argmax(1, keepdim=True))
    projection = projection * torch.where(peak < 0, -1.0, 1.0)
    return torch.relu(projection).reshape(n, h, w)


def scorecam_weights(model: nn.Module, a: torch.Tensor, inputs: torch.Tensor, output: torch.Tensor, targets: Any,
                     memory_bytes: int) -> torch.Tensor:
    """Softmax over channels of the target score of the input masked by each upsampled channel."""
    n, channels = a.shape[:2]
    # As pytorch-grad-cam: UpsamplingBilinear2d (align_corners=True), per-channel min-max with eps 1e-8.
    masks = nn.functional.interpolate(a, size=inputs.shape[-2:], mode="bilinear", align_corners=True)
    low = masks.flatten(2).amin(2)[..., None, None]
    high = masks.flatten(2).amax(2)[..., None, None]
    masks = (masks - low) / (high - low + 1e-8)
    if targets is None:
        targets = output.argmax(1)
    per_sample = inputs[0].numel() * inputs.element_size()
    chunk = max(1, int(memory_bytes // (per_sample * 8)))
    scores = []
    with torch.no_grad():
        for image in range(n):
            target = targets if callable(targets) else torch.as_tensor(targets, device=a.device).reshape(-1)
            if not callable(target):
                target = int(target[image if target.numel() > 1 else 0]) if target.numel() else None
                target = class_scorer(target)
            image_scores = []
            for start in range(0, channels, chunk):
                masked = inputs[image][None] * masks[image, start:start + chunk, None].to(inputs.dtype)
                result = model(masked)
                result = result[0] if isinstance(result, (tuple, list)) else result
                image_scores.append(target(result).float())
            scores.append(torch.cat(image_scores))
    return torch.softmax(torch.stack(scores), dim=1)


class Method(NamedTuple):
    """A CAM method: whether it needs the target score's gradients, and its map of one layer from the activations a
    and gradients g (N x C x h x w): layer_map(cam, a, g, inputs, output, targets) -> N x h x w, `cam` the CAM that
    calls it."""

    needs_gradients: bool
    layer_map: Callable[..., torch.Tensor]


# Adding a method is one entry here.
BY_NAME = {
    "gradcam": Method(True, lambda cam, a, g, *_: _ops.cam_weighted_sum(a, _ops.cam_weights(a, g, "gradcam"))),
    "gradcam++": Method(True, lambda cam, a, g, *_: _ops.cam_weighted_sum(a, _ops.cam_weights(a, g, "gradcam++"))),
    "xgradcam": Method(True, lambda cam, a, g, *_: _ops.cam_weighted_sum(a, _ops.cam_weights(a, g, "xgradcam"))),
    "hirescam": Method(True, lambda cam, a, g, *_: _ops.cam_weighted_sum(a, g)),
    "layercam": Method(True, lambda cam, a, g, *_: _ops.cam_weighted_sum(a, torch.relu(g))),
    "eigencam": Method(False, lambda cam, a, g, *_: projection(a)),
    "eigengradcam": Method(True, lambda cam, a, g, *_: projection(a * g)),
    "scorecam": Method(False, lambda cam, a, g, inputs, output, targets: _ops.cam_weighted_sum(
        a, scorecam_weights(cam.model, a, inputs, output, targets, cam.scorecam_memory_bytes))),
}
METHODS = tuple(BY_NAME)
