"""gpucore.train: configuration, model and data in Python; every training step in the C++ engine."""
from __future__ import annotations

import itertools
import json
import math
import os
import random
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Sequence

import torch
from torch import nn

from . import _C, distributed
from .checkpoint import (load_checkpoint, remove_stale_temporaries, save_checkpoint, write_json,
                         write_jsonl)
from .config import KEY_BY_NAME, load_config
from .data import Dataset as LoadedDataset
from .data import ImageFiles
from .datasets import load_data
from .loader import batch_source, choose_cache, data_stats, is_native, skipped_files
from .device import resolve_precision, select_device
from .models import build_model

ConfigError = _C.ConfigError
TrainingError = _C.TrainingError
OutOfMemoryError = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)

_COUNTERS = ("lr", "loss_scale", "skipped_steps")
_DEFAULT_TOP_K = KEY_BY_NAME["top_k"].default


@dataclass
class TrainResult:
    """What a run produced. `history` holds one dict per epoch (the rows of metrics.jsonl)."""

    history: List[dict]
    best_metric: Optional[float]
    best_epoch: Optional[int]
    monitor: str
    status: str  # completed, early_stopped or interrupted
    run_dir: str
    checkpoint_dir: str
    stats_path: str
    metrics_path: str
    device: str
    precision: str
    samples_per_second: float
    steps: int
    skipped_steps: int
    host_syncs: int
    model: nn.Module = field(repr=False)
    skipped_files: List[str] = field(default_factory=list)  # unreadable files left out (on_error: skip)


class _EpochData:
    """One data set, served epoch by epoch as a C++ BatchSource."""

    def __init__(self, data, config, device: str, training: bool, normalization, world=distributed.World()):
        self.batch_size = config.batch_size if training else config.eval_batch_size
        self.seed, self.device = config.seed, device
        self.fixed_batch_size = isinstance(data, torch.utils.data.DataLoader)  # the user's loader batches itself
        self._tensors = self._loader = self._generator = self._sampler = None
        self._data = data
        self.description = _describe(data)
        shuffle = training and config.shuffle
        drop_last = training and config.drop_last
        wants_augment = training and (config.crop_padding > 0 or config.hflip)
        if is_native(data):
            self._tensors = batch_source(data, choose_cache(data, config.cache, torch.device(device)),
                                         batch_size=self.batch_size, shuffle=shuffle, drop_last=drop_last,
                                         seed=config.seed, device=torch.device(device),
                                         crop_padding=config.crop_padding if training else 0,
                                         hflip=config.hflip and training, normalization=normalization,
                                         prefetch=config.prefetch)
            if training:
                self._tensors.set_shard(world.rank, world.size)
        elif wants_augment:
            raise ConfigError("crop_padding and hflip apply to image tensors and gpucore.data sets; transform a torch "
                              "Dataset or DataLoader yourself")
        elif isinstance(data, torch.utils.data.DataLoader):
            self._loader = data
        elif isinstance(data, torch.utils.data.Dataset):
            self._generator = torch.Generator()
            sampler = None
            if training and world.size > 1:  # equal shards per rank, reshuffled per epoch by set_epoch
                sampler = torch.utils.data.distributed.DistributedSampler(
                    data, num_replicas=world.size, rank=world.rank, shuffle=shuffle, seed=config.seed,
                    drop_last=drop_last)
            self._sampler = sampler
            self._loader = torch.utils.data.DataLoader(data, batch_size=self.batch_size,
                                                       shuffle=shuffle and sampler is None, sampler=sampler,
                                                       drop_last=drop_last, generator=self._generator,
                                                       pin_memory=device.startswith("cuda"))
        else:
            raise ConfigError(
                "training data must be (inputs, targets) tensors, a torch Dataset or a DataLoader, got "
                f"{type(data).__name__}"
            )

    def skipped_files(self) -> List[str]:
        """Image files left out so far, "path: why": at decode, or while streaming."""
        return skipped_files(self._data, self._tensors)

    def total_batches(self) -> int:
        return len(self._tensors) if self._tensors is not None else len(self._loader)

    def epoch(self, epoch: int, skip: int = 0):
        if self._tensors is not None:
            self._tensors.start_epoch(epoch, skip)
            return self._tensors
        if self._generator is not None:  # the same order per (seed, epoch) as TensorBatches promises
            self._generator.manual_seed(self.seed * 1000003 + epoch)
        if self._sampler is not None:
            self._sampler.set_epoch(epoch)
        return _C.PythonBatches(_Skipped(self._loader, skip), torch.device(self.device))


def _describe(data) -> str:
    """What one sample of `data` looks like, for errors."""
    if isinstance(data, ImageFiles):
        channels, height, width = data.image_shape()
        return f"{channels} x {height} x {width} uint8 images from '{data.origin}'"
    if is_native(data):
        return f"inputs of shape {tuple(data[0].shape[1:])} ({data[0].dtype}) and targets of shape " \
               f"{tuple(data[1].shape[1:])} per sample"
    return f"batches from a {type(data).__name__}"


class _Skipped:
    """A loader's batches from `skip` on, with a len()."""

    def __init__(self, loader, skip):
        self.loader, self.skip = loader, skip

    def __len__(self):
        return max(len(self.loader) - self.skip, 0)

    def __iter__(self):
        return itertools.islice(iter(self.loader), self.skip, None)


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def _rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    # A checkpoint loaded onto the training GPU carries its RNG states there; torch takes them on the CPU.
    torch.set_rng_state(state["torch"].cpu())
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def _param_groups(model: nn.Module, config) -> list:
    decay, no_decay = [], []
    for param in model.parameters():
        if param.requires_grad:
            (no_decay if config.no_decay_norm_and_bias and param.ndim <= 1 else decay).append(param)
    return [(params, wd) for params, wd in ((decay, config.weight_decay), (no_decay, 0.0)) if params]


def _scaled_lr(config) -> float:
    ratio = config.batch_size * config.accumulate_grad_batches / config.base_batch_size
    return {"none": config.lr, "linear": config.lr * ratio, "sqrt": config.lr * math.sqrt(ratio)}[config.lr_scaling]


def _engine_config(config, device: str, policy, steps_per_epoch: int) -> _C.EngineConfig:
    engine = _C.EngineConfig()
    engine.device = torch.device(device)
    engine.autocast_dtype = policy.autocast_dtype
    engine.param_dtype = policy.param_dtype
    engine.accumulate_grad_batches = config.accumulate_grad_batches
    engine.clip_grad_norm = config.clip_grad_norm
    engine.clip_grad_value = config.clip_grad_value
    engine.channels_last = config.channels_last
    engine.log_every_n_steps = config.log_every_n_steps
    engine.max_nonfinite_steps = config.max_nonfinite_steps
    engine.top_k = config.top_k
    engine.loss = _loss_config(config)
    optimizer = _C.OptimizerConfig()
    optimizer.kind = config.optimizer
    optimizer.momentum, optimizer.nesterov = config.momentum, config.nesterov
    optimizer.beta1, optimizer.beta2 = (float(b) for b in config.betas)
    optimizer.eps = config.eps
    engine.optimizer = optimizer
    schedule = _C.ScheduleConfig()
    schedule.kind = config.schedule
    schedule.base_lr = _scaled_lr(config)
    schedule.warmup_steps = int(round(config.warmup_epochs * steps_per_epoch))
    schedule.total_steps = max(config.epochs * steps_per_epoch, 1)
    schedule.step_size = config.step_size * steps_per_epoch
    schedule.gamma = config.gamma
    schedule.milestones = [m * steps_per_epoch for m in config.milestones]
    schedule.min_lr = config.min_lr
    schedule.pct_start, schedule.div_factor, schedule.final_div_factor = (
        config.pct_start, config.div_factor, config.final_div_factor)
    engine.schedule = schedule
    scaler = _C.GradScalerConfig()
    scaler.enabled = policy.loss_scaling
    scaler.init_scale = config.init_scale
    scaler.growth_interval = config.growth_interval
    engine.scaler = scaler
    return engine


def _snapshot(module: nn.Module, engine) -> dict:
    """The model and engine state on the host, to start an epoch over after an out-of-memory error."""
    return {"model": {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()},
            "engine": {k: v.to("cpu") for k, v in engine.state().items()}, "rng": _rng_state()}


def _restore(module: nn.Module, engine, snapshot: dict) -> None:
    for param in module.parameters():
        param.grad = None
    module.load_state_dict(snapshot["model"])
    engine.load_state(snapshot["engine"])
    _set_rng_state(snapshot["rng"])


def _oom_message(config, device: torch.device, exc: BaseException) -> str:
    figures = ""
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        figures = (f" {torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB peak allocated by tensors, "
                   f"{torch.cuda.memory_reserved(device) / 2**30:.2f} GiB reserved, {free / 2**30:.2f} of "
                   f"{total / 2**30:.2f} GiB free on {device}.")
    return (f"out of memory with batch_size {config.batch_size} (accumulate_grad_batches "
            f"{config.accumulate_grad_batches}, precision {config.precision}).{figures} Lower batch_size and raise "
            "accumulate_grad_batches to keep the effective batch, use precision bf16-mixed or 16-mixed, or set "
            f"on_oom: reduce_batch to do that automatically. The last checkpoint is intact. ({exc})".replace("\n", " "))


def _result_of_launch(config, summary: dict) -> "TrainResult":
    """The TrainResult of a `devices: N` run, from rank 0's run directory."""
    stats_path = os.path.join(summary["run_dir"], "training_stats.json")
    with open(stats_path, encoding="utf-8") as handle:
        stats = json.load(handle)
    checkpoint_dir = os.path.join(summary["run_dir"], "checkpoints")
    module = build_model(config.model, config.model_kwargs)
    module.load_state_dict(load_checkpoint(os.path.join(checkpoint_dir, "last.pt"))["model"])
    history = stats["epochs"]
    seconds = sum(r["epoch_time_s"] for r in history)
    return TrainResult(
        history=history, best_metric=stats["best"]["metric"], best_epoch=stats["best"]["epoch"],
        monitor=stats["best"]["monitor"] or "", status=stats["status"], run_dir=summary["run_dir"],
        checkpoint_dir=checkpoint_dir, stats_path=stats_path, metrics_path=os.path.join(summary["run_dir"], "metrics.jsonl"),
        device=stats["device"], precision=stats["precision"]["precision"],
        samples_per_second=sum(r["samples_per_s"] * r["epoch_time_s"] for r in history) / seconds if seconds else 0.0,
        steps=stats["steps"], skipped_steps=stats["skipped_steps"], host_syncs=stats["host_syncs"], model=module)


def _has_checkpoints(run_dir: str) -> bool:
    folder = os.path.join(run_dir, "checkpoints")
    return os.path.isdir(folder) and any(name.endswith(".pt") for name in os.listdir(folder))


def _free_run_dir(parent: str, name: str) -> str:
    """A run directory that holds no earlier run's checkpoints: name, name-2, name-3, ... A run killed
    before its first checkpoint left nothing to keep: its directory is used again, so resumes find it."""
    for index in itertools.count(1):
        candidate = os.path.join(parent, name if index == 1 else f"{name}-{index}")
        if not _has_checkpoints(candidate):
            return candidate
    raise AssertionError("unreachable")


def _resume_path(config, run_dir: str) -> Optional[str]:
    if config.resume is None:
        return None
    if config.resume != "auto":
        return config.resume
    candidates = [os.path.join(run_dir, "checkpoints", name) for name in ("interrupted.pt", "last.pt")]
    existing = [path for path in candidates if os.path.isfile(path)]
    return max(existing, key=os.path.getmtime) if existing else None


def _memory(device: torch.device) -> dict:
    if device.type != "cuda":
        return {"gpu_memory_peak_bytes": None, "gpu_memory_allocated_bytes": None}
    return {"gpu_memory_peak_bytes": torch.cuda.max_memory_allocated(device),
            "gpu_memory_allocated_bytes": torch.cuda.memory_allocated(device)}


def _loss_config(config) -> "_C.LossConfig":
    loss = _C.LossConfig()
    loss.kind = config.loss
    loss.label_smoothing = config.label_smoothing
    loss.heads = config.heads
    return loss


def _check_metric_keys(config, has_val: bool) -> None:
    """What can be known before the first epoch trains: a monitor no epoch can report, heads the loss ignores."""
    if config.heads > 0 and config.loss != "multilabel_soft_margin":
        raise ConfigError(f"config key 'heads' ({config.heads}) is used by loss multilabel_soft_margin only; loss "
                          f"'{config.loss}' would ignore it: set heads: 0, or loss: multilabel_soft_margin")
    if config.monitor == "auto":
        return
    splits = ("train", "val") if has_val else ("train",)
    names = [f"{split}_{name}" for split in splits for name in _C.reported_metrics(_loss_config(config), config.top_k)]
    if config.monitor not in names:
        raise ConfigError(f"config key 'monitor': '{config.monitor}' is never reported with loss '{config.loss}'"
                          f"{'' if has_val else ' and no validation data'}; reported: {', '.join(names)}")


def _auto_monitor(record: dict) -> str:
    for name in ("val_accuracy", "val_seq_accuracy", "val_iou", "val_loss", "train_loss"):
        if name in record:
            return name
    return "train_loss"


def _improved(value, best, mode: str, min_delta: float) -> bool:
    if value is None:
        return False
    if best is None:
        return True
    return value < best - min_delta if mode == "min" else value > best + min_delta


class _Progress:
    def __init__(self, enabled: bool, total_steps: int, epoch: int, epochs: int, log_every: int):
        self.bar = None
        self.log_every = log_every
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(total=total_steps, desc=f"epoch {epoch}/{epochs}", unit="step", leave=False,
                                file=sys.stderr)
        self.start = time.perf_counter()
        self.batch_samples = 0

    def update(self, metrics: dict, samples_per_step: int) -> None:
        if self.bar is not None:
            self.bar.update(self.log_every)
            elapsed = max(time.perf_counter() - self.start, 1e-9)
            self.batch_samples += self.log_every * samples_per_step
            self.bar.set_postfix(loss=f"{metrics['loss']:.4f}", samples_s=f"{self.batch_samples / elapsed:.0f}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _call(callbacks: Sequence[Any], method: str, *args) -> None:
    for callback in callbacks:
        hook = getattr(callback, method, None)
        if hook is not None:
            hook(*args)


def train(cfg: Any = None, *, model: Optional[nn.Module] = None, train_data: Any = None, val_data: Any = None,
          loss: Optional[Callable] = None, callbacks: Optional[Sequence[Any]] = None, **overrides) -> TrainResult:
    """Train a model as `cfg` says (a .yaml/.json path, a dict or a TrainConfig; keyword arguments override keys).

    model: an nn.Module (default: built from config key `model`); train_data/val_data: (inputs, targets)
    tensors, a torch Dataset or DataLoader (default: config key `data`); loss: a callable
    (output, target) -> scalar tensor (default: config key `loss`); callbacks: objects with optional
    on_epoch_end(epoch, record) and on_step_end(step, metrics) methods.
    """
    config = load_config(cfg, overrides)
    callbacks = list(callbacks or [])
    world = distributed.environment()
    if config.devices > 1 and world.size == 1:
        if any(v is not None for v in (model, train_data, val_data, loss)) or callbacks:
            raise ConfigError("devices > 1 starts new processes, which cannot receive a model, data, loss or "
                              "callbacks from this one: name the model and data in the config, or run your "
                              "script under torchrun --nproc_per_node=N")
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        wants_gpus = config.device == "cuda" or (config.device == "auto" and not config.no_cuda)
        if wants_gpus and 0 < gpus < config.devices:
            raise ConfigError(f"devices: {config.devices} starts one process per GPU, but torch sees {gpus} CUDA "
                              f"device(s); set devices to at most {gpus}, or device: cpu for {config.devices} CPU "
                              "processes")
        return _result_of_launch(config, distributed.launch(config, config.devices, config.dist_timeout))
    if config.cuda_graphs:
        raise NotImplementedError("config key 'cuda_graphs' is not implemented yet; set cuda_graphs: false")

    _seed_everything(config.seed)
    if config.deterministic:
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
    preference = config.device
    if world.launched and config.device in ("auto", "cuda") and not config.no_cuda and torch.cuda.is_available():
        preference = f"cuda:{world.local_rank}"  # each process binds its local GPU
    choice = select_device(preference, no_cuda=config.no_cuda, no_mps=config.no_mps or world.launched)
    device = str(choice.device)
    created_group = distributed.start(world, choice.device, config.dist_timeout)
    distributed.check_same(json.dumps(config.to_dict(), sort_keys=True), "the configuration")
    policy = resolve_precision(config.precision, choice.device, tf32=config.tf32, cudnn_benchmark=config.cudnn_benchmark)
    policy.apply()

    module = model if model is not None else build_model(config.model, config.model_kwargs)
    if not isinstance(module, nn.Module):
        raise ConfigError(f"model must be a torch.nn.Module, got {type(module).__name__}")
    module.to(device=choice.device, dtype=policy.param_dtype)
    if config.channels_last:
        module.to(memory_format=torch.channels_last)
    forward = module
    if world.launched:
        index = [choice.device.index] if choice.device.type == "cuda" else None
        forward = torch.nn.parallel.DistributedDataParallel(module, device_ids=index)
    forward = torch.compile(forward) if config.compile else forward

    # Data sets read by gpucore's readers are served like tensors; image files may also be streamed.
    train_data, val_data = ((d.inputs, d.targets) if isinstance(d, LoadedDataset) and not isinstance(d, ImageFiles)
                            else d for d in (train_data, val_data))
    if train_data is None:
        train_default, val_default = load_data(config.data, config.data_kwargs, config.val_fraction, config.seed)
        train_data = train_default
        val_data = val_default if val_data is None else val_data
    normalization = None
    if config.normalize and is_native(train_data):
        normalization = data_stats(train_data, choose_cache(train_data, config.cache, torch.device(device)))
    train_set = _EpochData(train_data, config, device, training=True, normalization=normalization, world=world)
    distributed.check_same(train_set.total_batches(), "the number of batches per epoch (data length)")
    val_set = (_EpochData(val_data, config, device, training=False, normalization=normalization)
               if val_data is not None else None)
    _check_metric_keys(config, val_set is not None)
    steps_per_epoch = math.ceil(train_set.total_batches() / config.accumulate_grad_batches)
    engine = _C.Engine(_param_groups(module, config), _engine_config(config, device, policy, steps_per_epoch))

    parent = os.path.abspath(config.run_dir)
    run_dir = os.path.join(parent, config.name)
    resume = _resume_path(config, run_dir)
    if resume is None:
        run_dir = distributed.broadcast(_free_run_dir(parent, config.name) if world.is_main else None)
    checkpoint_dir = os.path.join(run_dir, "checkpoints")
    if world.is_main:
        try:
            os.makedirs(checkpoint_dir, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"config key 'run_dir': cannot create '{checkpoint_dir}' ({exc.strerror}); pick a folder "
                              "you can write to") from exc
    stats_path = os.path.join(run_dir, "training_stats.json")
    metrics_path = os.path.join(run_dir, "metrics.jsonl")
    if world.is_main:
        for folder in (run_dir, checkpoint_dir):  # files a killed write of an earlier start left behind
            remove_stale_temporaries(folder)
        write_json(os.path.join(run_dir, "config.json"), config.to_dict())

    history: List[dict] = []
    best = {"metric": None, "epoch": None, "monitor": None if config.monitor == "auto" else config.monitor}
    start_epoch, skip = 0, 0
    if resume is not None:
        checkpoint = load_checkpoint(resume, map_location=choice.device)
        try:
            module.load_state_dict(checkpoint["model"])
        except RuntimeError as exc:
            raise ConfigError(f"checkpoint '{resume}' does not fit the model: {exc}") from exc
        engine.load_state(checkpoint["engine"])
        _set_rng_state(checkpoint["rng"])
        start_epoch, skip = int(checkpoint["epoch"]), int(checkpoint["position"])
        history, best = list(checkpoint["history"]), dict(checkpoint["best"])
        if world.is_main:  # rows written after this checkpoint (a kill before the next one) are dropped
            write_jsonl(metrics_path, history)

    writer = None
    if world.is_main:
        try:
            from torch.utils.tensorboard import SummaryWriter

            writer = SummaryWriter(os.path.join(run_dir, "tensorboard"))
        except ImportError:
            pass

    summary = {"device": device, "device_reason": choice.reason, "precision": policy.to_dict(),
               "torch": torch.__version__, "config": config.to_dict(), "run_dir": run_dir}

    def checkpoint_payload(epoch: int, position: int) -> dict:
        return {"model": module.state_dict(), "engine": engine.state(), "rng": _rng_state(), "epoch": epoch,
                "position": position, "history": history, "best": best, "config": config.to_dict(),
                "input_stats": {"mean": normalization[0], "std": normalization[1]} if normalization else None}

    def persist(name: str, payload: dict) -> None:
        """Rank 0 writes; every rank waits until the checkpoint is complete."""
        if world.is_main:
            save_checkpoint(os.path.join(checkpoint_dir, name), payload)
        distributed.barrier()

    def write_stats(status: str, error: Optional[str] = None) -> None:
        if not world.is_main:
            return
        write_json(stats_path, dict(summary, status=status, error=error, epochs=history, best=best,
                                    steps=engine.steps_taken(), skipped_steps=engine.steps_skipped(),
                                    host_syncs=engine.host_syncs(), skipped_files=all_skipped_files()))

    def all_skipped_files() -> List[str]:
        return sorted(set().union(*(s.skipped_files() for s in (train_set, val_set) if s is not None)))

    status = "completed"
    stalled = 0
    mode = config.mode
    samples_per_step = config.batch_size * config.accumulate_grad_batches
    write_stats("running")
    try:
        epoch = start_epoch
        while epoch < config.epochs:
            trained = False  # whether this epoch's optimizer steps are all done
            try:
                module.train()
                if choice.device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(choice.device)
                progress = _Progress(config.progress and world.is_main, steps_per_epoch - skip // config.accumulate_grad_batches,
                                     epoch + 1, config.epochs, config.log_every_n_steps)

                def on_log(metrics, epoch=epoch):
                    progress.update(metrics, samples_per_step)
                    _call(callbacks, "on_step_end", engine.steps_taken(), dict(metrics, epoch=epoch + 1))

                snapshot = _snapshot(module, engine) if config.on_oom == "reduce_batch" else None
                try:
                    train_stats = engine.train_epoch(train_set.epoch(epoch, skip), forward, loss, on_log)
                except OutOfMemoryError as exc:
                    progress.close()
                    if snapshot is None or train_set.batch_size < 2 or train_set.fixed_batch_size:
                        raise TrainingError(_oom_message(config, choice.device, exc)) from exc
                    # Same samples per optimizer step, half of them per micro-batch; the epoch starts over
                    # from the state it began with.
                    _restore(module, engine, snapshot)
                    if choice.device.type == "cuda":
                        torch.cuda.empty_cache()
                    config.batch_size //= 2
                    config.accumulate_grad_batches *= 2
                    engine.set_accumulate_grad_batches(config.accumulate_grad_batches)
                    train_set = _EpochData(train_data, config, device, training=True, normalization=normalization)
                    summary.setdefault("oom_reductions", []).append(
                        {"epoch": epoch + 1, "batch_size": config.batch_size,
                         "accumulate_grad_batches": config.accumulate_grad_batches})
                    warnings.warn(f"CUDA ran out of memory in epoch {epoch + 1}; retrying it with batch_size "
                                  f"{config.batch_size} and accumulate_grad_batches {config.accumulate_grad_batches} "
                                  "(same effective batch)", RuntimeWarning, stacklevel=2)
                    continue
                except RuntimeError as exc:
                    progress.close()
                    if isinstance(exc, TrainingError) or engine.steps_taken() > 0 or epoch != start_epoch:
                        raise
                    # Nothing has trained yet: most likely the model does not fit the data.
                    raise TrainingError(
                        f"the model failed on the first training batch ({train_set.description}): {exc}\nCheck that "
                        "the model fits the data: input channels, image size, number of classes (config keys "
                        "model, model_kwargs, data, data_kwargs)") from exc
                progress.close()
                trained = True
                skip = 0
                record = {"epoch": epoch + 1}
                train_metrics = {k: v for k, v in train_stats["metrics"].items() if k not in _COUNTERS}
                train_metrics = distributed.average_metrics(train_metrics, train_stats["samples"], choice.device)
                record.update({f"train_{k}": v for k, v in train_metrics.items()})
                top_k_name = f"train_top{config.top_k}_accuracy"
                # Only when top_k was changed: the default (5) quietly stays off for models of few classes.
                if (epoch == start_epoch and config.loss == "cross_entropy" and config.top_k not in (0, _DEFAULT_TOP_K)
                        and top_k_name not in record):
                    warnings.warn(f"config key 'top_k' is {config.top_k}, but the model has at most that many classes, so "
                                  f"top-{config.top_k} accuracy is always 1 and is not reported; set top_k below the "
                                  "number of classes, or 0", RuntimeWarning, stacklevel=2)
                if val_set is not None:
                    module.eval()
                    val_stats = engine.evaluate(val_set.epoch(epoch), forward, loss)
                    record.update({f"val_{k}": v for k, v in val_stats["metrics"].items()})
                record.update({
                    "lr": train_stats["metrics"].get("lr"), "loss_scale": train_stats["metrics"].get("loss_scale"),
                    "skipped_steps": int(train_stats["metrics"].get("skipped_steps", 0)),
                    "epoch_time_s": train_stats["seconds"],
                    # all ranks together (each trains an equal share)
                    "samples_per_s": train_stats["samples"] * world.size / max(train_stats["seconds"], 1e-9),
                })
                record.update(_memory(choice.device))
                history.append(record)
                if best["monitor"] is None:
                    best["monitor"] = _auto_monitor(record)
                if best["monitor"] not in record:
                    raise ConfigError(f"config key 'monitor': '{best['monitor']}' is not reported; reported: "
                                      f"{', '.join(sorted(k for k in record if k != 'epoch'))}")
                if mode == "auto":
                    mode = "min" if "loss" in best["monitor"] else "max"
                improved = _improved(record[best["monitor"]], best["metric"], mode, config.min_delta)
                if improved:
                    best.update(metric=record[best["monitor"]], epoch=epoch + 1)
                stalled = 0 if improved else stalled + 1

                if world.is_main:
                    write_jsonl(metrics_path, history)
                if writer is not None:
                    for key, value in record.items():
                        if isinstance(value, (int, float)) and key != "epoch":
                            writer.add_scalar(key, value, epoch + 1)
                payload = checkpoint_payload(epoch + 1, 0)
                persist("last.pt", payload)
                if improved:
                    persist("best.pt", payload)
                if config.save_every_n_epochs and (epoch + 1) % config.save_every_n_epochs == 0:
                    persist(f"epoch_{epoch + 1:04d}.pt", payload)
                    if world.is_main:
                        periodic = sorted(name for name in os.listdir(checkpoint_dir) if name.startswith("epoch_"))
                        for old in periodic[:-config.keep_last_k]:
                            os.remove(os.path.join(checkpoint_dir, old))
                interrupted = os.path.join(checkpoint_dir, "interrupted.pt")
                if world.is_main and os.path.exists(interrupted):
                    os.remove(interrupted)  # superseded by last.pt
                write_stats("running")
                if config.progress and world.is_main:
                    shown = {k: v for k, v in record.items() if k.endswith(("loss", "accuracy", "iou", "dice"))}
                    print(f"epoch {epoch + 1}/{config.epochs} " + " ".join(f"{k}={v:.4f}" for k, v in shown.items())
                          + f" ({record['samples_per_s']:.0f} samples/s)", file=sys.stderr)
                _call(callbacks, "on_epoch_end", epoch + 1, record)
            except KeyboardInterrupt:
                # Ctrl-C: keep what is done. Mid-epoch, the data position is the end of the last full
                # optimizer step; after the epoch's steps, the epoch counts as trained (its log row may
                # be missing).
                progress.close()
                if trained:
                    payload = checkpoint_payload(epoch + 1, 0)
                else:
                    payload = checkpoint_payload(epoch, skip + engine.windows_in_epoch() * config.accumulate_grad_batches)
                if world.is_main:
                    save_checkpoint(os.path.join(checkpoint_dir, "interrupted.pt"), payload)
                status = "interrupted"
                break
            epoch += 1
            if config.patience and stalled >= config.patience:
                status = "early_stopped"
                break
    except BaseException as exc:
        write_stats("failed", f"{type(exc).__name__}: {exc}")
        raise
    finally:
        if writer is not None:
            writer.close()
        if created_group:
            torch.distributed.destroy_process_group()
    write_stats(status)

    seconds = sum(r["epoch_time_s"] for r in history)
    samples = sum(r["samples_per_s"] * r["epoch_time_s"] for r in history)
    return TrainResult(
        history=history, best_metric=best["metric"], best_epoch=best["epoch"], monitor=best["monitor"] or "",
        status=status, run_dir=run_dir, checkpoint_dir=checkpoint_dir, stats_path=stats_path,
        metrics_path=metrics_path, device=device, precision=policy.precision,
        samples_per_second=samples / seconds if seconds > 0 else 0.0, steps=engine.steps_taken(),
        skipped_steps=engine.steps_skipped(), host_syncs=engine.host_syncs(), model=module,
        skipped_files=all_skipped_files(),
    )
