"""Grad-CAM over a clip's frames for one output step of a sequence model: a CSLR network (models/cslr.py) runs a CNN
on every frame, then a temporal head gives one row of gloss logits per output step. The map of step t is that of its
gloss's logit at a per-frame layer: the layer sees the clip's T frames as its batch, so each frame gets its own weights
(the method's, from that frame's gradients) and its own map."""
from __future__ import annotations

from typing import Optional, Union

import torch
from torch import nn

from ..errors import ConfigError
from ..values import is_int
from .base import check_module, model_output
from .display import CamResult
from .hooks import AUTO_LAYER, capture, find_target_layer, resolve_layer
from .methods import BY_NAME

# The methods whose map comes from the target score's gradients: scorecam re-runs the model on masked inputs and
# eigencam ignores the target, neither says anything about one output step.
CLIP_METHODS = tuple(name for name, method in BY_NAME.items() if method.needs_gradients)


def clip_gradcam(model: nn.Module, clip: torch.Tensor, step: int, gloss: Optional[int] = None, *,
                 layer: Union[str, nn.Module] = AUTO_LAYER, method: str = "gradcam") -> CamResult:
    """The heat map on every frame of `clip` of output step `step`'s logit of `gloss`, at a per-frame layer.

    Each frame's map is the method's (Grad-CAM: the layer's channels weighted by their spatially averaged gradients,
    summed, ReLU), then one min-max over the whole clip (eps 1e-7), so that the frames the step depends on less stay
    dimmer instead of being stretched to the same range, then resized bilinearly (align_corners=False) to the frames'
    size. The model's train/eval mode is restored and its hooks removed afterwards, also on an error; parameters'
    .grad are left untouched.

    Args:
        model: a clip model, (N, T, C, H, W) -> (N, steps, classes) logits (gpucore's cslr_resnet18, or your own).
        clip: one clip, (T, C, H, W) float, as the model takes it (standardised as in training: gpucore.load's model
            and gpucore.evaluate read clips so).
        step: the output step to explain, 0 to steps - 1 (a model of temporal_stride 4 has ceil(T / 4) steps).
        gloss: the class (gloss id, 0 the CTC blank) whose logit is explained; None: the step's top class.
        layer: a per-frame layer (a module or a dotted name: "layer4", "layer3.1"), or "auto": the last layer with a
            spatial output (a ResNet's layer4).
        method: gradcam, gradcam++, xgradcam, hirescam, layercam or eigengradcam.

    Returns:
        A CamResult of T maps (T x H x W float32 in [0, 1]), one per frame; its overlay() takes the frames.

    Raises:
        ConfigError: a model that is not an nn.Module, a clip that is not a (T, C, H, W) float tensor or does not
            fit the model, an output that is not (1, steps, classes), a step or gloss out of range, a layer the model
            lacks or that is not per frame, a method that does not explain one output.
    """
    check_module(model, "clip_gradcam's model")
    if method not in CLIP_METHODS:
        raise ConfigError(f"clip_gradcam's method '{method}' is not one of {', '.join(CLIP_METHODS)} (the methods "
                          "that follow one output's gradients)")
    if not isinstance(clip, torch.Tensor) or clip.dim() != 4 or not clip.is_floating_point():
        shape = tuple(clip.shape) if isinstance(clip, torch.Tensor) else type(clip).__name__
        raise ConfigError(f"clip_gradcam's clip must be one floating-point T x C x H x W clip, got {shape}")
    inputs = clip.detach()[None]
    if layer == AUTO_LAYER:
        layer = find_target_layer(model, inputs)
    name = layer if isinstance(layer, str) else type(layer).__name__
    module = resolve_layer(model, layer)
    frames = clip.shape[0]
    # cuDNN's LSTM has no backward in eval mode: the temporal head's gradients come from the native kernels
    with capture(model, [module]) as captured, torch.backends.cudnn.flags(enabled=not clip.is_cuda):
        with torch.enable_grad():
            output = model_output(model, inputs.requires_grad_(True),
                                  f"a clip of shape {tuple(clip.shape)} ({clip.dtype}, {clip.device}) does")
            if output.dim() != 3 or output.shape[0] != 1:
                raise ConfigError(f"clip_gradcam needs a model whose output is (N, steps, classes), got "
                                  f"{tuple(output.shape)} for one clip")
            steps, classes = output.shape[1:]
            if not is_int(step) or not 0 <= step < steps:
                raise ConfigError(f"output step {step!r} is past the model's output: this clip of {frames} frames "
                                  f"gives {steps} steps, 0 to {steps - 1}")
            if gloss is None:
                gloss = int(output[0, step].argmax())
            elif not is_int(gloss) or not 0 <= gloss < classes:
                raise ConfigError(f"gloss {gloss!r} is not in the model's vocabulary: its ids are 0 (the CTC blank) "
                                  f"to {classes - 1}")
            activation = captured[0]
            if activation is None:
                raise ConfigError(f"layer '{name}' did not run in the model's forward pass")
            if activation.dim() != 4 or activation.shape[0] != frames:
                raise ConfigError(f"layer '{name}' gives {tuple(activation.shape)}, not one C x h x w map per frame of "
                                  f"the clip's {frames}: pick a convolutional layer the model runs on every frame "
                                  "(cslr_resnet18: layer1 to layer4)")
            gradient, = torch.autograd.grad(output[0, step, gloss], activation, allow_unused=True)
    if gradient is None:
        raise ConfigError(f"output step {step}'s logit does not depend on layer '{name}'")
    maps = BY_NAME[method].layer_map(None, activation.detach().float(), gradient.float())
    low, high = maps.amin(), maps.amax()
    maps = (maps - low) / (high - low + 1e-7)
    maps = nn.functional.interpolate(maps[:, None], size=tuple(clip.shape[-2:]), mode="bilinear",
                                     align_corners=False)[:, 0]
    return CamResult(maps, method, [name])
