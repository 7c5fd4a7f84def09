"""Out of GPU memory in a training epoch: the state to start the epoch over from (config key
`on_oom: reduce_batch`), and the error that says what to change when it cannot."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from .rng import rng_state, set_rng_state


@dataclass(frozen=True)
class Batching:
    """How a run batches now: config keys batch_size and accumulate_grad_batches, until an out-of-memory retry
    halves the one and doubles the other (the same samples per optimizer step). Checkpoints keep it, so a resumed
    run serves the rest of its epoch in the batches it was trained in."""

    batch_size: int
    accumulate_grad_batches: int

    def halved(self) -> "Batching":
        return Batching(self.batch_size // 2, self.accumulate_grad_batches * 2)

    def to_dict(self) -> dict:
        return {"batch_size": self.batch_size, "accumulate_grad_batches": self.accumulate_grad_batches}


def snapshot(module: nn.Module, engine, ema: Optional[nn.Module]) -> dict:
    """The model, EMA and engine state on the host, to start an epoch over after an out-of-memory error."""
    return {"model": _host_state(module), "ema": _host_state(ema) if ema is not None else None,
            "engine": {k: v.to("cpu") for k, v in engine.state().items()}, "rng": rng_state()}


def _host_state(module: nn.Module) -> dict:
    return {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}


def restore(module: nn.Module, engine, state: dict, ema: Optional[nn.Module]) -> None:
    for param in module.parameters():
        param.grad = None
    module.load_state_dict(state["model"])
    if ema is not None:
        ema.load_state_dict(state["ema"])
    engine.load_state(state["engine"])
    set_rng_state(state["rng"])


def message(config, batching: "Batching", device: torch.device, exc: BaseException) -> str:
    figures = ""
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        figures = (f" {torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB peak allocated by tensors, "
                   f"{torch.cuda.memory_reserved(device) / 2**30:.2f} GiB reserved, {free / 2**30:.2f} of "
                   f"{total / 2**30:.2f} GiB free on {device}.")
    return (f"out of memory with batch_size {batching.batch_size} (accumulate_grad_batches "
            f"{batching.accumulate_grad_batches}, precision {config.precision}).{figures} Lower batch_size and raise "
            "accumulate_grad_batches to keep the effective batch, use precision bf16-mixed or 16-mixed, or set "
            f"on_oom: reduce_batch to do that automatically. The last checkpoint is intact. ({exc})".replace("\n", " "))
