"""A training run's checkpoints, as Lightning's checkpoint connector keeps them apart from the loop: what a
checkpoint holds (`Checkpointing.payload`: enough to resume exactly after any optimizer step, at any world size),
the resume from one (`Checkpointing.resume`) and the migration of the formats older gpucore releases wrote
(`migrate`). The loop, ModelCheckpoint and the step checkpoints all write what `payload` makes."""
from __future__ import annotations

import sys
from typing import Dict, Sequence

import torch

from ..checkpoint import EMA_STATE, WEIGHTS, load_checkpoint
from ..errors import ConfigError
from . import oom
from .callbacks import BestEpoch
from .ema import monitored_weights
from .rng import rng_state, set_rng_state


def migrate(checkpoint: dict, world_size: int, batching: dict, best_keepers: Sequence[str]) -> dict:
    """`checkpoint` in the current format. Older ones lack, by age: the batching (no out-of-memory retry had
    changed it: `batching`, the run's), the world size (their own: `world_size`), samples_consumed (they counted
    batches per rank, `position`) and the callbacks' states (they kept only ModelCheckpoint's best epoch, which
    early stopping followed too: given to each callback of `best_keepers`)."""
    migrated = dict(checkpoint)
    migrated.setdefault("batching", batching)
    migrated.setdefault("world_size", world_size)
    if "samples_consumed" not in migrated:
        migrated["samples_consumed"] = (migrated["position"] * migrated["batching"]["batch_size"]
                                        * migrated["world_size"])
    if not migrated.get("callbacks"):
        migrated["callbacks"] = {key: migrated["best"] for key in best_keepers}
    return migrated


class Checkpointing:
    """The checkpoints of `loop` (a FitLoop): its run, position, batching, history and callbacks."""

    def __init__(self, loop):
        self.loop = loop

    def payload(self, epoch: int, samples_consumed: int) -> dict:
        """What a checkpoint holds: enough to resume exactly after `samples_consumed` samples of epoch `epoch`'s
        order over all ranks (at any world size)."""
        loop = self.loop
        run, monitor = loop.run, loop.checkpoints.monitor
        payload = {"model": run.module.state_dict(), "engine": run.engine.state(), "rng": rng_state(), "epoch": epoch,
                   "samples_consumed": samples_consumed, "world_size": run.world.size,
                   "batching": loop.batching.to_dict(), "history": loop.history,
                   "best": loop.checkpoints.state_dict(),
                   "callbacks": {key: callback.state_dict() for key, callback in loop.stateful.items()},
                   "config": run.config.to_dict(), "classes": run.classes, "input_shape": run.input_shape,
                   "input_stats": ({"mean": run.normalization[0], "std": run.normalization[1]}
                                   if run.normalization else None)}
        if run.ema is not None:
            # The weights gpucore.load and the report use: the EMA's when the monitored metric is one of its.
            payload.update({EMA_STATE: run.ema.state_dict(), WEIGHTS: monitored_weights(monitor.name)})
        loop.callbacks.call("on_save_checkpoint", payload)
        return payload

    def resume(self, path: str) -> dict:
        """Restores the model, engine, RNGs, position, batching, history and callbacks from checkpoint `path`;
        returns where it resumed (training_stats.json's resume)."""
        loop = self.loop
        run = loop.run
        saved = load_checkpoint(path, map_location=run.device)
        try:
            run.module.load_state_dict(saved["model"])
        except RuntimeError as exc:
            raise ConfigError(f"checkpoint '{path}' does not fit the model: {exc}") from exc
        best_keepers = [key for key, callback in loop.stateful.items() if isinstance(callback, BestEpoch)]
        checkpoint = migrate(saved, run.world.size, loop.batching.to_dict(), best_keepers)
        loop.epoch = loop.start_epoch = int(checkpoint["epoch"])
        batching = oom.Batching(**checkpoint["batching"])
        if batching != loop.batching:
            loop.set_batching(batching)
        saved_world = int(checkpoint["world_size"])
        loop.start_sample = int(checkpoint["samples_consumed"])
        engine_state = dict(checkpoint["engine"])
        if saved_world != run.world.size:
            engine_state["counters.step"] = self._steps_at_this_world_size(path, saved_world, engine_state)
        run.engine.load_state(engine_state)
        if run.ema is not None:
            if EMA_STATE not in checkpoint:
                raise ConfigError(f"checkpoint '{path}' holds no EMA weights (its run had ema_decay 0); resume it "
                                  "with ema_decay 0, or start a new run")
            run.ema.load_state_dict(checkpoint[EMA_STATE])
        set_rng_state(checkpoint["rng"])
        loop.history = list(checkpoint["history"])
        states: Dict[str, dict] = checkpoint["callbacks"]
        for key, callback in loop.stateful.items():
            if key in states:
                callback.load_state_dict(states[key])
        loop.callbacks.call("on_load_checkpoint", saved)
        run.run_dir.write_history(loop.history)  # rows written after this checkpoint (a kill) are dropped
        return {"from": path, "epoch": loop.epoch, "samples_consumed": loop.start_sample, "world_size": saved_world}

    def _steps_at_this_world_size(self, path: str, saved_world: int, engine_state: dict) -> torch.Tensor:
        """The optimizer steps this world size takes to where the checkpoint of `saved_world` processes is: the
        schedule (warmup, decay, milestones: counted in steps of an epoch at this world size) goes on from the same
        point of the data, not from the other world size's step count."""
        loop = self.loop
        run = loop.run
        if not run.train_set.reshards:
            raise ConfigError(f"checkpoint '{path}' was written by {saved_world} processes, this run has "
                              f"{run.world.size}: a torch Dataset or DataLoader resumes only at its own world size "
                              "(gpucore's tensor and image-file sources resume at any)")
        steps = loop.epoch * run.steps_per_epoch + loop.start_sample // loop.samples_per_step()
        if run.world.is_main:
            print(f"gpucore: resuming {saved_world} processes' checkpoint with {run.world.size}: epoch "
                  f"{loop.epoch + 1} goes on after {loop.start_sample} of its samples, re-sharded; the schedule "
                  f"from step {steps} of {run.config.epochs * run.steps_per_epoch}", file=sys.stderr, flush=True)
        saved_steps = engine_state["counters.step"]
        return torch.full_like(saved_steps, float(steps))
