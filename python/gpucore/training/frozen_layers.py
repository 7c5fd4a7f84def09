"""The forward that the epochs of a frozen backbone train through (config key freeze: backbone). Frozen layers
compute a fixed function, so what every step would redo is done once: a frozen convolution whose output only feeds
a frozen BatchNorm in eval mode becomes one convolution with the BatchNorm folded into its weight and bias, and the
weights of frozen convolutions and linear layers are cast to the autocast dtype once rather than at every step.
On a frozen ResNet-18 the BatchNorms and autocast's weight casts are about a third of the step
(`python -m bench profile`).

The model is untouched: its parameters, buffers, state_dict, hooks and checkpoints stay as they are. The forward is
a torch.fx graph of the model that calls the model's own modules (the head trains through them), with only the
folded layers replaced. It is checked against the model's own forward on its first batch, with the same random
draws; where the model cannot be traced, or the check fails, training goes on through the model's own forward and
`FrozenLayersForward.summary()` (training_stats.json's frozen_layers) says why."""
from __future__ import annotations

from typing import Callable, Dict, Optional

import torch
import torch.fx
from torch import nn
from torch.nn import functional as F

_CONV_FORWARDS = (nn.Conv1d.forward, nn.Conv2d.forward, nn.Conv3d.forward)
# On a check's first batch the folded forward may differ from the model's own by rounding only: relative to the
# output's largest value, this much (reduced-precision autocast rounds every layer's output to 8 or 11 bits).
_CHECK_TOLERANCE = {None: 1e-3, torch.bfloat16: 5e-2, torch.float16: 5e-2}


class CannotFold(Exception):
    """The model's frozen layers cannot be folded; the message says why."""


def _untrained_and_unhooked(module: nn.Module) -> bool:
    """None of its own parameters train, and it has no hooks that a replaced call would skip."""
    return (not any(p.requires_grad for p in module.parameters(recurse=False))
            and not module._forward_hooks and not module._forward_pre_hooks)


def _frozen(module: nn.Module) -> bool:
    """A layer with parameters, untrained and unhooked."""
    return next(module.parameters(recurse=False), None) is not None and _untrained_and_unhooked(module)


def _foldable_norm(module: nn.Module) -> bool:
    """A frozen BatchNorm in eval mode with running statistics (affine or not): an affine map per channel."""
    return (isinstance(module, nn.modules.batchnorm._BatchNorm)
            and type(module).forward is nn.modules.batchnorm._BatchNorm.forward  # SyncBatchNorm has its own
            and not module.training and module.running_mean is not None and _untrained_and_unhooked(module))


class FrozenLayer(nn.Module):
    """A frozen convolution or linear layer `layer`, with the eval-mode BatchNorm `norm` after it folded in (or
    None), computed from weights made once: in the layer's dtype, and a copy in `autocast_dtype` that the forward
    uses while that autocast is on (None: no copy)."""

    def __init__(self, layer: nn.Module, norm: Optional[nn.Module], autocast_dtype: Optional[torch.dtype]):
        super().__init__()
        # Read for its stride, padding and dilation; not a submodule: its parameters stay the model's alone.
        object.__setattr__(self, "layer", layer)
        with torch.no_grad():
            weight = layer.weight.detach().float()
            bias = layer.bias.detach().float() if layer.bias is not None else weight.new_zeros(weight.shape[0])
            if norm is not None:
                scale = torch.rsqrt(norm.running_var.float() + norm.eps)
                if norm.weight is not None:
                    scale = scale * norm.weight.detach().float()
                shift = -norm.running_mean.float() * scale
                if norm.bias is not None:
                    shift = shift + norm.bias.detach().float()
                weight = weight * scale.view(-1, *[1] * (weight.dim() - 1))
                bias = bias * scale + shift
            self.register_buffer("weight", self._like(layer.weight, weight, layer.weight.dtype))
            self.register_buffer("bias", bias.to(layer.weight.dtype))
            self.autocast_dtype = autocast_dtype if autocast_dtype != layer.weight.dtype else None
            if self.autocast_dtype is not None:
                self.register_buffer("autocast_weight", self._like(layer.weight, weight, self.autocast_dtype))
                self.register_buffer("autocast_bias", bias.to(self.autocast_dtype))

    @staticmethod
    def _like(reference: torch.Tensor, values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """`values` in `dtype` with the memory format (channels-last or not) of `reference`."""
        return torch.empty_like(reference, dtype=dtype).copy_(values)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        device = inputs.device.type
        if self.autocast_dtype is not None and torch.is_autocast_enabled(device) \
                and torch.get_autocast_dtype(device) == self.autocast_dtype:
            weight, bias = self.autocast_weight, self.autocast_bias
        if isinstance(self.layer, nn.Linear):
            return F.linear(inputs, weight, bias)
        return self.layer._conv_forward(inputs, weight, bias)


def _fold(module: nn.Module, autocast_dtype: Optional[torch.dtype]) -> tuple:
    """The fx graph of `module` with its frozen layers replaced, the BatchNorms folded and the layers cast once."""
    if module._forward_hooks or module._forward_pre_hooks:
        raise CannotFold("the model has forward hooks of its own, which a traced graph of it would not call")
    try:
        graph = torch.fx.symbolic_trace(module)
    except Exception as exc:  # noqa: BLE001  tracing fails in many ways (control flow on values, non-tensor inputs)
        raise CannotFold(f"torch.fx cannot trace the model ({type(exc).__name__}: {str(exc).splitlines()[0]})") from exc
    modules = dict(graph.named_modules())
    folded = cast = 0
    for node in list(graph.graph.nodes):
        if node.op != "call_module":
            continue
        layer = modules[node.target]
        is_conv = isinstance(layer, nn.modules.conv._ConvNd) and type(layer).forward in _CONV_FORWARDS
        is_linear = isinstance(layer, nn.Linear) and type(layer).forward is nn.Linear.forward
        if not (is_conv or is_linear) or not _frozen(layer):
            continue
        norm_node = next(iter(node.users)) if is_conv and len(node.users) == 1 else None
        norm = (modules[norm_node.target] if norm_node is not None and norm_node.op == "call_module"
                and not norm_node.kwargs and _foldable_norm(modules[norm_node.target]) else None)
        if norm is None and autocast_dtype is None:
            continue  # nothing to do once for this layer
        name = f"gpucore_frozen_{folded + cast}"
        graph.add_submodule(name, FrozenLayer(layer, norm, autocast_dtype))
        node.target = name
        if norm is not None:
            norm_node.replace_all_uses_with(node)
            graph.graph.erase_node(norm_node)
            folded += 1
        else:
            cast += 1
    if not folded + cast:
        raise CannotFold("the model has no frozen convolution or linear layer to fold or cast")
    graph.graph.lint()
    graph.recompile()
    return graph, folded, cast


class FrozenLayersForward(nn.Module):
    """What the engine calls while the backbone is frozen: `module`'s forward through its folded graph (see the
    module docstring). Build it after the freeze (parameters without gradients, norms in eval mode) and drop it
    when the layers train again. Raises CannotFold where nothing can be folded."""

    def __init__(self, module: nn.Module, autocast_dtype: Optional[torch.dtype],
                 note_host_read: Optional[Callable[[str], None]] = None):
        super().__init__()
        graph, self.folded, self.cast = _fold(module, autocast_dtype)
        self.module, self.autocast_dtype = module, autocast_dtype
        self.note_host_read = note_host_read  # the engine's count of host reads (the check makes one)
        self.__dict__["graph"] = graph  # not a submodule: the model's modules are registered once, under module
        self.failed: Optional[str] = None  # why the check on the first batch failed
        self.checked = False

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if not self.checked:
            self.checked = True
            self._check(inputs)
        return self.module(inputs) if self.failed else self.graph(inputs)

    def _check(self, inputs: torch.Tensor) -> None:
        """The model's own forward on `inputs`, with the random draws the folded forward then makes (dropout) and
        the buffers (a head's BatchNorm statistics) put back after it, against the folded forward's."""
        buffers = [buffer.clone() for buffer in self.module.buffers()]
        devices = [inputs.device] if inputs.device.type == "cuda" else []

        def untouched(forward):  # the output, the random state and the buffers as they were before
            with torch.random.fork_rng(devices=devices), torch.no_grad():
                output = forward(inputs)
                for buffer, saved in zip(self.module.buffers(), buffers):
                    buffer.copy_(saved)
            return output

        expected, got = untouched(self.module), untouched(self.graph)
        if not isinstance(expected, torch.Tensor) or not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            self.failed = f"its output is not the model's: {type(got).__name__} against {type(expected).__name__}"
            return
        expected, got = expected.float(), got.float()
        error, scale = torch.stack([(got - expected).abs().max(), expected.abs().max()]).tolist()  # one host read
        if self.note_host_read is not None:
            self.note_host_read("frozen_layers_check")
        tolerance = _CHECK_TOLERANCE.get(self.autocast_dtype, 5e-2) * scale
        if not error <= tolerance:  # also NaN
            self.failed = (f"on the first batch it differs from the model's own forward by {error:.3g} (allowed "
                           f"{tolerance:.3g}): the model's forward does more than its traced graph shows")

    def summary(self) -> Dict[str, object]:
        """training_stats.json's frozen_layers: the layers made once and the BatchNorms folded into them, or why the
        model's own forward was used."""
        if self.failed:
            return {"unchanged": self.failed}
        dtype = str(self.autocast_dtype).replace("torch.", "") if self.autocast_dtype else None
        return {"layers": self.folded + self.cast, "batch_norms_folded": self.folded, "weights_cast_once_to": dtype}
