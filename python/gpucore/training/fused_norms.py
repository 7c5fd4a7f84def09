"""The forward a torchvision ResNet trains through on a CPU (config key fused_norms): the model's own forward, with
each torchvision BasicBlock's and Bottleneck's BatchNorm -> ReLU and BatchNorm -> + identity -> ReLU as one op
(gpucore::bn_add_relu, csrc/ops/norm_relu.h) and the ResNet's stem, BatchNorm -> ReLU -> MaxPool2d(3, 2, 1), as one
op (gpucore::bn_relu_maxpool, csrc/ops/norm_relu_pool.h). Where torch runs batch_norm, add, relu and max_pool2d
forward and their backwards, each a pass over the activations (the stem's at 112 x 112 px), these ops make fewer
passes and write no full-size ReLU output or gradient (`python -m bench profile`).

Only those classes' forwards are replaced, each by the same calls in the same order (the same modules, parameters,
running statistics and state_dict; the convolutions and downsample still called as modules, with their hooks), and
only while the engine's forward runs: the model's own forward and any Python in it run as written. A block or ResNet
whose class overrides forward, a BatchNorm, ReLU or max-pool with a hook (or a global hook), or a tensor the ops
cannot take (another device or dtype) runs torch's layers."""
from __future__ import annotations

import sys
import types
from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch import nn

from ..models.fused_blocks import (hooked, norm_relu, norm_relu_fusable, norm_relu_pool, norm_relu_pool_fusable,
                                   stem_pool)
from ..ops import NORM_RELU_DEVICES

_TORCHVISION_RESNET = "torchvision.models.resnet"


def _norm_relu(norm: nn.Module, relu: nn.Module, x: torch.Tensor, residual: Optional[torch.Tensor] = None):
    """relu(norm(x) + residual) (or relu(norm(x))): one op where the layers are plain and unhooked, else theirs."""
    if (type(norm) is nn.BatchNorm2d and type(relu) is nn.ReLU and not hooked(norm, relu)
            and norm_relu_fusable(norm, x, residual)):
        return norm_relu(norm, x, residual)
    out = norm(x)
    if residual is not None:
        out += residual
    return relu(out)


def _basic_block_forward(self, x):  # torchvision's BasicBlock.forward, fused
    identity = x
    out = _norm_relu(self.bn1, self.relu, self.conv1(x))
    out = self.conv2(out)
    if self.downsample is not None:
        identity = self.downsample(x)
    return _norm_relu(self.bn2, self.relu, out, identity)


def _bottleneck_forward(self, x):  # torchvision's Bottleneck.forward, fused
    identity = x
    out = _norm_relu(self.bn1, self.relu, self.conv1(x))
    out = _norm_relu(self.bn2, self.relu, self.conv2(out))
    out = self.conv3(out)
    if self.downsample is not None:
        identity = self.downsample(x)
    return _norm_relu(self.bn3, self.relu, out, identity)


def _resnet_forward(self, x):  # torchvision's ResNet._forward_impl, the stem fused
    x = self.conv1(x)
    if (type(self.bn1) is nn.BatchNorm2d and type(self.relu) is nn.ReLU and stem_pool(self.maxpool)
            and not hooked(self.bn1, self.relu, self.maxpool) and norm_relu_pool_fusable(self.bn1, x)):
        x = norm_relu_pool(self.bn1, x)
    else:
        x = self.maxpool(self.relu(self.bn1(x)))
    x = self.layer1(x)
    x = self.layer2(x)
    x = self.layer3(x)
    x = self.layer4(x)
    x = self.avgpool(x)
    x = torch.flatten(x, 1)
    return self.fc(x)


def _fused_forwards(module: nn.Module) -> List[Tuple[nn.Module, Callable]]:
    """The torchvision BasicBlocks, Bottlenecks and ResNets in `module` whose class's forward is torchvision's own
    (not a subclass, no forward set on the instance), each with its fused forward."""
    resnet = sys.modules.get(_TORCHVISION_RESNET)
    if resnet is None:  # no torchvision model was built in this process
        return []
    forwards = {resnet.BasicBlock: _basic_block_forward, resnet.Bottleneck: _bottleneck_forward}
    found = []
    for m in module.modules():
        if "forward" in m.__dict__:
            continue
        if type(m) in forwards:
            found.append((m, forwards[type(m)]))
        elif type(m) is resnet.ResNet and type(m)._forward_impl is resnet.ResNet._forward_impl:
            found.append((m, _resnet_forward))
    return found


class FusedNormsForward(nn.Module):
    """What the engine calls while fused_norms is on: `module` itself, its torchvision ResNet parts' forwards
    replaced by the fused ones (see the module docstring) for the call's duration."""

    def __init__(self, module: nn.Module, fused: List[Tuple[nn.Module, Callable]]):
        super().__init__()
        self.module, self.__dict__["fused"] = module, fused  # not submodules: the model's own

    def forward(self, inputs):
        for part, forward in self.fused:
            part.forward = types.MethodType(forward, part)
        try:
            return self.module(inputs)
        finally:
            for part, _ in self.fused:
                part.__dict__.pop("forward", None)

    def summary(self) -> Dict[str, int]:
        names = {_basic_block_forward: "basic_blocks", _bottleneck_forward: "bottlenecks", _resnet_forward: "stems"}
        counts = {name: 0 for name in names.values()}
        for _, forward in self.fused:
            counts[names[forward]] += 1
        return {name: count for name, count in counts.items() if count}


class FusedNorms:
    """Config key fused_norms for one run: the forward the engine trains through (`forward`: a FusedNormsForward,
    or None and `off` says why not) and training_stats.json's account of it."""

    def __init__(self, enabled: bool, module: nn.Module, forward, device: torch.device):
        self.forward: Optional[FusedNormsForward] = None
        self.off: Optional[str] = None
        if not enabled:
            self.off = "fused_norms: false"
        elif device.type not in NORM_RELU_DEVICES:
            self.off = f"gpucore::bn_add_relu has a CPU kernel only; on {device.type} torch's layers run"
        elif forward is not module:  # it calls the model itself: not a DDP wrapper (its reducer) or a compiled one
            self.off = "the model is wrapped for DDP or torch.compile"
        else:
            fused = _fused_forwards(module)
            if fused:
                self.forward = FusedNormsForward(module, fused)
            else:
                self.off = "the model has no torchvision ResNet block (BasicBlock, Bottleneck) or stem"

    def epoch_forward(self, model_forward):
        """What the engine calls: the fused forward where there is one, else `model_forward`."""
        return self.forward if self.forward is not None else model_forward

    def summary(self) -> Dict[str, object]:
        return self.forward.summary() if self.forward is not None else {"unchanged": self.off}
