"""The epoch loop of a training run: `fit()` trains epoch after epoch (`advance()`) until the last epoch,
a callback's stop (early stopping among them) or Ctrl-C; the out-of-memory retry, the first-batch diagnosis,
each epoch's record and training_stats.json live here too. What a checkpoint holds and the resume from one:
checkpointing.py."""
from __future__ import annotations

import contextlib
import math
import sys
import time
import warnings
from typing import Any, List, Optional, Sequence

import torch

from .. import transforms as transforms_list
from ..config import KEY_BY_NAME
from ..errors import ConfigError, OutOfMemoryError, TrainingError
from ..models.tta import with_tta
from ..process_settings import process_settings
from ..signals import StepBoundaries, signal_name
from . import distributed
from . import oom
from .callbacks import CallbackList, EarlyStopping, FreezeBackbone, ModelCheckpoint, Monitor
from .checkpointing import Checkpointing
from .ema import SPLITS, VAL_EMA, monitored_weights
from .engine_config import scaled_lr
from .epoch_data import make_train_set
from .loggers import make_loggers
from .progress import EpochProgress, print_epoch
from .run_setup import Run
from .step_checkpoints import StepCheckpoints

# Counters the engine reports with the training metrics; they go into the record without a train_ prefix.
_COUNTERS = ("lr", "loss_scale", "skipped_steps")
_DEFAULT_TOP_K = KEY_BY_NAME["top_k"].default


class FitLoop:
    def __init__(self, run: Run, callbacks: Sequence[Any] = ()):
        config = run.config
        self.run = run
        self.metric_modes = run.task.metric_modes(config.top_k, SPLITS)  # the task's metrics by record name
        monitor = Monitor(config.monitor, config.mode, config.min_delta, self.metric_modes, run.task.primary_metric)
        self.checkpointing = Checkpointing(self)
        self.checkpoints = ModelCheckpoint(monitor, run.run_dir, self.checkpointing,
                                           config.save_every_n_epochs, config.keep_last_k)
        built_in = [EarlyStopping(monitor, config.patience)] if config.patience else []
        if config.freeze == "backbone":
            built_in.append(FreezeBackbone(run.module, config.freeze_epochs))
        # ModelCheckpoint last, as in Lightning: a checkpoint holds every other callback's state after the epoch.
        self.callbacks = CallbackList([*built_in, *make_loggers(run), *callbacks, self.checkpoints], self)
        self.stateful = _stateful(self.callbacks)
        self.history: List[dict] = []
        self.epoch = self.start_epoch = 0
        # Samples of the current epoch's order over all ranks trained before this pass over it (a resume
        # mid-epoch, at this or another world size).
        self.start_sample = 0
        self.step_checkpoints = StepCheckpoints(run.run_dir.checkpoint_dir, config.checkpoint_every_n_steps,
                                                config.checkpoint_every_minutes, run.world.is_main)
        self.batching = oom.Batching(config.batch_size, config.accumulate_grad_batches)  # halved on out of memory
        self.status = "completed"  # until a stop, Ctrl-C or an error ends the run
        self.should_stop = False  # set by a callback: the run ends after this epoch, with status stop_status
        self.stop_status = "stopped"
        self.stopped_by: Optional[str] = None  # interrupted: the signal, SIGINT (Ctrl-C), SIGTERM or SIGUSR1
        self.step_boundaries = StepBoundaries()  # where those signals are raised
        self.pass_started = False  # set in each epoch's pass once the engine runs it (see advance)
        self.oom_reductions: List[dict] = []  # each out-of-memory retry: epoch, new batch_size, accumulation
        self.warned_on_capture = False  # cuda_graphs: a failed capture is warned about once
        self.resumed: Optional[dict] = None  # the checkpoint a resume read, its epoch and data position
        # training_stats.json's seconds.setup, which gpucore.train measures: reading the data, building the model and
        # the engine (the report adds seconds.report).
        self.setup_seconds: Optional[float] = None
        # The training time of an epoch Ctrl-C or a signal cut short: it has no metrics.jsonl row (epoch_time_s),
        # so training_stats.json's seconds.interrupted_epoch keeps it.
        self.interrupted_epoch_seconds = 0.0

    # ---- the loop -----------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.status != "completed" or self.epoch >= self.run.config.epochs

    def fit(self) -> str:
        """Trains to the end; returns the status: completed, early_stopped, stopped or interrupted."""
        self.write_stats("running")
        if self.run.world.launched and self.run.world.is_main:
            batch = self.batching_facts()
            print(f"gpucore: batch {batch['per_process']} per process x {batch['processes']} processes x "
                  f"accumulate {batch['accumulate_grad_batches']} = effective batch {batch['effective']}; lr "
                  f"{batch['lr']:g} (lr_scaling {batch['lr_scaling']})", file=sys.stderr, flush=True)
        try:
            with self.step_boundaries.installed():  # SIGTERM and SIGUSR1 stop the run as Ctrl-C does
                self.callbacks.call("on_fit_start")
                while not self.done:
                    self.advance()
                self.callbacks.call("on_fit_end")
        except BaseException as exc:
            run = self.run
            self.status = "failed"
            with contextlib.suppress(TrainingError):  # no write outlives the run; the error in flight wins
                self.step_checkpoints.wait()
            if run.group_store is not None and distributed.is_peer_failure(exc):
                error = distributed.peer_failure_error(run.world, run.group_store, run.config.dist_timeout, exc)
                self.write_stats("failed", str(error))
                raise error from exc
            self.write_stats("failed", f"{type(exc).__name__}: {exc}")
            raise
        self.write_stats(self.status)
        return self.status

    def advance(self) -> None:
        """One epoch: train, validate, record, checkpoint. Ctrl-C keeps what is done in interrupted.pt."""
        run, config = self.run, self.run.config
        trained = False  # whether this epoch's optimizer steps are all done
        self.pass_started = False  # until the engine begins this pass, its step count is the previous pass's
        source = run.train_set.epoch(self.epoch, self.start_sample)
        windows = math.ceil(source.remaining() / self.batching.accumulate_grad_batches)  # steps in this pass
        progress = EpochProgress(config.progress and run.world.is_main, windows, self.epoch + 1, config.epochs,
                                 config.log_every_n_steps)
        started = time.perf_counter()
        try:
            run.module.train()
            self.callbacks.call("on_epoch_start", self.epoch + 1)  # after train(): frozen norms go back to eval
            if run.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(run.device)
            stats = self._train_epoch(progress, source, windows)
            progress.close()
            if stats is None:
                return  # out of memory: the epoch starts over with half the batch
            trained = True
            self.step_boundaries.raise_pending()  # a signal during the epoch's last step
            self.start_sample = 0
            self._end_epoch(self._validate_and_record(stats))
        except KeyboardInterrupt as interrupt:
            if not trained:  # the partial epoch's training time, which no metrics.jsonl row holds
                self.interrupted_epoch_seconds = time.perf_counter() - started
            self.stopped_by = signal_name(interrupt)
            # Mid-epoch, the data position is the end of the last full optimizer step; after the epoch's
            # steps, the epoch counts as trained (its log row may be missing).
            progress.close()
            self.step_checkpoints.wait()  # interrupted.pt is then the newest file
            done = run.engine.windows_in_epoch() if self.pass_started else 0
            # Every step of the pass taken (a signal in the last one, raised by a step callback before the engine
            # returned): the epoch is trained. Its samples are then not done x samples_per_step when the last batch
            # is short, and a resume would start past the end of the epoch's order.
            trained = trained or done >= windows
            payload = self.checkpointing.payload
            run.run_dir.save_interrupted(payload(self.epoch + 1, 0) if trained else
                                         payload(self.epoch, self._consumed(done)))
            self.status = "interrupted"
            return
        self.epoch += 1
        if self.should_stop:
            self.status = self.stop_status

    def _train_epoch(self, progress: EpochProgress, source, windows: int) -> Optional[dict]:
        """The engine's statistics of one pass over the epoch's `windows` optimizer steps from `source`, or None
        when it ran out of memory and will be retried."""
        run, config = self.run, self.run.config
        engine, epoch = run.engine, self.epoch
        samples_per_step = self.batching.batch_size * self.batching.accumulate_grad_batches
        steps_before = self.start_sample // self.samples_per_step()  # of the epoch, before this pass

        def on_log(metrics):  # after an optimizer step: a step boundary
            self.step_boundaries.raise_pending()
            progress.update(metrics, samples_per_step)
            self.callbacks.call("on_log", engine.steps_taken(), dict(metrics, epoch=epoch + 1))

        step_hook = self.callbacks.overridden("on_train_step_end")

        def on_step(done: int):  # after every optimizer step: a step boundary
            self.step_boundaries.raise_pending()
            if step_hook:  # before the step checkpoint, which then holds the callbacks' state after the step
                self.callbacks.call("on_train_step_end", steps_before + done)
            # The epoch's last step is followed by its end-of-epoch checkpoint instead.
            if (self.step_checkpoints.enabled and done < windows
                    and self.step_checkpoints.advance_and_check_due(steps_before + done)):
                self.step_checkpoints.write(lambda: self.checkpointing.payload(epoch, self._consumed(done)))

        snapshot = oom.snapshot(run.module, engine, run.ema) if config.on_oom == "reduce_batch" else None
        try:
            # first_batch: this rank's batches of the epoch before this pass, where the mixup draws go on.
            hooked = None if config.compile else run.module  # see holding_steps
            with self.step_boundaries.holding_steps(hooked, self.batching.accumulate_grad_batches):
                self.pass_started = True
                stats = engine.train_epoch(source, run.forward, run.loss, on_log, epoch=epoch,
                                           first_batch=self.start_sample // (self.batching.batch_size * run.world.size),
                                           # None: no call into Python (and the GIL) after every step
                                           on_step=on_step if self.step_checkpoints.enabled or step_hook else None)
            self._warn_on_failed_capture()
            return stats
        except OutOfMemoryError as exc:
            progress.close()
            if snapshot is None or run.train_set.batch_size < 2 or run.train_set.fixed_batch_size:
                raise TrainingError(oom.message(config, self.batching, run.device, exc)) from exc
            oom.restore(run.module, engine, snapshot, run.ema)
            self._halve_batch()
            return None
        except RuntimeError as exc:
            if isinstance(exc, TrainingError) or engine.steps_taken() > 0 or epoch != self.start_epoch:
                raise
            # Nothing has trained yet: most likely the model does not fit the data.
            resized = _transformed_size(run)
            keys = "model, model_kwargs, data, data_kwargs" + (", transforms" if resized else "")
            raise TrainingError(
                f"the model failed on the first training batch ({run.train_set.description}): {exc}\n{resized}"
                f"Check that the model fits the data: input channels, image size, number of classes (config keys "
                f"{keys})") from exc

    def _warn_on_failed_capture(self) -> None:
        """cuda_graphs: true and the engine found, by trying, a step it could not capture: say so once."""
        reason = self.run.engine.graph_stats()["reason"]
        if reason and self.run.config.cuda_graphs == "true" and not self.warned_on_capture:
            self.warned_on_capture = True
            warnings.warn(f"cuda_graphs: true, but the steps run eagerly from here on: {reason}", stacklevel=2)

    def graph_stats(self) -> dict:
        """training_stats.json's cuda_graphs: what config key cuda_graphs asked, the steps captured (each also a
        step), replayed and run eagerly, and why steps ran eagerly (None: none did for a reason)."""
        run = self.run
        stats = dict(run.engine.graph_stats(), asked=run.config.cuda_graphs)
        if run.graphs_reason:  # the engine was never asked to capture: every step ran eagerly
            stats.update(reason=run.graphs_reason, eager_steps=run.engine.steps_taken() + run.engine.steps_skipped())
        return stats

    def _halve_batch(self) -> None:
        """Same samples per optimizer step, half of them per micro-batch; the epoch starts over."""
        if self.run.device.type == "cuda":
            torch.cuda.empty_cache()
        self.set_batching(self.batching.halved())
        self.oom_reductions.append(dict(self.batching.to_dict(), epoch=self.epoch + 1))
        warnings.warn(f"CUDA ran out of memory in epoch {self.epoch + 1}; retrying it with batch_size "
                      f"{self.batching.batch_size} and accumulate_grad_batches {self.batching.accumulate_grad_batches} "
                      "(same effective batch)", RuntimeWarning, stacklevel=2)

    def set_batching(self, batching: "oom.Batching") -> None:
        run = self.run
        self.batching = batching
        run.engine.set_accumulate_grad_batches(batching.accumulate_grad_batches)
        run.train_set = make_train_set(run.train_data, run.config, str(run.device), run.normalization, run.world,
                                       batching.batch_size)

    def _validate_and_record(self, stats: dict) -> dict:
        """Validates the epoch's model (and its EMA) and returns the epoch's row of metrics.jsonl: training metrics
        averaged over the ranks, validation, counters."""
        run, config = self.run, self.run.config
        record = {"epoch": self.epoch + 1}
        train_metrics = {k: v for k, v in stats["metrics"].items() if k not in _COUNTERS}
        train_metrics = distributed.average_metrics(train_metrics, stats["samples"], run.device)
        record.update({f"train_{k}": v for k, v in train_metrics.items()})
        # Only when top_k was changed: the default (5) quietly stays off for models of few classes.
        if (self.epoch == self.start_epoch and run.task.reports_top_k
                and config.top_k not in (0, _DEFAULT_TOP_K) and f"train_top{config.top_k}_accuracy" not in record):
            warnings.warn(f"config key 'top_k' is {config.top_k}, but the model has at most that many classes, so "
                          f"top-{config.top_k} accuracy is always 1 and is not reported; set top_k below the "
                          "number of classes, or 0", RuntimeWarning, stacklevel=2)
        if run.val_set is not None:
            started = time.perf_counter()
            run.module.eval()
            val_stats = run.engine.evaluate(run.val_set.epoch(self.epoch), with_tta(run.forward, config.tta), run.loss)
            record.update({f"val_{k}": v for k, v in val_stats["metrics"].items()})
            if run.ema is not None:
                ema_stats = run.engine.evaluate(run.val_set.epoch(self.epoch), with_tta(run.ema, config.tta), run.loss)
                record.update({f"{VAL_EMA}_{k}": v for k, v in ema_stats["metrics"].items()})
            record["val_time_s"] = time.perf_counter() - started  # the metrics are on the host: the work is done
        record.update({
            "lr": stats["metrics"].get("lr"), "loss_scale": stats["metrics"].get("loss_scale"),
            "skipped_steps": int(stats["metrics"].get("skipped_steps", 0)),
            "epoch_time_s": stats["seconds"],
            "samples_per_s": stats["samples"] * run.world.size / max(stats["seconds"], 1e-9),  # all ranks together
        })
        record.update(_memory(run.device))
        self.checkpoints.monitor.value(record)  # a monitor the record lacks fails before anything is written
        return record

    def _end_epoch(self, record: dict) -> None:
        run = self.run
        self.history.append(record)
        run.run_dir.write_history(self.history)
        self.step_checkpoints.wait()  # the epoch's checkpoints are then newer than its step.pt
        self.callbacks.call("on_epoch_end", record["epoch"], record)  # early stopping, loggers, the user's, checkpoints
        self.step_checkpoints.superseded()
        self.step_checkpoints.restart_clock()
        self.write_stats("running")
        if run.config.progress and run.world.is_main:
            print_epoch(record, run.config.epochs, self.metric_modes)

    def teardown(self) -> None:
        """The callbacks' last hook, after the report; also after an error."""
        self.callbacks.call("teardown")

    # ---- state --------------------------------------------------------------------------------
    def samples_per_step(self) -> int:
        """Samples of the epoch's order all ranks together train in one optimizer step."""
        return self.batching.batch_size * self.batching.accumulate_grad_batches * self.run.world.size

    def _consumed(self, windows: int) -> int:
        """Samples of the epoch's order over all ranks trained after `windows` optimizer steps of this pass."""
        return self.start_sample + windows * self.samples_per_step()

    def resume(self, path: str) -> None:
        """Restores the run and this loop from checkpoint `path` (checkpointing.py)."""
        self.resumed = self.checkpointing.resume(path)

    def skipped_files(self) -> List[str]:
        return sorted(set().union(*(s.skipped_files() for s in (self.run.train_set, self.run.val_set) if s is not None)))

    def batching_facts(self) -> dict:
        """The batch per process and over all processes, and the learning rate lr_scaling makes of it."""
        config, world = self.run.config, self.run.world.size
        return {"per_process": self.batching.batch_size, "accumulate_grad_batches": self.batching.accumulate_grad_batches,
                "processes": world, "effective": self.samples_per_step(), "lr_scaling": config.lr_scaling,
                "lr": scaled_lr(config, world)}

    def best(self) -> dict:
        """The best epoch for training_stats.json; with ema_decay also which weights it was (ema: the EMA's)."""
        best = self.checkpoints.state_dict()
        if self.run.ema is None:
            return best
        return dict(best, weights=monitored_weights(best["monitor"]))

    def stats(self, status: str, error: Optional[str] = None) -> dict:
        """training_stats.json: the run's facts, its status and history, the best epoch and the engine's counts."""
        run = self.run
        return dict(run.summary(), **({"oom_reductions": self.oom_reductions} if self.oom_reductions else {}),
                    status=status, error=error, stopped_by=self.stopped_by, epochs=self.history,
                    batch=self.batching_facts(),
                    step_checkpoints=self.step_checkpoints.written,
                    step_checkpoint_writes=self.step_checkpoints.summary(),
                    resume=dict(self.resumed or {}, asked=run.run_dir.resume,
                                implied_by_restart=run.run_dir.resume_implied),
                    best=self.best(), steps=run.engine.steps_taken(),
                    skipped_steps=run.engine.steps_skipped(), host_syncs=run.engine.host_syncs(),
                    cuda_graphs=self.graph_stats(), process_settings=process_settings(), seconds=self.seconds(),
                    skipped_files=self.skipped_files())

    def seconds(self) -> dict:
        """training_stats.json's seconds: where the run's wall time went (the epochs of this process's pass; training
        includes interrupted_epoch, the time trained in an epoch an interrupt cut short)."""
        return {"setup": self.setup_seconds,
                "training": sum(r["epoch_time_s"] for r in self.history) + self.interrupted_epoch_seconds,
                "interrupted_epoch": self.interrupted_epoch_seconds,
                "validation": sum(r.get("val_time_s", 0.0) for r in self.history)}

    def write_stats(self, status: str, error: Optional[str] = None) -> None:
        self.run.run_dir.write_stats(self.stats(status, error))


def _memory(device: torch.device) -> dict:
    if device.type != "cuda":
        return {"gpu_memory_peak_bytes": None, "gpu_memory_allocated_bytes": None}
    return {"gpu_memory_peak_bytes": torch.cuda.max_memory_allocated(device),
            "gpu_memory_allocated_bytes": torch.cuda.memory_allocated(device)}


def _stateful(callbacks: Sequence[Any]) -> dict:
    """The callbacks whose state checkpoints keep, by state key (a Callback's, else its class name)."""
    stateful = {}
    for callback in callbacks:
        if not hasattr(callback, "state_dict"):
            continue
        key = getattr(callback, "state_key", type(callback).__qualname__)
        if key in stateful:
            raise ConfigError(f"two callbacks keep their state under '{key}' in checkpoints; give one of them "
                              "another state_key (a property of gpucore.Callback)")
        stateful[key] = callback
    return stateful


def _transformed_size(run) -> str:
    """A sentence for the first batch's error when config key transforms (with crop_padding and hflip) changes the
    images' size, which the model then gets: "" when it keeps it, or the inputs are not images of one size."""
    shape, config = run.input_shape, run.config
    if not shape or len(shape) != 3 or not shape[1] or not shape[2]:
        return ""
    height, width = int(shape[1]), int(shape[2])
    try:
        value = transforms_list.training_form(config.transforms, config.crop_padding, config.hflip, (height, width))
        after = tuple(transforms_list.output_size(value, height, width))
    except Exception:  # noqa: BLE001 - the config was checked; this is only a hint
        return ""
    if after == (height, width):
        return ""
    return (f"config key transforms turns the {height} x {width} images into {after[0]} x {after[1]}, the size the "
            f"model gets: make the model take {after[0]} x {after[1]} inputs, or choose transforms that keep "
            f"{height} x {width} (RandomCrop: {{size: {height}, padding: 4}} crops with padding to the same size).\n")
