"""The CAM: one base for every method, as pytorch-grad-cam's BaseCAM: the target layers' activations and the target
scores' gradients captured in one forward and backward pass, each layer's map by the method (methods.py), the layers
averaged and min-max normalised again."""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Union

import torch
from torch import nn

from ..errors import ConfigError
from .display import CamResult
from .hooks import AUTO_LAYER, capture, find_target_layer, resolve_layer
from .methods import BY_NAME, METHODS
from .targets import target_scores

_ops = torch.ops.gpucore


def check_module(model: Any, what: str) -> None:
    """`model` is an nn.Module, else a ConfigError saying so: for a gpucore.load result, what to pass instead."""
    if not isinstance(model, nn.Module):
        raise ConfigError(f"{what} must be a torch.nn.Module, got {type(model).__name__} (for a gpucore.load result: "
                          "its .module, with inputs prepared by its .preprocess; gpucore.cam.photo_gradcam takes the "
                          "result itself with photos)")


def model_output(model: nn.Module, x: torch.Tensor, shown: str) -> torch.Tensor:
    """The model's output on `x` (the first of a tuple or list).

    Raises:
        ConfigError: `x` does not fit the model ("SHOWN not fit the model: torch's message"); an out-of-memory error
            is raised as it is.
    """
    try:
        output = model(x)
    except RuntimeError as exc:
        if "out of memory" in str(exc):
            raise
        raise ConfigError(f"{shown} not fit the model: {str(exc).splitlines()[0]}") from exc
    return output[0] if isinstance(output, (tuple, list)) else output


def _check_inputs(inputs: Any) -> torch.Tensor:
    if not isinstance(inputs, torch.Tensor) or inputs.dim() != 4 or not inputs.is_floating_point():
        shape = tuple(inputs.shape) if isinstance(inputs, torch.Tensor) else type(inputs).__name__
        raise ConfigError(f"CAM inputs must be a floating-point N x C x H x W tensor, got {shape}")
    return inputs


class CAM:
    """A reusable CAM for one model and its target layer(s): `cam(inputs, targets)` returns a CamResult.

    Args:
        model: the model.
        target_layers: a module, a dotted name, several of them (averaged), or "auto".
        method: gradcam, gradcam++, xgradcam, hirescam, layercam, eigencam, eigengradcam or scorecam.
        reshape_transform: turns token outputs (vision transformers) into N x C x H x W.
        batch_size: split the inputs into batches of this size (None: all at once).
        scorecam_memory_bytes: scorecam: memory budget of its masked forward passes, chunked to fit.

    Raises:
        ConfigError: a model that is not an nn.Module, an unknown method or layer, a batch_size below 1, no target
            layer.
    """

    def __init__(self, model: nn.Module, target_layers: Union[str, nn.Module, Sequence[Union[str, nn.Module]]],
                 method: str = "gradcam", *, reshape_transform: Optional[Callable] = None,
                 batch_size: Optional[int] = None, scorecam_memory_bytes: int = 256 << 20):
        check_module(model, "CAM's model")
        if method not in METHODS:
            raise ConfigError(f"CAM method '{method}' is not one of {', '.join(METHODS)}")
        if batch_size is not None and batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        layers = [target_layers] if isinstance(target_layers, (str, nn.Module)) else list(target_layers)
        if not layers:
            raise ConfigError("give at least one target layer")
        self.model, self.method, self.reshape_transform = model, method, reshape_transform
        self.batch_size, self.scorecam_memory_bytes = batch_size, scorecam_memory_bytes
        self.layer_names = [layer if isinstance(layer, str) else type(layer).__name__ for layer in layers]
        # 'auto' needs a forward pass to see the layers' outputs: resolved on the first call
        self.layers = None if layers == [AUTO_LAYER] else [resolve_layer(model, layer) for layer in layers]

    def __call__(self, inputs: torch.Tensor, targets: Any = None) -> "CamResult":
        inputs = _check_inputs(inputs)
        if self.layers is None:
            self.layer_names = [find_target_layer(self.model, inputs[:1])]
            self.layers = [resolve_layer(self.model, self.layer_names[0])]
        size = self.batch_size or inputs.shape[0]
        chunks = []
        for start in range(0, inputs.shape[0], size):
            part = targets
            if targets is not None and not callable(targets) and not isinstance(targets, int):
                part = list(torch.as_tensor(targets).reshape(-1).tolist())[start:start + size]
            chunks.append(self._cams(inputs[start:start + size], part))
        return CamResult(torch.cat(chunks), self.method, self.layer_names)

    def _cams(self, inputs: torch.Tensor, targets: Any) -> torch.Tensor:
        """The maps of one batch: each layer's, then their mean, min-max normalised again."""
        with capture(self.model, self.layers) as captured:
            output, activations, gradients = self._forward(inputs, targets, captured)
            per_layer = [self._layer_cam(index, activation, gradient, inputs, output, targets)
                         for index, (activation, gradient) in enumerate(zip(activations, gradients))]
        stacked = torch.stack(per_layer, dim=1).clamp_min(0).mean(dim=1)
        return _ops.cam_normalize(stacked, [])

    def _forward(self, inputs: torch.Tensor, targets: Any, captured: List[Optional[torch.Tensor]]):
        """The model's output on `inputs`, the target layers' activations and, for a method that needs them, the
        target scores' gradients at those activations (None each otherwise)."""
        needs_gradients = BY_NAME[self.method].needs_gradients
        with torch.set_grad_enabled(needs_gradients):
            # A fresh leaf that requires grad, so the graph reaches the layers even with frozen weights.
            x = inputs.detach().requires_grad_(needs_gradients)
            output = model_output(self.model, x, f"inputs of shape {tuple(inputs.shape)} ({inputs.dtype}, "
                                  f"{inputs.device}) do")
            activations = [self._activation(a, i) for i, a in enumerate(captured)]
            scores = target_scores(output, targets)
            if needs_gradients:
                gradients = list(torch.autograd.grad(scores.sum(), activations, allow_unused=True))
            else:
                gradients = [None] * len(activations)
        return output, activations, gradients

    def _activation(self, captured: Optional[torch.Tensor], index: int) -> torch.Tensor:
        if captured is None:
            raise ConfigError(f"target layer '{self.layer_names[index]}' did not run in the model's forward pass")
        return captured

    def _layer_cam(self, index: int, activation: torch.Tensor, gradient: Optional[torch.Tensor], inputs: torch.Tensor,
                   output: torch.Tensor, targets: Any) -> torch.Tensor:
        """Layer `index`'s map by the method, resized to the inputs' size and min-max normalised."""
        method = BY_NAME[self.method]
        if method.needs_gradients and gradient is None:
            raise ConfigError(f"the target score does not depend on layer '{self.layer_names[index]}'")
        a = self._spatial(activation.detach())
        g = self._spatial(gradient) if gradient is not None else None
        return _ops.cam_normalize(method.layer_map(self, a, g, inputs, output, targets), list(inputs.shape[-2:]))

    def _spatial(self, tensor: torch.Tensor) -> torch.Tensor:
        tensor = self.reshape_transform(tensor) if self.reshape_transform else tensor
        if tensor.dim() != 4:
            raise ConfigError(f"the target layer's output is {tuple(tensor.shape)}, not N x C x H x W; pass "
                              "reshape_transform (e.g. for vision-transformer tokens)")
        return tensor.float()


def gradcam(model: nn.Module, target_layer: Union[str, nn.Module, Sequence[Union[str, nn.Module]]],
            inputs: torch.Tensor, targets: Any = None, *, method: str = "gradcam", batch_size: Optional[int] = None,
            reshape_transform: Optional[Callable] = None) -> "CamResult":
    """Class activation maps of `inputs` for `targets` at `target_layer`.

    Args:
        model: the model (its train/eval mode is restored and its hooks removed afterwards, also on an error).
        target_layer: a module, a dotted name ("layer4", "features.7"), several of them (averaged), or "auto": the
            last module with a spatial output before the head.
        inputs: N x C x H x W, as the model takes them.
        targets: None (each sample's top class), an int, one int per sample, or a callable on the model's output
            returning one score per sample (gpucore.cam.segmentation_target, gpucore.cam.head_target).
        method: gradcam, gradcam++, xgradcam, hirescam, layercam, eigencam, eigengradcam or scorecam.
        batch_size: split the inputs into batches of this size (None: all at once).
        reshape_transform: turns token outputs (vision transformers) into N x C x H x W.

    Returns:
        A CamResult: the maps (N x H x W in [0, 1]), overlays, PNG files, notebook display.

    Raises:
        ConfigError: a model that is not an nn.Module, an unknown method or layer name (listing the closest), targets
            that do not fit the inputs.
    """
    check_module(model, "gradcam's model")
    return CAM(model, target_layer, method, reshape_transform=reshape_transform, batch_size=batch_size)(inputs, targets)
