"""A forward the engine trains through in place of the model's own: a torch.fx graph of the model that calls the
model's own modules, with some of its layers replaced by faster ones computing the same function (frozen_layers.py:
a frozen backbone's folded BatchNorms; fused_norms.py: BatchNorm + residual add + ReLU as one op). The model is
untouched: its parameters, buffers, state_dict, hooks and checkpoints stay as they are. The graph is checked against
the model's own forward on the first batch, with the same random draws and the buffers put back after each; where
the check fails, training goes on through the model's own forward and `failed` says why."""
from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.fx
from torch import nn

# On a check's first batch the graph's forward may differ from the model's own by rounding only: relative to the
# output's largest value, this much (reduced-precision autocast rounds every layer's output to 8 or 11 bits).
_CHECK_TOLERANCE = {None: 1e-3, torch.bfloat16: 5e-2, torch.float16: 5e-2}


class CannotRewrite(Exception):
    """The model's forward cannot be rewritten; the message says why."""


def unhooked(module: nn.Module) -> bool:
    """No forward hooks that a replaced call would skip."""
    return not module._forward_hooks and not module._forward_pre_hooks


def trace(module: nn.Module) -> torch.fx.GraphModule:
    """The fx graph of `module`'s forward, calling its own modules; CannotRewrite where it has hooks of its own or
    cannot be traced."""
    if not unhooked(module):
        raise CannotRewrite("the model has forward hooks of its own, which a traced graph of it would not call")
    try:
        return torch.fx.symbolic_trace(module)
    except Exception as exc:  # noqa: BLE001  tracing fails in many ways (control flow on values, non-tensor inputs)
        raise CannotRewrite(
            f"torch.fx cannot trace the model ({type(exc).__name__}: {str(exc).splitlines()[0]})") from exc


class CheckedGraphForward(nn.Module):
    """`module`'s forward through `graph` (an fx graph of it, rewritten), checked on the first batch against
    `module` itself within the tolerance of `autocast_dtype`; the check's one host read is counted as `check_name`
    by `note_host_read` (the engine's counter)."""

    def __init__(self, module: nn.Module, graph: torch.fx.GraphModule, autocast_dtype: Optional[torch.dtype],
                 check_name: str, note_host_read: Optional[Callable[[str], None]] = None):
        super().__init__()
        self.module, self.autocast_dtype = module, autocast_dtype
        self.check_name, self.note_host_read = check_name, note_host_read
        self.__dict__["graph"] = graph  # not a submodule: the model's modules are registered once, under module
        self.failed: Optional[str] = None  # why the check on the first batch failed
        self.checked = False

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if not self.checked:
            self.checked = True
            self._check(inputs)
        return self.module(inputs) if self.failed else self.graph(inputs)

    def _check(self, inputs: torch.Tensor) -> None:
        """The model's own forward on `inputs`, with the random draws the graph then makes (dropout) and the buffers
        (BatchNorm statistics) put back after it, against the graph's."""
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
            self.note_host_read(self.check_name)
        tolerance = _CHECK_TOLERANCE.get(self.autocast_dtype, 5e-2) * scale
        if not error <= tolerance:  # also NaN
            self.failed = (f"on the first batch it differs from the model's own forward by {error:.3g} (allowed "
                           f"{tolerance:.3g}): the model's forward does more than its traced graph shows")
