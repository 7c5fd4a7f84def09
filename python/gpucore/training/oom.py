"""Config key on_oom: out of GPU memory in a training epoch. `OomRetry` keeps the state to start the epoch over from
(on_oom: reduce_batch) and, when the memory runs out, restores it and halves the batch (the same samples per
optimizer step), or raises the error that says what to change."""
from __future__ import annotations

import warnings
from typing import Optional

import torch

from ..checkpoint import host_snapshot
from ..errors import OutOfMemoryError, TrainingError
from .fit_outcome import FitOutcome
from .position import Batching, RunPosition
from .rng import rng_state, set_rng_state


def rebatch(data, engine, position: RunPosition, batching: Batching) -> None:
    """From now on the run batches as `batching` (an out-of-memory retry, a resume of a run that had one): its
    position, the engine's micro-batches per step and the training set of its data part (setup_data.RunData) in
    batches of the new size (the same plan)."""
    position.restart_pass(batching)
    engine.set_accumulate_grad_batches(batching.accumulate_grad_batches)
    data.train_set = data.train_set.with_batch_size(batching.batch_size)


class OomRetry:
    """The out-of-memory policy (config key `on_oom`; config key `precision` for its message) of the fit loop of the
    run's model part (setup_model.RunModel) on `device`, training on its data part; each retry (the epoch and its new
    batching) goes into `outcome`'s oom_reductions (training_stats.json's)."""

    def __init__(self, on_oom: str, precision: str, data, model, device: torch.device, outcome: FitOutcome):
        self.precision, self.data, self.model, self.device, self.outcome = precision, data, model, device, outcome
        self.enabled = on_oom == "reduce_batch"
        self._snapshot: Optional[dict] = None

    def before_pass(self, engine) -> None:
        """The model, EMA and `engine` state and the RNGs on the host, to start the pass over from (reduce_batch)."""
        if not self.enabled:
            return
        model = self.model
        state = {"model": model.module.state_dict(),
                 "ema": model.ema.state_dict() if model.ema is not None else None, "engine": engine.state()}
        self._snapshot = dict(host_snapshot(state, copy=True), rng=rng_state())
        engine.note_host_read("oom_snapshot")

    def recover(self, exc: OutOfMemoryError, batching: Batching, epoch: int, engine) -> Batching:
        """After `exc` in epoch `epoch` (from 0): the state of the pass's start back (in the model and `engine`) and
        the halved batching to retry it with; TrainingError saying what to change when it cannot be halved (or
        reduce_batch is off)."""
        if self._snapshot is None or batching.batch_size < 2 or self.data.train_set.fixed_batch_size:
            raise TrainingError(message(self.precision, batching, self.device, exc)) from exc
        self._restore(self._snapshot, engine)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        halved = batching.halved()
        self.outcome.oom_reductions.append(dict(halved.to_dict(), epoch=epoch + 1))
        warnings.warn(f"CUDA ran out of memory in epoch {epoch + 1}; retrying it with batch_size {halved.batch_size} "
                      f"and accumulate_grad_batches {halved.accumulate_grad_batches} (same effective batch)",
                      RuntimeWarning, stacklevel=3)
        return halved

    def _restore(self, state: dict, engine) -> None:
        model = self.model
        for param in model.module.parameters():
            param.grad = None
        model.module.load_state_dict(state["model"])
        if model.ema is not None:
            model.ema.load_state_dict(state["ema"])
        engine.load_state(state["engine"])
        set_rng_state(state["rng"])


def message(precision: str, batching: Batching, device: torch.device, exc: BaseException) -> str:
    figures = ""
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        figures = (f" {torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB peak allocated by tensors, "
                   f"{torch.cuda.memory_reserved(device) / 2**30:.2f} GiB reserved, {free / 2**30:.2f} of "
                   f"{total / 2**30:.2f} GiB free on {device}.")
    return (f"out of memory with batch_size {batching.batch_size} (accumulate_grad_batches "
            f"{batching.accumulate_grad_batches}, precision {precision}).{figures} Lower batch_size and raise "
            "accumulate_grad_batches to keep the effective batch, use precision bf16-mixed or 16-mixed, or set "
            f"on_oom: reduce_batch to do that automatically. The last checkpoint is intact. ({exc})".replace("\n", " "))
