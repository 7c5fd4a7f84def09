"""gpucore.train: build a run, resume it if asked, fit it. Every training step runs in the C++ engine.

The parts, in the order a run uses them: config.py (keys and checks), tasks/ (the kind of model),
training/run_setup.py (the process, then the set-up steps: setup_data.py, setup_model.py, engine_config.py;
the run directory), data/plan.py and data/epoch_data.py
(each data set's plan and its batches per epoch), training/fit_loop.py (the epochs), training/callbacks.py (checkpoints, early stopping, the user's),
training/run_dir.py (the files), evaluation/run_report.py (the report). See docs/architecture.md."""
from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
from torch import nn

from .checkpoint import EMA_STATE, load_checkpoint
from .config import load_config, run_name_of, with_real_values
from .errors import ConfigError
from .evaluation.run_report import report_after_training
from .models.registry import build_model
from .process_settings import apply_process_settings
from .signals import run_interrupted
from .run_files import CHECKPOINTS, METRICS, STATS
from .run_history import samples_per_second
from .training import distributed, launcher
from .training.fit_loop import fit_loop
from .training.fit_outcome import INTERRUPTED
from .training.run_dir import resume_path
from .training.run_setup import build_run, python_model_name


@dataclass
class TrainResult:
    """What a run produced (`gpucore.train` returns it).

    Attributes:
        history: one dict per epoch, the rows of metrics.jsonl.
        best_metric: the best value of the monitored metric, None before a validated epoch.
        best_epoch: the epoch of best_metric (from 1).
        monitor: the metric monitored, e.g. val_accuracy.
        status: completed, early_stopped, stopped (a callback set trainer.should_stop) or interrupted (the
            result a KeyboardInterrupt from train() holds).
        run_dir: the run directory (run_dir/name).
        checkpoint_dir: its checkpoints/ folder (best.pt, last.pt, ...).
        stats_path: its training_stats.json.
        metrics_path: its metrics.jsonl.
        device: the device trained on, e.g. cuda:0.
        precision: the precision trained in, e.g. bf16-mixed.
        samples_per_second: training samples per second over the epochs trained; None when no epoch ended.
        steps: optimizer steps taken.
        skipped_steps: optimizer steps skipped for inf/NaN gradients.
        host_syncs: every host read of device values during the run, each a point where the host waits for the
            device: the running metrics with the step counters (one per log interval and per epoch end), one per
            validation pass (two with an EMA), one per checkpoint's copy to the host (all of an epoch's files share
            one), the step counters read on resume and after an interrupt, and with on_oom: reduce_batch one per
            epoch more. host_syncs_by_source says which.
        host_syncs_by_source: host_syncs by what read: metrics, evaluation, checkpoint, counters, oom_snapshot,
            frozen_layers_check.
        model: the trained model.
        skipped_files: unreadable files (images, clips) left out (data_kwargs on_error: skip).
        model_ema: the weights' moving average after the last step (config key ema_decay), None without one.
        stopped_by: for an interrupted run, the signal that stopped it: SIGINT (Ctrl-C), SIGTERM or SIGUSR1.
    """

    history: List[dict]
    best_metric: Optional[float]
    best_epoch: Optional[int]
    monitor: str
    status: str  # completed, early_stopped, stopped (a callback set trainer.should_stop) or interrupted
    run_dir: str
    checkpoint_dir: str
    stats_path: str
    metrics_path: str
    device: str
    precision: str
    samples_per_second: Optional[float]
    steps: int
    skipped_steps: int
    host_syncs: int
    host_syncs_by_source: Dict[str, int]
    model: nn.Module = field(repr=False)
    skipped_files: List[str] = field(default_factory=list)  # unreadable files left out (on_error: skip)
    # The model's exponential moving average after the last step (config key ema_decay), None without one.
    model_ema: Optional[nn.Module] = field(default=None, repr=False)
    stopped_by: Optional[str] = None  # interrupted: SIGINT, SIGTERM or SIGUSR1

    @classmethod
    def from_stats(cls, stats: dict, model: nn.Module, model_ema: Optional[nn.Module]) -> "TrainResult":
        """The result of the run whose training_stats.json is `stats`, with its model and EMA."""
        run_dir, history, best = stats["run_dir"], stats["epochs"], stats["best"]
        return cls(
            history=history, best_metric=best["metric"], best_epoch=best["epoch"], monitor=best["monitor"] or "",
            status=stats["status"], run_dir=run_dir, checkpoint_dir=os.path.join(run_dir, CHECKPOINTS),
            stats_path=os.path.join(run_dir, STATS), metrics_path=os.path.join(run_dir, METRICS),
            device=stats["device"], precision=stats["precision"]["precision"],
            samples_per_second=samples_per_second(history), steps=stats["steps"],
            skipped_steps=stats["skipped_steps"], host_syncs=stats["host_syncs"],
            host_syncs_by_source=stats["host_syncs_by_source"], model=model,
            skipped_files=stats["skipped_files"], model_ema=model_ema, stopped_by=stats.get("stopped_by"))


def train(cfg: Any = None, *, model: Optional[nn.Module] = None, train_data: Any = None, val_data: Any = None,
          loss: Optional[Callable] = None, callbacks: Optional[Sequence[Any]] = None, **overrides) -> TrainResult:
    """Train a model as `cfg` says; keyword arguments override its keys.

    Args:
        cfg: a .yaml/.yml/.json path, a dict or a TrainConfig (None: the defaults); every key is in the
            configuration reference.
        model: an nn.Module (default: built from config key `model`).
        train_data: (inputs, targets) tensors, a gpucore.data set, a torch Dataset (its samples (image, target)
            pairs or dicts; images as PIL images or uint8 tensors, which gpucore transforms, scales and normalises, or
            float tensors, given to the model as they are; a Hugging Face datasets.Dataset too) or a DataLoader
            (default: config key `data`).
        val_data: the validation data in the same forms (default: the held-out split of config key `data`, else
            the seeded share `val_fraction` of the training data: unset, 0.1 of config key `data` and none of
            `train_data`; a DataLoader cannot be split, so val_fraction with one is a ConfigError). With val_data
            given, val_fraction does not apply. training_stats.json's `validation` records which.
        loss: a callable (output, target) -> scalar tensor (default: config key `loss`), called as the built-in
            losses are: with the model's output as float32 (a bf16-mixed forward's too), outside autocast; config.json
            records its name (loss_callable), and an error inside it is a TrainingError naming it.
        callbacks: gpucore.Callback objects (or any objects with some of its hook methods), called after the
            built-in ones and before ModelCheckpoint.
        **overrides: config keys, e.g. `epochs=3, lr=3e-4`.

    Returns:
        The run's TrainResult: history, best metric and epoch, status, paths of the run directory, the trained model.

    Raises:
        ConfigError: an unknown key (naming the closest one), a wrong type or range, data that does not fit the model.
        TrainingError: training failed (out of memory, too many non-finite steps); the last good checkpoint stays.
        KeyboardInterrupt: Ctrl-C (SIGINT), SIGTERM or SIGUSR1 stopped the run, once checkpoints/interrupted.pt
            was written, so that a script looping over runs stops as at any Ctrl-C (for SIGTERM and SIGUSR1
            gpucore.signals.Stopped, a KeyboardInterrupt naming the signal). Its `result` is the run's TrainResult
            (status interrupted); `resume: auto` goes on from there.
    """
    config = with_real_values(load_config(cfg, overrides))
    if isinstance(model, nn.Module) and config.name == run_name_of(config.model):
        # An unnamed run of a model given in Python is named after that model, not after config key model's.
        config = dataclasses.replace(config, name=python_model_name(model, config))
    world = distributed.environment()
    if config.devices > 1 and world.size == 1:
        if any(v is not None for v in (model, train_data, val_data, loss)) or callbacks:
            raise ConfigError("devices > 1 starts new processes, which cannot receive a model, data, loss or "
                              "callbacks from this one: name the model and data in the config, or run your "
                              "script under torchrun --nproc_per_node=N")
        return _train_in_processes(config)

    started = time.perf_counter()
    apply_process_settings()  # before the data is read: malloc's thresholds (process_settings.py)
    run = build_run(config, world, model, train_data, val_data, loss)
    loop = fit_loop(run, list(callbacks or []))
    loop.run_stats.setup_seconds = time.perf_counter() - started
    try:
        if run.run_dir.resume_from is not None:
            loop.resume(run.run_dir.resume_from)
        status = loop.fit()
        if config.report and world.is_main:
            report_after_training(run)
        stats = loop.run_stats.stats(status)  # before run.close(): the streamed sources know their skipped files
    finally:
        loop.teardown()
        run.close()  # also after an error: no reader thread outlives the run

    result = TrainResult.from_stats(stats, run.model.module, run.model.ema)
    run.release_engine()
    return _returned(result)


def _returned(result: TrainResult) -> TrainResult:
    """`result`, or the interrupt that holds it when a signal stopped the run: Ctrl-C in a script stops the script."""
    if result.status == INTERRUPTED:
        raise run_interrupted(result)
    return result


def _train_in_processes(config) -> TrainResult:
    """`devices: N`: N processes on this machine; the result is read back from rank 0's run directory."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    wants_gpus = config.device == "cuda" or (config.device == "auto" and not config.no_cuda)
    if wants_gpus and 0 < gpus < config.devices:
        raise ConfigError(f"devices: {config.devices} starts one process per GPU, but torch sees {gpus} CUDA "
                          f"device(s); set devices to at most {gpus}, or device: cpu for {config.devices} CPU "
                          "processes")
    summary = launcher.launch(config, config.devices, config.dist_timeout)
    with open(os.path.join(summary["run_dir"], STATS), encoding="utf-8") as handle:
        stats = json.load(handle)
    recorded = load_config(stats["config"])
    # model_kwargs as the run completed them from the data; those given keep their real values, which the run's files
    # hold masked where they are URIs with credentials.
    model_kwargs = dict(recorded.model_kwargs, **config.model_kwargs)
    module = build_model(config.model, model_kwargs, config.pretrained)
    # The newest of last.pt and interrupted.pt: a run a signal stopped in its first epoch has no last.pt.
    last = load_checkpoint(resume_path("auto", summary["run_dir"]))
    module.load_state_dict(last["model"])
    ema = None
    if EMA_STATE in last:
        ema = build_model(config.model, model_kwargs, config.pretrained).eval().requires_grad_(False)
        ema.load_state_dict(last[EMA_STATE])
    return _returned(TrainResult.from_stats(stats, module, ema))
