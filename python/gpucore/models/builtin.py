"""The built-in models: the small CNNs of the original setup guides' scripts (FashionMnistCNN: mnist-gpu.py's;
CaptchaCNN: captcha_train.py's) and the speedrun's FastCNN, whose blocks run as single ops (fused_blocks.py) where no
hook needs their layers one by one."""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn
from torch.nn.modules import module as torch_module

from ..errors import ConfigError
from ..values import is_int
from .fused_blocks import conv_fusable, conv_pool_norm_relu, pool_norm_fusable, pool_norm_relu, traced


class FashionMnistCNN(nn.Module):
    """The Fashion-MNIST network of the usual mnist-gpu.py script: two conv blocks and a classifier, 1x28x28 in."""

    input_size = (28, 28)  # the (height, width) its classifier's 64 x 7 x 7 inputs need (fixed_input_size)

    def __init__(self, num_classes: int = 10, in_channels: int = 1, dropout: float = 0.25):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Dropout(dropout), nn.Linear(64 * 7 * 7, 128), nn.ReLU(inplace=True), nn.Linear(128, num_classes)
        )

    def forward(self, x):
        return self.classifier(self.features(x))


class CaptchaCNN(nn.Module):
    """The captcha recogniser of captcha-trainer scripts: a conv stack and one classifier head per character.

    Returns logits of shape (N, heads * classes), the layout MultiLabelSoftMarginLoss expects.
    """

    def __init__(self, heads: int = 4, classes: int = 36, in_channels: int = 3, height: int = 60, width: int = 160):
        super().__init__()
        layers, channels = [], in_channels
        for out in (32, 64, 128):
            layers += [nn.Conv2d(channels, out, 3, padding=1), nn.BatchNorm2d(out), nn.ReLU(inplace=True), nn.MaxPool2d(2)]
            channels = out
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d((max(height // 8, 1), max(width // 8, 1)))
        flat = channels * max(height // 8, 1) * max(width // 8, 1)
        self.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(0.3), nn.Linear(flat, 512), nn.ReLU(inplace=True),
                                        nn.Linear(512, heads * classes))

    def forward(self, x):
        return self.classifier(self.pool(self.features(x)))


# Whether FastCNN's blocks run gpucore::maxpool_bn_relu by default (model_kwargs fused: true or false).
FUSED_POOL_NORM = True


class FastCNN(nn.Module):
    """The speedrun's network (examples/configs/fashion_mnist_speedrun.yaml): one block per width, each a 3x3
    convolution, a 2x2 max-pool, then BatchNorm and ReLU (airbench's order: the norm and the activation run on a
    quarter of the pixels, and pooling first is the same as pooling after a ReLU), then `extra[i]` more 3x3
    conv-BN-ReLU layers at the pooled size; a max-pool to 3x3 and a linear head on all 9 positions (28x28 in: 14, 7
    and 3 pixels wide, so that pool changes nothing; seed 0 of the speedrun: 92.77% against 92.58% with a global
    max-pool). The layers are torch's in any case (their indices, state_dict keys and hooks are the same with and
    without fused). fused (model_kwargs, default FUSED_POOL_NORM): the forward runs each block's max-pool, BatchNorm
    and ReLU as one op, and the first block's convolution with them (its full-size output never written), where
    models/fused_blocks.py's checks allow (under a CPU autocast the first block's op runs in float32: faster there
    than in bf16, and more exact); a block with a hook on any of its layers, or a hook on `features`, runs layer by
    layer, so every hook sees its own layer's output."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1, widths: Sequence[int] = (32, 64, 128),
                 extra: Sequence[int] = (0, 1, 0), fused: bool = FUSED_POOL_NORM):
        super().__init__()
        if not isinstance(fused, bool):
            raise ConfigError(f"model_kwargs of fast_cnn: fused must be true or false, got {fused!r}")
        if len(widths) != len(extra) or not widths or not all(is_int(n) and n > 0 for n in widths) \
                or not all(is_int(n) and n >= 0 for n in extra):
            raise ConfigError(f"model_kwargs of fast_cnn: widths (positive integers, one per block) and extra (as many "
                              f"integers >= 0) are needed, got widths {list(widths)} and extra {list(extra)}")
        layers, channels, pooled = [], in_channels, []
        for width, more in zip(widths, extra):
            pooled.append(len(layers))
            layers += [nn.Conv2d(channels, width, 3, padding=1, bias=False), nn.MaxPool2d(2), nn.BatchNorm2d(width),
                       nn.ReLU(inplace=True)]
            for _ in range(more):
                layers += [nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width),
                           nn.ReLU(inplace=True)]
            channels = width
        self.features = nn.Sequential(*layers)
        self.fused, self._pooled = fused, frozenset(pooled)  # the blocks' first layers' indices
        self.classifier = nn.Sequential(nn.AdaptiveMaxPool2d(3), nn.Flatten(), nn.Linear(channels * 9, num_classes))

    def forward(self, x):
        features = self.features
        if not self.fused or _hooked(features):
            return self.classifier(features(x))
        layers, index = list(features), 0
        while index < len(layers):
            if index in self._pooled:
                x = _pooled_block(*layers[index:index + 4], x)
                index += 4
            else:
                x = layers[index](x)
                index += 1
        return self._head(x)

    def _head(self, x):
        """The classifier on a feature map already 3 x 3 (28-px images): its max-pool to 3 x 3 changes nothing there
        and is skipped, and a channels-last map meets the linear layer's weight permuted to its own order, where
        flattening it would copy it into torch's order (and its gradient back): the same values up to float
        rounding. Hooks on the classifier, other sizes and traced() forwards run the torch layers."""
        pool, flatten, linear = self.classifier
        if traced(x) or x.shape[-2:] != (3, 3) or _hooked(self.classifier, pool, flatten, linear):
            return self.classifier(x)
        if x.is_contiguous() or not x.is_contiguous(memory_format=torch.channels_last):
            return linear(flatten(x))
        weight = linear.weight.unflatten(1, (x.shape[1], 3, 3)).permute(0, 2, 3, 1).flatten(1)
        return nn.functional.linear(x.permute(0, 2, 3, 1).flatten(1), weight, linear.bias)


def _pooled_block(conv, pool, norm, relu, x):
    """FastCNN's conv -> max-pool -> BatchNorm -> ReLU block in as few ops as its hooks and `x` allow: all four as
    one (fused_blocks.conv_pool_norm_relu, the first block's), the last three as one, else layer by layer (a layer
    inside a fused op would not run its hooks, and a hook must see that layer's own output)."""
    if not _hooked(conv, pool, norm, relu) and conv_fusable(conv, norm, x):
        return conv_pool_norm_relu(conv, norm, x)
    x = conv(x)
    if not _hooked(pool, norm, relu) and pool_norm_fusable(norm, x):
        return pool_norm_relu(norm, x)
    return relu(norm(pool(x)))


def _hooked(*modules: nn.Module) -> bool:
    """Whether calling any of these modules runs a hook (its own or a global one): a layer run inside a fused op
    would not run its hooks."""
    if any(getattr(torch_module, name, None) for name in (
            "_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
            "_global_backward_pre_hooks")):
        return True
    return any(m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks
               for m in modules)
