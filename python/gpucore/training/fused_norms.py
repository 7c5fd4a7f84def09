"""The forward that a model's trainable BatchNorms train through on a CPU (config key fused_norms): each
BatchNorm2d -> ReLU and BatchNorm2d -> + residual -> ReLU of the model's forward (every ResNet block has one of each)
runs as one op, gpucore::bn_add_relu (csrc/ops/norm_relu.h), where torch runs batch_norm, add and relu forward and
threshold_backward and batch_norm_backward backward. On a ResNet-18 at 224 px in bf16 they are about a fifth of a
CPU step (`python -m bench profile`).

The forward is a torch.fx graph of the model (graph_forward.py) with those calls replaced: the same BatchNorm
modules, parameters and running statistics (updated as BatchNorm2d updates them), the same state_dict and
checkpoints. A BatchNorm or ReLU module with hooks of its own, a BatchNorm whose output has other users, or a
tensor the op cannot take (another device, dtype or shape) runs torch's layers; a model with a module whose
`fuses_own_norms` is true (fast_cnn) is left as it is."""
from __future__ import annotations

import operator
from typing import Callable, Dict, Optional

import torch
import torch.fx
from torch import nn
from torch.nn import functional as F

from ..models.fused_blocks import norm_relu, norm_relu_fusable
from ..ops import NORM_RELU_DEVICES
from .graph_forward import CannotRewrite, CheckedGraphForward, trace, unhooked

_RELU_FUNCTIONS = (torch.relu, torch.relu_, F.relu)
_ADD_FUNCTIONS = (operator.add, operator.iadd, torch.add)


class NormAddReLU(nn.Module):
    """ReLU(norm(x) + residual), or ReLU(norm(x)) without a residual: gpucore::bn_add_relu where it takes the
    tensors, else torch's layers."""

    def __init__(self, norm: nn.BatchNorm2d):
        super().__init__()
        object.__setattr__(self, "norm", norm)  # not a submodule: its parameters stay the model's alone

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None) -> torch.Tensor:
        if norm_relu_fusable(self.norm, x, residual):
            return norm_relu(self.norm, x, residual)
        out = self.norm(x)
        return torch.relu(out if residual is None else out + residual)


def _fusable_norm(module: nn.Module) -> bool:
    """A BatchNorm2d (BatchNorm2d's own forward: not SyncBatchNorm's) with affine parameters, running statistics and
    no hooks."""
    return (isinstance(module, nn.BatchNorm2d) and type(module).forward is nn.modules.batchnorm._BatchNorm.forward
            and module.affine and module.track_running_stats and unhooked(module))


def _is_relu(node: torch.fx.Node, modules: Dict[str, nn.Module]) -> bool:
    """A ReLU call of one tensor: an unhooked nn.ReLU module, torch.relu(_) or F.relu."""
    if node.op == "call_module":
        module = modules.get(node.target)  # None: a call this rewrite added
        return type(module) is nn.ReLU and unhooked(module) and len(node.args) == 1 and not node.kwargs
    return (node.op == "call_function" and node.target in _RELU_FUNCTIONS and len(node.args) == 1
            and set(node.kwargs) <= {"inplace"})


def _only_user(node: torch.fx.Node) -> Optional[torch.fx.Node]:
    return next(iter(node.users)) if len(node.users) == 1 else None


def _rewrite(module: nn.Module) -> tuple:
    """The fx graph of `module` with each fusable BatchNorm -> (add ->) ReLU as one NormAddReLU call; the counts of
    the two forms."""
    graph = trace(module)
    modules = dict(graph.named_modules())
    plain = residual = 0
    for node in list(graph.graph.nodes):
        if not (node.op == "call_module" and _fusable_norm(modules[node.target]) and len(node.args) == 1
                and not node.kwargs):
            continue
        after = _only_user(node)
        other = None
        if (after is not None and after.op == "call_function" and after.target in _ADD_FUNCTIONS
                and len(after.args) == 2 and not after.kwargs and node in after.args):
            other = after.args[1] if after.args[0] is node else after.args[0]
            if not isinstance(other, torch.fx.Node) or other is node:
                continue
            add, after = after, _only_user(after)
        if after is None or not _is_relu(after, modules):
            continue
        name = f"gpucore_norm_relu_{plain + residual}"
        graph.add_submodule(name, NormAddReLU(modules[node.target]))
        with graph.graph.inserting_before(after):
            fused = graph.graph.call_module(name, (node.args[0],) if other is None else (node.args[0], other))
        after.replace_all_uses_with(fused)
        graph.graph.erase_node(after)
        if other is not None:
            graph.graph.erase_node(add)
        graph.graph.erase_node(node)
        if other is None:
            plain += 1
        else:
            residual += 1
    if not plain + residual:
        raise CannotRewrite("the model has no BatchNorm2d followed by a ReLU (or by an add, then a ReLU)")
    graph.graph.lint()
    graph.recompile()
    return graph, plain, residual


class FusedNormsForward(CheckedGraphForward):
    """What the engine trains through while fused_norms is on: `module`'s forward with its BatchNorm + ReLU calls
    fused (see the module docstring). Raises CannotRewrite where the model has none or cannot be traced."""

    def __init__(self, module: nn.Module, autocast_dtype: Optional[torch.dtype],
                 note_host_read: Optional[Callable[[str], None]] = None):
        graph, plain, residual = _rewrite(module)
        super().__init__(module, graph, autocast_dtype, "fused_norms_check", note_host_read)
        self.plain, self.residual = plain, residual

    def summary(self) -> Dict[str, object]:
        """training_stats.json's fused_norms: the fused calls, or why the model's own forward was used."""
        if self.failed:
            return {"unchanged": self.failed}
        return {"norm_relu": self.plain, "norm_add_relu": self.residual}


class FusedNorms:
    """Config key fused_norms for one run: the forward the engine trains through (`forward`: a FusedNormsForward,
    or None and `off` says why not) and training_stats.json's account of it."""

    def __init__(self, enabled: bool, module: nn.Module, forward, device: torch.device,
                 autocast_dtype: Optional[torch.dtype], note_host_read: Optional[Callable[[str], None]] = None):
        self.forward: Optional[FusedNormsForward] = None
        self.off: Optional[str] = None
        if not enabled:
            self.off = "fused_norms: false"
        elif device.type not in NORM_RELU_DEVICES:
            self.off = f"gpucore::bn_add_relu has a CPU kernel only; on {device.type} torch's layers run"
        elif forward is not module:  # it calls the model itself: not a DDP wrapper (its reducer) or a compiled one
            self.off = "the model is wrapped for DDP or torch.compile"
        elif any(getattr(m, "fuses_own_norms", False) for m in module.modules()):
            self.off = "the model chooses its own fused ops (fast_cnn: model_kwargs fused)"
        else:
            try:
                self.forward = FusedNormsForward(module, autocast_dtype, note_host_read)
            except CannotRewrite as exc:
                self.off = str(exc)

    def epoch_forward(self, model_forward):
        """What the engine calls: the fused forward where there is one, else `model_forward`."""
        return self.forward if self.forward is not None else model_forward

    def summary(self) -> Dict[str, object]:
        return self.forward.summary() if self.forward is not None else {"unchanged": self.off}
