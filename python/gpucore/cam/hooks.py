"""The target layers: found by name or picked automatically, and their outputs captured by forward hooks that are
always removed, the model's train/eval mode always restored."""
from __future__ import annotations

import contextlib
import difflib
from typing import List, Optional, Sequence, Union

import torch
from torch import nn

from ..errors import ConfigError


def resolve_layer(model: nn.Module, layer: Union[str, nn.Module]) -> nn.Module:
    if isinstance(layer, nn.Module):
        return layer
    if not isinstance(layer, str):
        raise ConfigError(f"target layer must be a module or a dotted name such as 'layer4', got {type(layer).__name__}")
    modules = dict(model.named_modules())
    if layer in modules and layer:
        return modules[layer]
    names = [name for name in modules if name]
    close = difflib.get_close_matches(layer, names, n=3, cutoff=0.5)
    hint = f" Closest: {', '.join(close)}." if close else ""
    raise ConfigError(f"the model has no layer '{layer}'.{hint} Layers: {', '.join(names[:40])}"
                      + (" ..." if len(names) > 40 else ""))


AUTO_LAYER = "auto"
# Pooling layers reduce the map before them and learn nothing: never the auto layer (fast_cnn's head pools its
# features to 3 x 3 whatever the input size; the features before it are the map to explain).
_POOLING = (nn.modules.pooling._MaxPoolNd, nn.modules.pooling._AvgPoolNd, nn.modules.pooling._AdaptiveMaxPoolNd,
            nn.modules.pooling._AdaptiveAvgPoolNd)


def find_target_layer(model: nn.Module, inputs: torch.Tensor) -> str:
    """The layer `layer: auto` picks: the last module to finish in a forward pass of `inputs` whose output is a
    spatial map (N x C x H x W, H x W > 1), not the model's own output and not a pooling layer. That is the last conv
    block before the pooling of a classifier (a ResNet's layer4, a ConvNeXt's last stage, FashionMnistCNN's and
    CaptchaCNN's `features`)."""
    finished: List[str] = []
    outputs = {}

    def hook_for(name):
        def hook(module, args, output):
            output = output[0] if isinstance(output, (tuple, list)) and output else output
            if isinstance(output, torch.Tensor) and output.dim() == 4 and output.shape[-2] * output.shape[-1] > 1:
                finished.append(name)
                outputs[name] = output
        return hook

    handles = [module.register_forward_hook(hook_for(name)) for name, module in model.named_modules()
               if name and not isinstance(module, _POOLING)]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            output = model(inputs)
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    output = output[0] if isinstance(output, (tuple, list)) else output
    candidates = [name for name in finished if outputs[name] is not output]
    if not candidates:
        raise ConfigError("layer 'auto' found no layer with a spatial (N x C x H x W) output in the model's forward "
                          "pass; name the target layer (vision transformers also need reshape_transform)")
    return candidates[-1]


@contextlib.contextmanager
def capture(model: nn.Module, layers: Sequence[nn.Module]):
    """Records each layer's output; hooks removed and the model's mode restored whatever happens."""
    captured: List[Optional[torch.Tensor]] = [None] * len(layers)
    handles = []
    was_training = model.training

    def hook_for(index):
        def hook(module, inputs, output):
            captured[index] = output[0] if isinstance(output, (tuple, list)) else output
        return hook

    try:
        model.eval()
        for index, layer in enumerate(layers):
            handles.append(layer.register_forward_hook(hook_for(index)))
        yield captured
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
