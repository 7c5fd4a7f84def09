"""The engine step of a run's set-up, the last of three (run_setup.py: data -> model -> engine; `setup_engine`): the
C++ engine over the placed model's parameters (and its EMA), with its settings from a TrainConfig in two parts: the
forward pass's (device, precision, memory format, loss, top_k: all an evaluation needs) and the optimizer's
(accumulation, clipping, optimizer, schedule, loss scaling, mixing, EMA, parameter groups); the CUDA-graphs plan; and
what the engine will report, checked against config key `monitor` before anything trains. The step's part of the run,
`RunEngine`, owns the engine."""
from __future__ import annotations

import math
import sys
import warnings
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import torch
from torch import nn

from .. import _C
from ..errors import ConfigError
from ..models.surgery import backbone_split
from ..tasks import Task
from ..device.placement import forward_config
from . import distributed
from .ema import VAL_EMA, ema_tensors, is_ema_metric
from .position import Batching
from .setup_data import RunData
from .setup_model import Placement, RunModel


@dataclass
class RunEngine:
    """A run's engine part: the C++ engine and what the engine step decided with it. It is the engine's one owner:
    the loop's parts reach the engine through it (never a reference of their own), so that `release()` frees it at
    once."""

    engine: Optional[_C.Engine]  # None once released
    batching: Batching  # config keys batch_size and accumulate_grad_batches, as the run starts
    steps_per_epoch: int  # optimizer steps of an epoch in that batching
    lr: float  # the schedule's base learning rate: config key lr as lr_scaling scaled it (scaled_lr)
    graphs_reason: Optional[str]  # config key cuda_graphs true or auto, but steps run eagerly: why
    auto_monitor: Sequence[str]  # what config key monitor: auto follows, in order (Task.primary_metrics)

    def release(self) -> None:
        """Frees the engine (optimizer state, gradients, the captured CUDA graph) now rather than at a later garbage
        collection, which a process forked meanwhile (a DataLoader worker) could run, touching CUDA in the child."""
        self.engine = None


def setup_engine(config, task: Task, world: distributed.World, data: RunData, model: RunModel,
                 placement: Placement) -> RunEngine:
    """The engine part: the C++ engine (_C.Engine) that trains `model` on `data` as `config` says, the optimizer steps
    of an epoch, why its steps run eagerly although config key cuda_graphs is true or auto (None: they do not), and
    what config key monitor: auto follows, in order (Task.primary_metrics).

    Raises:
        ConfigError: a monitor no epoch reports; settings the engine refuses (the C++ core's checks).
    """
    check_monitor(config, task, data.val_set is not None)
    if data.imbalance and world.is_main:
        print(f"gpucore: monitor: auto follows val_{task.balanced_metric}, not val_{task.primary_metric}, because "
              f"{data.imbalance}", file=sys.stderr, flush=True)
    batching = Batching.of(config)
    steps_per_epoch = batching.steps_in(data.train_set.total_batches())
    device = str(placement.device)
    graphs, graphs_reason = cuda_graphs_plan(config, device, data_parallel=world.launched)
    groups = param_groups(model.module, config)
    lr = scaled_lr(config, batching, world.size)
    settings = engine_config(config, task, device, placement.policy, steps_per_epoch, placement.channels_last, lr,
                             cuda_graphs=graphs)
    engine = _C.Engine(groups, settings, *ema_tensors(model.module, model.ema))
    eager_reason = graphs_reason or engine.graph_stats()["reason"]
    if eager_reason and config.cuda_graphs == "true":
        # at train()'s caller: setup_engine, build_run, train
        warnings.warn(f"cuda_graphs: true, but this run's steps run eagerly: {eager_reason}", stacklevel=4)
    return RunEngine(engine=engine, batching=batching, steps_per_epoch=steps_per_epoch, lr=lr,
                     graphs_reason=graphs_reason,
                     auto_monitor=task.primary_metrics(imbalanced=data.imbalance is not None))


def param_groups(model: nn.Module, config) -> list:
    """The fused optimizer's groups: each learning-rate level (lr_levels) split into parameters with weight decay
    and those without (biases and norm weights, with no_decay_norm_and_bias)."""
    groups = []
    for params, lr_scale in lr_levels(model, config):
        decay, no_decay = [], []
        for param in params:
            (no_decay if config.no_decay_norm_and_bias and param.ndim <= 1 else decay).append(param)
        groups += [_C.ParamGroup(group, weight_decay, lr_scale)
                   for group, weight_decay in ((decay, config.weight_decay), (no_decay, 0.0)) if group]
    return groups


def lr_levels(model: nn.Module, config) -> list:
    """(parameters, lr multiplier) from the input to the head; requires_grad=False parameters are left out.
    One level at lr unless config keys lr_backbone or lr_layer_decay slow the backbone down: then the head
    trains at lr and the backbone's block k places before the head at lr x lr_backbone x lr_layer_decay^(k-1)."""
    if config.lr_backbone == 1.0 and config.lr_layer_decay == 1.0:
        return [([param for param in model.parameters() if param.requires_grad], 1.0)]
    split = backbone_split(model, "lr_backbone" if config.lr_layer_decay == 1.0 else "lr_layer_decay")
    if config.lr_layer_decay == 1.0:
        levels = [(split.backbone_params, config.lr_backbone)]
    else:
        depth = len(split.blocks)
        levels = [(params, config.lr_backbone * config.lr_layer_decay ** (depth - 1 - index))
                  for index, (_, params) in enumerate(split.blocks)]
    return levels + [(split.head_params, 1.0)]


def scaled_lr(config, batching: Batching, world_size: int) -> float:
    """Config key lr, scaled by lr_scaling to the effective batch of `batching` over `world_size` processes: a run
    resumed at another world size trains on at the lr of its new effective batch."""
    ratio = batching.samples_per_step(world_size) / config.base_batch_size
    return {"none": config.lr, "linear": config.lr * ratio, "sqrt": config.lr * math.sqrt(ratio)}[config.lr_scaling]


def cuda_graphs_plan(config, device: str, data_parallel: bool = False) -> Tuple[bool, Optional[str]]:
    """Config key cuda_graphs resolved: whether the engine captures its steps as CUDA graphs, and when it will not
    although asked (true or auto), why. `data_parallel`: the model runs under DistributedDataParallel (a launched
    run: torchrun, srun or devices: N, one process included). What the engine can find only by trying (a model that
    syncs with the host) and what it cannot capture at the batching it trains (accumulate_grad_batches > 1, also after an
    out-of-memory retry doubled it) it reports itself: Engine.graph_stats()."""
    if config.cuda_graphs == "false":
        return False, None
    reason = _why_steps_stay_eager(config, torch.device(device), data_parallel)
    return reason is None, reason


def _why_steps_stay_eager(config, device: torch.device, data_parallel: bool) -> Optional[str]:
    if device.type != "cuda":
        return f"CUDA graphs capture CUDA steps; this run trains on {device}"
    if config.compile:
        return "compile: true (torch.compile makes graphs of its own: its mode reduce-overhead)"
    if data_parallel:
        # Under torchrun with one process too: an H200 (2026-11-26) failed such a capture in dropout ("Offset
        # increment outside graph capture encountered unexpectedly").
        return "data-parallel training (DDP's forward and gradient all-reduce inside a captured step are not verified)"
    if config.loss == "ctc":
        return "loss ctc (torch's CTC loss reads the target lengths on the host)"
    return None


def engine_config(config, task: Task, device: str, policy, steps_per_epoch: int, channels_last: bool, lr: float,
                  cuda_graphs: bool = False) -> _C.EngineConfig:
    """The forward pass's settings and the optimizer's: what training (_C.Engine) reads; `lr` the schedule's base
    learning rate (scaled_lr), cuda_graphs as cuda_graphs_plan resolved it."""
    engine = forward_config(task, device, policy, channels_last, config.top_k)
    engine.cuda_graphs = cuda_graphs
    engine.accumulate_grad_batches = config.accumulate_grad_batches
    engine.clip_grad_norm = config.clip_grad_norm
    engine.clip_grad_value = config.clip_grad_value
    engine.log_every_n_steps = config.log_every_n_steps
    engine.max_nonfinite_steps = config.max_nonfinite_steps
    optimizer = _C.OptimizerConfig()
    optimizer.kind = config.optimizer
    optimizer.momentum, optimizer.nesterov = config.momentum, config.nesterov
    optimizer.beta1, optimizer.beta2 = (float(b) for b in config.betas)
    optimizer.eps = config.eps
    engine.optimizer = optimizer
    schedule = _C.ScheduleConfig()
    schedule.kind = config.schedule
    schedule.base_lr = lr
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
    engine.mixup = mixup_config(config)
    ema = _C.EmaConfig()
    ema.decay, ema.warmup = config.ema_decay, config.ema_warmup
    ema.warmup_gamma, ema.warmup_power = config.ema_warmup_gamma, config.ema_warmup_power
    engine.ema = ema
    return engine


def mixup_config(config) -> "_C.MixupConfig":
    """Config keys mixup_alpha, cutmix_alpha, cutmix_minmax, mixup_prob, mixup_switch_prob, mixup_mode and
    cutmix_correct_lam as the engine's; mixing needs one class per input (the engine mixes one-hot targets)."""
    mixup = _C.MixupConfig()
    mixup.mixup_alpha, mixup.cutmix_alpha = config.mixup_alpha, config.cutmix_alpha
    mixup.cutmix_minmax = [float(v) for v in config.cutmix_minmax or []]
    mixup.prob, mixup.switch_prob = config.mixup_prob, config.mixup_switch_prob
    mixup.mode = config.mixup_mode
    mixup.correct_lam = config.cutmix_correct_lam
    mixup.seed = config.seed
    return mixup  # the Engine checks that the loss is single-label classification


def check_monitor(config, task: Task, has_val: bool) -> None:
    """Config key monitor names a metric some epoch will report; known before the first epoch trains."""
    if config.monitor == "auto":
        return
    splits = ("train", "val", *((VAL_EMA,) if config.ema_decay else ())) if has_val else ("train",)
    names = list(task.metric_modes(config.top_k, splits))
    if config.monitor not in names:
        raise ConfigError(f"config key 'monitor': '{config.monitor}' is never reported with loss '{config.loss}'"
                          f"{'' if has_val else ' and no validation data'}"
                          f"{' and ema_decay 0 (the EMA is off)' if is_ema_metric(config.monitor) and not config.ema_decay else ''}"
                          f"; reported: {', '.join(names)}")
