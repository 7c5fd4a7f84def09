"""A training run's checkpoints, as Lightning's checkpoint connector keeps them apart from the loop: what a
checkpoint holds (`Checkpointing.payload`: enough to resume exactly after any optimizer step, at any world size),
the resume from one (`Checkpointing.resume`, which gives the run's position, history and callbacks their state
back) and the migration of the formats older gpucore releases wrote (`migrate`). The loop, ModelCheckpoint and the step
checkpoints all write what `snapshot` copies to the host."""
from __future__ import annotations

import sys
import warnings
from typing import List, Optional, Sequence

import torch

from ..checkpoint import EMA_STATE, WEIGHTS, host_snapshot, load_checkpoint
from ..data.clip_sequences import ClipSequences
from ..data.identity import check_same_data, check_same_vocabulary
from ..errors import ConfigError
from . import distributed
from .callbacks import BestEpoch, CallbackList, ModelCheckpoint, Monitor
from .ema import monitored_weights
from .engine_config import RunEngine
from .oom import rebatch
from .position import RunPosition, migrated_samples_consumed
from .rng import rng_state, set_rng_state
from .run_dir import RESUME_LOCATION, RunDir, check_resume_keeps_the_run
from .setup_data import RunData
from .setup_model import RunModel


# Schedules whose learning rate at a step depends on the run's total steps (config key epochs): a resume with another
# epochs would stretch or squeeze the rest of the curve from where it stands, so it is refused. constant, step and
# multistep count from the run's start alone: a resume may extend or shorten such a run.
SCHEDULES_OVER_THE_RUN = ("cosine", "onecycle")


def check_schedule_length(path: str, saved_config: dict, config) -> None:
    """ConfigError when resuming checkpoint `path` (of a run configured `saved_config`) with `config` would change
    the learning-rate schedule's length or kind."""
    old_schedule = saved_config.get("schedule", config.schedule)
    if old_schedule != config.schedule:
        raise ConfigError(f"config key 'schedule': checkpoint '{path}' was trained with schedule {old_schedule}, "
                          f"this resume has {config.schedule}; a resume goes on with the run's own schedule: keep "
                          f"schedule {old_schedule}, or start a new run from its weights with pretrained: {path}")
    old_epochs = saved_config.get("epochs", config.epochs)
    if old_epochs != config.epochs and config.schedule in SCHEDULES_OVER_THE_RUN:
        raise ConfigError(f"config key 'epochs': checkpoint '{path}' is of a run of epochs {old_epochs}, this resume "
                          f"has epochs {config.epochs}; schedule {config.schedule} spreads the learning rate over all "
                          f"of the run's steps, so another epochs would change the rest of its curve (the lr would "
                          f"jump). Keep epochs {old_epochs} to resume the run, or start a new run from its weights "
                          f"with pretrained: {path} (and a schedule of its own); a run with schedule constant, step "
                          "or multistep can be resumed with more epochs")


def migrate(checkpoint: dict, world_size: int, batching: dict, best_keepers: Sequence[str]) -> dict:
    """`checkpoint` in the current format. Older ones lack, by age: the batching (no out-of-memory retry had
    changed it: `batching`, the run's), the world size (their own: `world_size`), samples_consumed (they counted
    batches per rank, `position`) and the callbacks' states (they kept only ModelCheckpoint's best epoch, which
    early stopping followed too: given to each callback of `best_keepers`)."""
    migrated = dict(checkpoint)
    migrated.setdefault("batching", batching)
    migrated.setdefault("world_size", world_size)
    if "samples_consumed" not in migrated:
        migrated["samples_consumed"] = migrated_samples_consumed(migrated)
    if not migrated.get("callbacks"):
        migrated["callbacks"] = {key: migrated["best"] for key in best_keepers}
    return migrated


class Checkpointing:
    """The checkpoints of a run, as Lightning's checkpoint connector: the run's model, engine, EMA and RNGs, and the
    fit's state: its position after the last optimizer step (position.py), history and every callback's state
    (`callbacks`; ModelCheckpoint's best epoch also as "best"). `monitor`: which weights the EMA's metrics pick.

    It reads the run's parts: `config` (a resume checks it against the checkpoint's), `world`, the data part
    (setup_data.RunData: what a checkpoint records of the data; an out-of-memory retry's batching re-batches it), the
    model part (setup_model.RunModel), the model's `device` (where a resume loads to), `class_weights` (the loss's,
    as the model step resolved them), the run directory and the engine part (engine_config.RunEngine: the engine,
    reached through it at each use, and the steps of an epoch).

    ModelCheckpoint, one of `callbacks`, writes what `snapshot` returns, and a checkpoint holds every callback's state:
    the two refer to each other, so the fit loop builds this first and appends ModelCheckpoint to the callbacks after
    (fit_loop.fit_loop). The cycle keeps no engine alive: neither holds the engine itself."""

    def __init__(self, config, world: distributed.World, data: RunData, model: RunModel, device: torch.device,
                 class_weights: Optional[List[float]], run_dir: RunDir, training: RunEngine, position: RunPosition,
                 history: List[dict], callbacks: CallbackList, monitor: Monitor):
        self.config, self.world, self.data, self.model, self.device = config, world, data, model, device
        self.class_weights, self.run_dir, self.training = class_weights, run_dir, training
        self.position, self.history, self.callbacks, self.monitor = position, history, callbacks, monitor

    def payload(self) -> dict:
        """What a checkpoint holds: enough to resume exactly after the last optimizer step done (at any world
        size)."""
        states = self.callbacks.state_dict()
        data, model, normalization = self.data, self.model, self.data.normalization
        payload = dict(self.position.state_dict(), history=list(self.history), callbacks=states,
                       best=states[ModelCheckpoint.STATE_KEY], model=model.module.state_dict(),
                       engine=self.training.engine.state(),
                       rng=rng_state(),
                       config=dict(self.run_dir.config), classes=data.classes,
                       class_weights=self.class_weights,  # config key class_weights as resolved: evaluate's loss
                       data=data.identity,
                       input_shape=data.input_shape,
                       input_stats=({"mean": normalization[0], "std": normalization[1]} if normalization else None))
        if model.ema is not None:
            # The weights gpucore.load and the report use: the EMA's when the monitored metric is one of its.
            payload.update({EMA_STATE: model.ema.state_dict(), WEIGHTS: monitored_weights(self.monitor.name)})
        self.callbacks.call("on_save_checkpoint", payload)
        return payload

    def snapshot(self, copy: bool = False) -> dict:
        """The payload copied to the host, for writing (one host read, counted; only the main process, which writes,
        copies). With `copy` it shares nothing with the live state (a write in the background)."""
        payload = self.payload()
        if not self.world.is_main:
            return payload
        self.training.engine.note_host_read("checkpoint")
        return host_snapshot(payload, copy=copy)

    def resume(self, path: str) -> dict:
        """Restores the model, engine, EMA, RNGs and the loop (position, batching, history, callbacks) from checkpoint
        `path`; returns where it resumed (training_stats.json's resume)."""
        config, world, model, engine, position = (self.config, self.world, self.model, self.training.engine,
                                                  self.position)
        saved = load_checkpoint(path, map_location=self.device)
        train_data = self.data.samples[0]
        if isinstance(train_data, ClipSequences):  # named before the weights, which a longer vocabulary would not fit
            check_same_vocabulary(path, saved.get("classes"), train_data.classes)
        try:
            model.module.load_state_dict(saved["model"])
        except RuntimeError as exc:
            raise ConfigError(f"checkpoint '{path}' does not fit the model: {exc}") from exc
        best_keepers = [key for key, callback in self.callbacks.stateful.items() if isinstance(callback, BestEpoch)]
        checkpoint = migrate(saved, world.size, position.batching.to_dict(), best_keepers)
        self._load_fit_state(checkpoint)
        saved_world = int(checkpoint["world_size"])
        engine_state = dict(checkpoint["engine"])
        if saved_world != world.size:
            engine_state["counters.step"] = self._steps_at_this_world_size(path, saved_world, engine_state)
        engine.load_state(engine_state)
        # The epoch's training metrics of its part before the checkpoint (the engine's sums), one process's: a
        # single-process run goes on from them, so the epoch's row is an uninterrupted epoch's; other world sizes
        # average each rank's own, which rank 0's sums do not give, and start the epoch's metrics over.
        position.continues_metrics = position.start_sample > 0 and saved_world == world.size == 1
        if model.ema is not None:
            if EMA_STATE not in checkpoint:
                raise ConfigError(f"checkpoint '{path}' holds no EMA weights (its run had ema_decay 0); resume it "
                                  "with ema_decay 0, or start a new run")
            model.ema.load_state_dict(checkpoint[EMA_STATE])
        saved_config = checkpoint.get("config") or {}
        check_schedule_length(path, saved_config, config)
        given = {key: value for key, value in config.to_dict().items() if key not in RESUME_LOCATION}
        check_resume_keeps_the_run(saved_config, given, f"resume: {self.run_dir.resume}", f"checkpoint '{path}'",
                                   f"pretrained: {path}")
        changed = check_same_data(path, checkpoint.get("data"), self.data.identity, config.accept_changed_data)
        if changed and world.is_main:
            warnings.warn(f"accept_changed_data: resuming '{path}' on changed data: " + "; ".join(changed),
                          stacklevel=2)
        set_rng_state(checkpoint["rng"])
        self.callbacks.call("on_load_checkpoint", saved)
        self.run_dir.write_history(self.history)  # rows written after this checkpoint (a kill) are dropped
        self.run_dir.write_config(self._config_used(saved_config))
        position.engine_read(*engine.step_counts())
        if world.is_main:
            epochs = config.epochs
            if position.epoch >= epochs:
                where = f"all {epochs} epochs done, nothing left to train (optimizer step {position.steps_taken})"
            elif position.unrecorded_row is not None:
                where = (f"epoch {position.epoch + 1} of {epochs} trained, its validation and metrics row left to do, "
                         f"optimizer step {position.steps_taken}")
            else:
                where = (f"epoch {position.epoch + 1} of {epochs}, "
                         + (f"after {position.start_sample} of its samples" if position.start_sample else "from its start")
                         + f", optimizer step {position.steps_taken}")
            print(f"gpucore: resuming from {path}: {where}", file=sys.stderr, flush=True)
        return {"from": path, "epoch": position.epoch, "samples_consumed": position.start_sample,
                "world_size": saved_world}

    def _load_fit_state(self, checkpoint: dict) -> None:
        """The fit goes on from `checkpoint` (in the current format: migrate): its position (and batching, when an
        out-of-memory retry had changed it), history and callbacks' states."""
        batching = self.position.batching
        self.position.load_state_dict(checkpoint)
        if self.position.batching != batching:
            rebatch(self.data, self.training.engine, self.position, self.position.batching)
        self.history[:] = checkpoint["history"]
        self.callbacks.load_state_dict(checkpoint["callbacks"])

    def _config_used(self, saved_config: dict) -> dict:
        """config.json of the resumed run: its config (the run's own keys, those a resume may set as given) with
        config.json's own resume."""
        values = self.config.to_dict()
        # resume is how this start was asked for, not what the run is: config.json keeps the run's first value.
        values["resume"] = self.run_dir.written_config().get("resume", saved_config.get("resume", values["resume"]))
        return values

    def _steps_at_this_world_size(self, path: str, saved_world: int, engine_state: dict) -> torch.Tensor:
        """The optimizer steps this world size takes to where the checkpoint of `saved_world` processes is: the
        schedule (warmup, decay, milestones: counted in steps of an epoch at this world size) goes on from the same
        point of the data, not from the other world size's step count."""
        world, position, steps_per_epoch = self.world, self.position, self.training.steps_per_epoch
        if not self.data.train_set.reshards:
            raise ConfigError(f"checkpoint '{path}' was written by {saved_world} processes, this run has "
                              f"{world.size}: a torch Dataset or DataLoader resumes only at its own world size "
                              "(gpucore's tensor and image-file sources resume at any)")
        steps = position.run_step(steps_per_epoch)
        if world.is_main:
            print(f"gpucore: resuming {saved_world} processes' checkpoint with {world.size}: epoch "
                  f"{position.epoch + 1} goes on after {position.start_sample} of its samples, re-sharded; the schedule "
                  f"from step {steps} of {self.config.epochs * steps_per_epoch}", file=sys.stderr, flush=True)
        saved_steps = engine_state["counters.step"]
        return torch.full_like(saved_steps, float(steps))
