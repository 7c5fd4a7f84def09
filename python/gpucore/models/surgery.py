"""What fine-tuning reaches into in a model, as timm's _manipulate: its first convolution (in_channels replaced, RGB
weights adapted), its classifier head (found, its output count) and its backbone's blocks (BackboneSplit: what
lr_backbone, lr_layer_decay and freeze train at which rate)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch
from torch import nn

from ..errors import ConfigError
from . import segmentation_models


def input_conv(model: nn.Module) -> Optional[str]:
    """The name of the model's first convolution (the one that sees the image), or None."""
    return next((name for name, module in model.named_modules() if isinstance(module, nn.Conv2d)), None)


def set_input_channels(model: nn.Module, in_channels: int, full_name: str) -> None:
    """Replaces the first convolution by one taking in_channels (PyTorch's default initialisation; pretrained
    RGB weights are adapted to it when loaded)."""
    name = input_conv(model)
    if name is None:
        raise ConfigError(f"config key 'model_kwargs': {full_name} has no convolution whose input channels "
                          "in_channels could set")
    conv = model.get_submodule(name)
    if conv.in_channels == in_channels:
        return
    if conv.groups != 1:
        raise ConfigError(f"config key 'model_kwargs': the first convolution of {full_name} ('{name}') is grouped; "
                          "in_channels cannot be changed")
    replacement = nn.Conv2d(in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                            conv.dilation, bias=conv.bias is not None, padding_mode=conv.padding_mode)
    parent, _, attribute = name.rpartition(".")
    setattr(model.get_submodule(parent), attribute, replacement)


def adapt_input_conv(weight: torch.Tensor, in_channels: int) -> torch.Tensor:
    """RGB weights of a first convolution (out, 3, kh, kw) for `in_channels` inputs, as timm adapts them: summed
    over the colours for 1 channel (a grey image gives what the RGB model gives for it in three equal channels),
    else repeated over the channels and scaled by 3 / in_channels."""
    if in_channels == 1:
        return weight.float().sum(dim=1, keepdim=True).to(weight.dtype)
    repeats = -(-in_channels // 3)
    return (weight.float().repeat(1, repeats, 1, 1)[:, :in_channels] * (3 / in_channels)).to(weight.dtype)



HEAD_ATTRIBUTES = ("fc", "classifier", "head", "heads", "segmentation_head", "decode_head.classifier")


def classifier_head(model: nn.Module) -> Optional[str]:
    """The name of the model's classifier head, the layer num_classes replaces: timm's get_classifier(), else the
    last module with weights of the model's attribute fc, classifier, head, heads, segmentation_head or
    decode_head.classifier (a ResNet's fc, the last Linear of a ConvNeXt's, EfficientNet's or MobileNet's classifier,
    a ViT's heads.head, the built-ins' last Linear, smp's segmentation head, SegFormer's last 1x1 convolution,
    torchvision's segmentation classifier's last convolution)."""
    names = {module: name for name, module in model.named_modules()}
    get_classifier = getattr(model, "get_classifier", None)
    if callable(get_classifier):
        head = get_classifier()
        if isinstance(head, nn.Module) and names.get(head) and any(True for _ in head.parameters()):
            return names[head]
    for attribute in HEAD_ATTRIBUTES:
        try:
            module = model.get_submodule(attribute)
        except AttributeError:
            continue
        if isinstance(module, nn.Module):
            with_weights = [name for name, sub in module.named_modules(prefix=attribute)
                            if any(True for _ in sub.parameters(recurse=False))]
            if with_weights:
                return with_weights[-1]
    return None


def output_count(model: nn.Module) -> Optional[int]:
    """The number of outputs of the model's classifier head (classifier_head: a Linear's out_features, a
    convolution's out_channels), or None when it has none that gpucore finds."""
    name = classifier_head(model)
    if name is None:
        return None
    head = model.get_submodule(name)
    if isinstance(head, nn.Linear):
        return head.out_features
    if isinstance(head, nn.modules.conv._ConvNd):
        return head.out_channels
    return None


def is_under(name: str, module_name: str) -> bool:
    """Whether parameter or module `name` belongs to module `module_name`."""
    return name == module_name or name.startswith(module_name + ".")


@dataclass
class BackboneSplit:
    """A model cut into the part that trains at the full rate (a classifier's head; a segmentation model's decoder
    and head) and the backbone before it, as fine-tuning treats them."""

    head: List[str]  # the names of the modules outside the backbone
    head_params: List[nn.Parameter]
    blocks: List[Tuple[str, List[nn.Parameter]]]  # the backbone's blocks, input first (see backbone_split)

    @property
    def backbone_params(self) -> List[nn.Parameter]:
        return [param for _, params in self.blocks for param in params]

    def in_head(self, name: str) -> bool:
        """Whether parameter or module `name` is outside the backbone."""
        return any(is_under(name, head) for head in self.head)


_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


def backbone_split(model: nn.Module, needed_for: str) -> BackboneSplit:
    """The head and the backbone's blocks. A segmentation model's backbone is its encoder
    (segmentation_models.segmentation_encoder) and everything else (decoder, head) its head. Otherwise the head is
    classifier_head's, and the blocks are the model's top-level modules with nn.Sequential, nn.ModuleList and
    nn.ModuleDict containers opened, recursively (a ResNet's conv1, bn1, layer1.0, ... layer4.1; a ConvNeXt's
    stages), less the head; the model's own parameters (a ViT's class token) go with the first block. Parameters
    with requires_grad=False are left out. needed_for: the config key that asks, for the error message."""
    encoder = segmentation_models.segmentation_encoder(model)
    if encoder is not None:
        head = [name for name, _ in model.named_children() if name != encoder]
        root, prefix = model.get_submodule(encoder), encoder
    else:
        classifier = classifier_head(model)
        if classifier is None:
            raise ConfigError(f"config key '{needed_for}' needs the model's classifier head, and "
                              f"{type(model).__name__} has none that gpucore finds: timm's get_classifier(), or a "
                              f"layer with weights in an attribute {', '.join(HEAD_ATTRIBUTES)}. Give the model such "
                              "an attribute")
        head, root, prefix = [classifier], model, ""
    split = BackboneSplit(head, [], [])
    seen = set()

    def trainable(named) -> List[nn.Parameter]:
        params = []
        for name, param in named:
            if param.requires_grad and id(param) not in seen and not split.in_head(name):
                seen.add(id(param))
                params.append(param)
        return params

    def opened(prefix: str, module: nn.Module):
        for name, child in module.named_children():
            name = f"{prefix}.{name}" if prefix else name
            if isinstance(child, _CONTAINERS):
                yield from opened(name, child)
            else:
                yield name, child

    own = trainable(root.named_parameters(prefix=prefix, recurse=False))
    blocks = [(name, trainable(module.named_parameters(prefix=name))) for name, module in opened(prefix, root)]
    blocks = [(name, params) for name, params in blocks if params]
    if own and blocks:
        blocks[0] = (blocks[0][0], own + blocks[0][1])
    elif own:
        blocks = [(prefix, own)]
    split.blocks = blocks
    split.head_params = [param for name, param in model.named_parameters()
                         if param.requires_grad and split.in_head(name) and id(param) not in seen]
    return split
