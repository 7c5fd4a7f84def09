"""The C++ engine's settings from a TrainConfig: optimizer, schedule, loss, loss scaling, parameter groups;
and what the engine will report, checked against config key `monitor` before anything trains."""
from __future__ import annotations

import math

import torch
from torch import nn

from . import _C
from .errors import ConfigError


def param_groups(model: nn.Module, config) -> list:
    decay, no_decay = [], []
    for param in model.parameters():
        if param.requires_grad:
            (no_decay if config.no_decay_norm_and_bias and param.ndim <= 1 else decay).append(param)
    return [(params, wd) for params, wd in ((decay, config.weight_decay), (no_decay, 0.0)) if params]


def scaled_lr(config) -> float:
    ratio = config.batch_size * config.accumulate_grad_batches / config.base_batch_size
    return {"none": config.lr, "linear": config.lr * ratio, "sqrt": config.lr * math.sqrt(ratio)}[config.lr_scaling]


def loss_config(config) -> "_C.LossConfig":
    loss = _C.LossConfig()
    loss.kind = config.loss
    loss.label_smoothing = config.label_smoothing
    loss.heads = config.heads
    return loss


def engine_config(config, device: str, policy, steps_per_epoch: int, channels_last: bool) -> _C.EngineConfig:
    engine = _C.EngineConfig()
    engine.device = torch.device(device)
    engine.autocast_dtype = policy.autocast_dtype
    engine.param_dtype = policy.param_dtype
    engine.accumulate_grad_batches = config.accumulate_grad_batches
    engine.clip_grad_norm = config.clip_grad_norm
    engine.clip_grad_value = config.clip_grad_value
    engine.channels_last = channels_last
    engine.log_every_n_steps = config.log_every_n_steps
    engine.max_nonfinite_steps = config.max_nonfinite_steps
    engine.top_k = config.top_k
    engine.loss = loss_config(config)
    optimizer = _C.OptimizerConfig()
    optimizer.kind = config.optimizer
    optimizer.momentum, optimizer.nesterov = config.momentum, config.nesterov
    optimizer.beta1, optimizer.beta2 = (float(b) for b in config.betas)
    optimizer.eps = config.eps
    engine.optimizer = optimizer
    schedule = _C.ScheduleConfig()
    schedule.kind = config.schedule
    schedule.base_lr = scaled_lr(config)
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


def check_metric_keys(config, has_val: bool) -> None:
    """What can be known before the first epoch trains: a monitor no epoch can report, heads the loss ignores."""
    if config.heads > 0 and config.loss != "multilabel_soft_margin":
        raise ConfigError(f"config key 'heads' ({config.heads}) is used by loss multilabel_soft_margin only; loss "
                          f"'{config.loss}' would ignore it: set heads: 0, or loss: multilabel_soft_margin")
    if config.monitor == "auto":
        return
    splits = ("train", "val") if has_val else ("train",)
    names = [f"{split}_{name}" for split in splits for name in _C.reported_metrics(loss_config(config), config.top_k)]
    if config.monitor not in names:
        raise ConfigError(f"config key 'monitor': '{config.monitor}' is never reported with loss '{config.loss}'"
                          f"{'' if has_val else ' and no validation data'}; reported: {', '.join(names)}")
