"""The epoch loop of a training run: `fit()` trains epoch after epoch (`advance()`: the engine's pass over the
epoch, validation, the epoch's record) until the last epoch, a callback's stop (early stopping among them) or
Ctrl-C. Its parts, each in its own place: the run's position (position.py), the validation loop
(validation_loop.py), training_stats.json (run_stats.py), the out-of-memory policy (oom.py) and the first batch's
diagnosis (first_batch.py); what a checkpoint holds and the resume from one: checkpointing.py; how the fit stands and
why it stopped: fit_outcome.py; what callbacks receive: trainer.py."""
from __future__ import annotations

import contextlib
import sys
import warnings
from typing import Any, List, Optional, Sequence

import torch

from ..config import KEY_BY_NAME
from ..data.class_folders import listed
from ..errors import OutOfMemoryError, TrainingError
from ..run_history import ENGINE_COUNTERS
from ..signals import StepBoundaries, interrupts_deferred, signal_name
from .. import _C
from . import distributed
from .callbacks import CallbackList, EarlyStopping, FreezeBackbone, ModelCheckpoint, Monitor
from .checkpointing import Checkpointing
from .ema import SPLITS
from .engine_config import RunEngine
from .first_batch import diagnosis
from .fit_outcome import COMPLETED, FAILED, INTERRUPTED, RUNNING, FitOutcome
from .loggers import make_loggers
from .oom import OomRetry, rebatch
from .position import RunPosition
from .progress import EpochProgress, print_epoch
from .run_dir import RunDir
from .run_setup import Run
from .run_stats import RunStats
from .setup_data import RunData
from .setup_model import RunModel
from .step_checkpoints import StepCheckpoints
from .trainer import Trainer
from .user_loss import UserLoss
from .validation_loop import ValidationLoop

_DEFAULT_TOP_K = KEY_BY_NAME["top_k"].default


def fit_loop(run: Run, callbacks: Sequence[Any] = ()) -> "FitLoop":
    """The fit loop of `run` with its parts, each given the pieces of the run it reads (none the whole run, nor the
    engine itself: each reaches it through the engine part, its one owner, so that Run.release_engine frees it at
    once): the run's position and history, the fit's outcome, the callbacks (the built-in ones, the loggers,
    `callbacks`, then ModelCheckpoint) and the trainer they receive, the checkpoints, the validation loop, the
    out-of-memory policy and training_stats.json."""
    config, world, data, model, training = run.config, run.world, run.data, run.model, run.training
    position = RunPosition(training.batching, world.size)  # halved on out of memory
    history: List[dict] = []
    outcome = FitOutcome()
    metric_modes = run.task.metric_modes(config.top_k, SPLITS)  # the task's metrics by record name
    monitor = Monitor(config.monitor, config.mode, config.min_delta, metric_modes, training.auto_monitor)
    built_in = [EarlyStopping(monitor, config.patience)] if config.patience else []
    freeze: Optional[FreezeBackbone] = None
    if config.freeze == "backbone":
        # Its folded forward calls the model itself: not a DDP wrapper (its reducer) or a compiled one.
        wrapped = None if model.forward is model.module else "the model is wrapped for DDP or torch.compile"
        freeze = FreezeBackbone(model.module, config.freeze_epochs, run.placement.policy.autocast_dtype, wrapped)
        built_in.append(freeze)
    trainer = Trainer(config, data, run.run_dir, model, training, position, history, outcome)
    loggers = make_loggers(config, world.is_main, run.run_dir, run.placement)
    callback_list = CallbackList([*built_in, *loggers, *callbacks], trainer)
    # Checkpointing reads every callback's state and ModelCheckpoint writes Checkpointing's snapshots: built in that
    # order, ModelCheckpoint appended last, as in Lightning: a checkpoint holds every other callback's state after the
    # epoch.
    checkpointing = Checkpointing(config, world, data, model, run.placement.device, run.task.class_weights,
                                  run.run_dir, training, position, history, callback_list, monitor)
    checkpoints = ModelCheckpoint(monitor, run.run_dir, checkpointing, config.save_every_n_epochs, config.keep_last_k)
    callback_list.append(checkpoints)
    step_checkpoints = StepCheckpoints(run.run_dir.checkpoint_dir, config.checkpoint_every_n_steps,
                                       config.checkpoint_every_minutes, world.is_main)
    run_stats = RunStats(config.lr_scaling, config.cuda_graphs, run.summary, run.run_dir, training,
                         model.ema is not None, data, position, history, outcome, checkpoints, step_checkpoints, freeze)
    return FitLoop(config, world=world, data=data, model=model, device=run.placement.device, loss=run.loss,
                   reports_top_k=run.task.reports_top_k, run_dir=run.run_dir, training=training,
                   group_store=run.group_store, position=position, history=history, outcome=outcome,
                   metric_modes=metric_modes, callbacks=callback_list, checkpointing=checkpointing,
                   checkpoints=checkpoints, freeze=freeze, validation=ValidationLoop(data, model, run.loss, config.tta),
                   oom=OomRetry(config.on_oom, config.precision, data, model, run.placement.device, outcome),
                   run_stats=run_stats, step_checkpoints=step_checkpoints)


class FitLoop:
    """The epochs of one run, as Lightning's fit loop: `fit()` calls `advance()` (one epoch: the engine's pass,
    validation, the record, the callbacks and checkpoints) until the last epoch, a stop asked for (early stopping, a
    callback) or a signal, and says why it stopped (`outcome.reason`). Built by `fit_loop`, which gives each part
    what it reads; the loop owns only what moves between its parts during an epoch (the forward the engine calls,
    the step boundaries where signals land).

    Of the run it reads `config`, `world`, the data, model and engine parts (setup_data.RunData, setup_model.RunModel,
    engine_config.RunEngine: the engine is reached through it at each use), the model's `device`, `loss` (train()'s
    loss callable, None: the task's), whether the task reports top-k accuracy (`reports_top_k`), the run directory
    and the process group's store (`group_store`, None when the run created none)."""

    def __init__(self, config, *, world: distributed.World, data: RunData, model: RunModel, device: torch.device,
                 loss: Optional[UserLoss], reports_top_k: bool, run_dir: RunDir, training: RunEngine,
                 group_store: Optional[Any], position: RunPosition, history: List[dict], outcome: FitOutcome,
                 metric_modes: dict, callbacks: CallbackList, checkpointing: Checkpointing,
                 checkpoints: ModelCheckpoint, freeze: Optional[FreezeBackbone], validation: ValidationLoop,
                 oom: OomRetry, run_stats: RunStats, step_checkpoints: StepCheckpoints):
        self.config, self.world, self.data, self.model, self.device = config, world, data, model, device
        self.loss, self.reports_top_k, self.run_dir, self.training = loss, reports_top_k, run_dir, training
        self.group_store = group_store
        self.position, self.history, self.outcome = position, history, outcome
        self.metric_modes = metric_modes
        self.callbacks, self.checkpointing, self.checkpoints, self.freeze = callbacks, checkpointing, checkpoints, freeze
        self.validation, self.oom, self.run_stats, self.step_checkpoints = validation, oom, run_stats, step_checkpoints
        # Where SIGTERM and SIGUSR1 are raised; with several processes, at a boundary the ranks agree on.
        self.step_boundaries = StepBoundaries(
            distributed.StopVotes(distributed.default_store(), world) if world.size > 1 else None)
        self.steps_in_fit = 0  # optimizer steps taken since fit() began: names a step boundary alike on every rank
        # cuda_graphs: why the engine steps eagerly, as last said (setup warned of the reason it started with)
        self.eager_reason_said = training.engine.graph_stats()["reason"]
        self.train_forward = model.forward  # what the engine calls this epoch (FreezeBackbone's folded forward)
        # Files left out that the terminal was told of: those of formats gpucore does not decode, when read.
        self.files_said = set().union(*(getattr(samples, "unread", []) for samples in data.samples
                                        if samples is not None))

    @property
    def epoch(self) -> int:
        """Epochs trained: the current epoch's index, from 0 (callbacks read it)."""
        return self.position.epoch

    # ---- the loop -----------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.outcome.status != COMPLETED or self.position.epoch >= self.config.epochs

    def fit(self) -> str:
        """Trains to the end; returns the status: completed, early_stopped, stopped or interrupted."""
        self.run_stats.write(RUNNING)
        if self.world.launched and self.world.is_main:
            batch = self.run_stats.batching_facts()
            print(f"gpucore: batch {batch['per_process']} per process x {batch['processes']} processes x "
                  f"accumulate {batch['accumulate_grad_batches']} = effective batch {batch['effective']}; lr "
                  f"{batch['lr']:g} (lr_scaling {batch['lr_scaling']})", file=sys.stderr, flush=True)
        try:
            with self.step_boundaries.installed():  # SIGTERM and SIGUSR1 stop the run as Ctrl-C does
                self.callbacks.call("on_fit_start")
                while not self.done:
                    self.advance()
                if self.outcome.status == COMPLETED:
                    self.outcome.end(COMPLETED, f"max epochs reached ({self.config.epochs})")
                self._say_why_it_stopped()
                self.callbacks.call("on_fit_end")
        except BaseException as exc:
            with contextlib.suppress(TrainingError):  # no write outlives the run; the error in flight wins
                self.step_checkpoints.wait()
            if self.group_store is not None and distributed.is_peer_failure(exc):
                error = distributed.peer_failure_error(self.world, self.group_store, self.config.dist_timeout, exc)
                self.outcome.end(FAILED, f"failed: {error}")
                self.run_stats.write(FAILED, str(error))
                raise error from exc
            self.outcome.end(FAILED, f"failed: {type(exc).__name__}: {exc}")
            self.run_stats.write(FAILED, f"{type(exc).__name__}: {exc}")
            raise
        self.run_stats.write(self.outcome.status)
        return self.outcome.status

    def _say_why_it_stopped(self) -> None:
        """The one line on the terminal that says why the fit ended (as Lightning's "`Trainer.fit` stopped: ...")."""
        if self.config.progress and self.world.is_main:
            print(f"gpucore: training stopped: {self.outcome.reason}", file=sys.stderr, flush=True)

    def advance(self) -> None:
        """One epoch: train, validate, record, checkpoint. Ctrl-C keeps what is done in interrupted.pt: a signal
        between the pass's end and the epoch's row (in validation) keeps the row's training part, and the resumed run
        starts by validating and recording that epoch."""
        config, data, position = self.config, self.data, self.position
        # The epoch's batch source is no local of these frames (data.train_set.current): a traceback kept after an
        # error would keep a streamed source, and its reader threads, alive after train()'s run.close().
        progress = None  # a signal may land before the epoch's bar exists (its source starting): the same save
        try:
            # one held during the last epoch's end, now that its row is written
            self.step_boundaries.raise_pending(self.steps_in_fit)
            if position.unrecorded_row is None:  # else a resumed epoch whose pass was done: only its row is left
                position.start_clock()
                steps = position.batching.steps_in(
                    data.train_set.epoch(position.epoch, position.start_sample).remaining())
                progress = EpochProgress(config.progress and self.world.is_main, steps, position.epoch + 1,
                                         config.epochs, config.log_every_n_steps)
                self.model.module.train()
                self.callbacks.call("on_epoch_start", position.epoch + 1)  # after train(): frozen norms back to eval
                # The frozen epochs' folded forward, which FreezeBackbone built in on_epoch_start; else the model's.
                forward = self.model.forward
                self.train_forward = self.freeze.epoch_forward(forward) if self.freeze is not None else forward
                if self.device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(self.device)
                stats = self._train_pass(progress)
                progress.close()
                if stats is None:
                    return  # out of memory: the epoch starts over with half the batch
                with self.step_boundaries.held():  # a signal waits until interrupted.pt would keep the row's start
                    position.unrecorded_row = self._epoch_record(stats)
                self.step_boundaries.raise_pending(self.steps_in_fit)  # a signal during the epoch's last step
            record = dict(position.unrecorded_row)
            record.update(self.validation.run_epoch(position.epoch, self.training.engine))
            record.update(_memory(self.device))
            self.checkpoints.monitor.value(record)  # a monitor the record lacks fails before anything is written
            with self.step_boundaries.held():  # the row, the callbacks' epoch end and checkpoints: all or none
                position.unrecorded_row = None  # the history holds the row from here on, and so do checkpoints
                self._end_epoch(record)
        except KeyboardInterrupt as interrupt:
            if progress is not None:
                progress.close()
            if not position.pass_complete():  # the partial epoch's training time, which no metrics.jsonl row holds
                self.run_stats.interrupted_epoch_seconds = position.epoch_seconds()  # with a resumed epoch's earlier parts
            self.outcome.stopped_by = signal_name(interrupt)
            with interrupts_deferred(replay=False):  # the run is stopping: the same signal again must not stop the save
                self.step_checkpoints.wait()  # interrupted.pt is then the newest file
                # At the last full optimizer step: mid-epoch, the samples its steps took; once every step of the pass
                # is done (a signal in the last one, raised before the engine returned, or in validation), the next
                # epoch's start, with the epoch's row to write while it is not written (position.unrecorded_row).
                self.run_dir.save_interrupted(self.checkpointing.snapshot())
            # The steps since the last read of the metrics, for training_stats.json and the result (two reads).
            position.engine_read(*self.training.engine.step_counts())
            self.outcome.end(INTERRUPTED, f"interrupted by {self.outcome.stopped_by}")
            return
        except BaseException:
            if progress is not None:
                progress.close()  # the error then starts on a line of its own
            raise
        position.next_epoch()
        if self.outcome.asked is not None:
            self.outcome.end(*self.outcome.asked)

    def _train_pass(self, progress: EpochProgress) -> Optional[dict]:
        """The engine's statistics of one pass over the rest of the epoch started (data.train_set.current), or None
        when it ran out of memory and will be retried."""
        config, data, position = self.config, self.data, self.position
        engine, epoch = self.training.engine, position.epoch
        steps_before = self.steps_in_fit

        def on_log(metrics, steps_taken):  # after an optimizer step: a step boundary
            self.step_boundaries.raise_pending(steps_before + engine.steps_in_pass())
            position.engine_read(steps_taken, metrics["skipped_steps"])
            progress.update(metrics, position.batching.samples_per_step(1))  # this process's
            self.callbacks.call("on_log", steps_taken, dict(metrics, epoch=epoch + 1))

        step_hook = self.callbacks.overridden("on_train_step_end")

        def on_step(steps_in_pass: int, checkpoint_due: bool):  # where the engine's step_calls ask: a step boundary
            position.steps_done(steps_in_pass)
            # Without a step callback only rank 0 comes here (its step checkpoints): no place to decide a stop at.
            self.step_boundaries.raise_pending(steps_before + steps_in_pass, decide=step_hook)
            if step_hook:  # before the step checkpoint, which then holds the callbacks' state after the step
                self.callbacks.call("on_train_step_end", position.step_in_epoch(steps_in_pass))
            if checkpoint_due:
                self.step_checkpoints.write(self.checkpointing.snapshot(copy=True), steps_in_pass, engine.steps_in_pass)

        checkpoints = self.step_checkpoints
        step_calls = _C.StepCalls(every_step=step_hook, every_n_steps=checkpoints.every_n_steps,
                                  every_seconds=checkpoints.every_seconds, steps_before=position.steps_before_pass())
        self.oom.before_pass(engine)
        try:
            hooked = None if config.compile else self.train_forward  # see holding_steps
            with self.step_boundaries.holding_steps(hooked, position.batching.accumulate_grad_batches, steps_before):
                position.begin_pass(data.train_set.current.remaining())
                try:
                    stats = engine.train_epoch(
                        data.train_set.current, self.train_forward, self.loss, on_log, epoch=epoch,
                        first_batch=position.first_batch(),
                        # None: no call into Python (and the GIL) after the steps
                        on_step=on_step if checkpoints.enabled or step_hook else None, step_calls=step_calls,
                        continue_metrics=position.continues_metrics)
                finally:  # also after an interrupt: the steps done are where a resume goes on
                    position.steps_done(engine.steps_in_pass())
                    self.steps_in_fit = steps_before + engine.steps_in_pass()
            position.engine_read(stats["steps_taken"], stats["metrics"].get("skipped_steps", 0))
            self._warn_on_eager_steps()
            return stats
        except OutOfMemoryError as exc:
            progress.close()
            rebatch(data, engine, position, self.oom.recover(exc, position.batching, epoch, engine))
            return None
        except RuntimeError as exc:
            error = diagnosis(config, data, exc, nothing_trained=position.steps_taken == 0 and position.steps_in_pass == 0
                              and epoch == position.start_epoch)
            if error is None:
                raise
            raise error from exc

    def _warn_on_eager_steps(self) -> None:
        """cuda_graphs: true and the engine steps eagerly for a new reason (a step it could not capture, found by
        trying; accumulate_grad_batches > 1 after an out-of-memory retry): say so once."""
        reason = self.training.engine.graph_stats()["reason"]
        if reason and reason != self.eager_reason_said and self.config.cuda_graphs == "true":
            self.eager_reason_said = reason
            warnings.warn(f"cuda_graphs: true, but the steps run eagerly from here on: {reason}", stacklevel=2)

    def _epoch_record(self, stats: dict) -> dict:
        """The epoch's row of metrics.jsonl before validation: training metrics averaged over the ranks, counters."""
        config, world, position = self.config, self.world, self.position
        record = {"epoch": position.epoch + 1}
        train_metrics = {k: v for k, v in stats["metrics"].items() if k not in ENGINE_COUNTERS}
        if world.size > 1:
            # through the process group's store: the host waits for the other ranks, reads nothing of the device
            train_metrics = distributed.average_metrics(train_metrics, stats["samples"])
        record.update({f"train_{k}": v for k, v in train_metrics.items()})
        # Only when top_k was changed: the default (5) quietly stays off for models of few classes.
        if (position.epoch == position.start_epoch and self.reports_top_k
                and config.top_k not in (0, _DEFAULT_TOP_K) and f"train_top{config.top_k}_accuracy" not in record):
            warnings.warn(f"config key 'top_k' is {config.top_k}, but the model has at most that many classes, so "
                          f"top-{config.top_k} accuracy is always 1 and is not reported; set top_k below the "
                          "number of classes, or 0", RuntimeWarning, stacklevel=2)
        # A resumed epoch counts its parts before the resume too: its time and rate are an uninterrupted epoch's.
        seconds = position.seconds_before_pass + stats["seconds"]
        samples = position.start_sample + stats["samples"] * world.size  # all ranks together
        record.update({
            "lr": stats["metrics"].get("lr"), "loss_scale": stats["metrics"].get("loss_scale"),
            "skipped_steps": int(stats["metrics"].get("skipped_steps", 0)),
            "epoch_time_s": seconds,
            "samples_per_s": samples / max(seconds, 1e-9),
        })
        return record

    def _end_epoch(self, record: dict) -> None:
        self.history.append(record)
        self.run_dir.write_history(self.history)
        self.step_checkpoints.wait()  # the epoch's checkpoints are then newer than its step.pt
        self.callbacks.call("on_epoch_end", record["epoch"], record)  # early stopping, loggers, the user's, checkpoints
        self.step_checkpoints.superseded()
        self.run_stats.write(RUNNING)
        self._say_skipped_files()
        if self.config.progress and self.world.is_main:
            print_epoch(record, self.config.epochs, self.metric_modes)

    def _say_skipped_files(self) -> None:
        """Unreadable files (images, clips) on_error: skip left out since the last epoch, on the terminal (the first
        few and a count), never only in training_stats.json."""
        new = [entry for entry in self.run_stats.skipped_files() if entry not in self.files_said]
        if new and self.world.is_main:
            warnings.warn(f"on_error: skip left {len(new)} unreadable file{'s' if len(new) > 1 else ''} out: "
                          f"{listed(new, 3)} (training_stats.json's skipped_files and report.html list them all)",
                          stacklevel=2)
        self.files_said.update(new)

    def teardown(self) -> None:
        """The callbacks' last hook, after the report; also after an error."""
        self.callbacks.call("teardown")

    def resume(self, path: str) -> None:
        """Restores the run and this loop's parts from checkpoint `path` (checkpointing.py)."""
        self.outcome.resumed = self.checkpointing.resume(path)


def _memory(device: torch.device) -> dict:
    if device.type != "cuda":
        return {"gpu_memory_peak_bytes": None, "gpu_memory_allocated_bytes": None}
    return {"gpu_memory_peak_bytes": torch.cuda.max_memory_allocated(device),
            "gpu_memory_allocated_bytes": torch.cuda.memory_allocated(device)}
