"""The model step of a run's set-up, the second of three (run_setup.py: data: setup_data.py -> model here -> engine:
engine_config.py): config key model_kwargs completed from the data part, the model built (seeded: the same initial
weights however the data was read) or the caller's checked, config key pretrained loaded, the data's fit to it checked
(data/fits.py), the loss's class weights resolved against its outputs, then the model placed on its device (the
placement part), wrapped for DDP and torch.compile, and its EMA made."""
from __future__ import annotations

import dataclasses
import sys
import warnings
from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import nn

from ..data.clip_sequences import ClipSequences
from ..data.class_balance import class_count, class_counts, resolve_class_weights
from ..data.fits import check_mask_classes, check_model_segments, check_outputs, probe_output
from ..device.placement import place_model
from ..device.select import DeviceChoice, PrecisionPolicy
from ..errors import ConfigError
from ..models.pretrained import NO_WEIGHTS, LoadReport, load_pretrained, resolve_weights_path
from ..models.registry import build_model, kwargs_from_data
from ..models.surgery import output_count
from ..tasks import Task
from ..tasks.base import SEQUENCE_LENGTHS_IN_TARGET, sequence_lengths_in_target
from . import distributed
from .ema import make_ema
from .rng import seed_everything
from .setup_data import RunData, rebuild_epoch_sets


@dataclass(frozen=True)
class Placement:
    """Where and how a run's model runs: its device (and why), precision policy and memory format."""

    device: torch.device
    device_reason: str
    policy: PrecisionPolicy
    channels_last: bool  # config key channels_last, resolved


@dataclass
class RunModel:
    """A run's model part."""

    module: nn.Module  # the model itself: its state is what checkpoints hold
    forward: Callable  # what the engine calls: the module, wrapped for DDP and torch.compile as asked
    ema: Optional[nn.Module]  # config key ema_decay: the model's moving average, which the engine updates
    pretrained: Optional[LoadReport]  # what config key pretrained loaded
    from_data: dict  # what model_kwargs took from the data ({num_classes, in_channels}; config holds them too)


def check_model_argument(model) -> None:
    """train()'s model argument, before the data is read (the data step comes first): None or an nn.Module.

    Raises:
        ConfigError: anything else; a name is pointed to config key model.
    """
    if model is not None and not isinstance(model, nn.Module):
        named = (f"; to name a model, set config key model: gpucore.train({{'model': {model!r}}}, ...) or "
                 f"--set model={model}" if isinstance(model, str) else "")
        raise ConfigError(f"train()'s model argument must be a torch.nn.Module, got {type(model).__name__}{named}")


def setup_model(config, task: Task, data: RunData, world: distributed.World, choice: DeviceChoice,
                policy: PrecisionPolicy, model: Optional[nn.Module] = None):
    """(config, task, model part, placement): the run's model for `data`, the caller's `model` or the one config key
    model names; the config returned holds model_kwargs as completed from the data, the task the loss's class weights.

    Raises:
        ConfigError: a model whose outputs do not fit the data's classes, masks
            or segments (data/fits.py); class weights that do not fit its classes.
    """
    given = model is not None
    from_data = {}
    if not given:
        config, from_data = _model_kwargs_from_data(config, data.class_count, data.input_shape)
    seed_everything(config.seed)  # the model's initial weights as when it was built before reading the data
    module = model if given else build_model(config.model, config.model_kwargs, config.pretrained)
    pretrained = _load_pretrained(module, config, world)
    whose = "the model given to train()" if given else f"model '{config.model}'"
    train_data, val_data = data.samples
    check_outputs(module, task, data.classes, data.class_count, whose, given)
    task = _task_for_data(task, module, train_data, val_data)
    if _fit_clips_to_ctc(module, train_data, val_data):
        rebuild_epoch_sets(data, config, world, choice.device)
    check_mask_classes(module, task, whose, train_data, val_data)
    task = _weighed_classes(config, task, data, module)
    if not data.given:
        check_model_segments(config.data, task, whose, module, lambda: probe_output(module, data.input_shape),
                             train_data, val_data)
    channels_last = place_model(module, config.channels_last, choice.device, policy)
    forward = _wrap_for_training(module, config, choice.device, world)
    ema = make_ema(module, config.ema_decay)
    placement = Placement(device=choice.device, device_reason=choice.reason, policy=policy,
                          channels_last=channels_last)
    return config, task, RunModel(module=module, forward=forward, ema=ema, pretrained=pretrained,
                                  from_data=from_data), placement


def _model_kwargs_from_data(config, count: Optional[int], input_shape):
    """(config, taken): config key model_kwargs completed from the data, as Ultralytics takes `nc` from its data set:
    num_classes (the data's class count, RunData.class_count) and in_channels (images: their channels), each where the
    model's factory takes it and model_kwargs does not give it (registry.kwargs_from_data). The config returned
    holds them, so that config.json and the checkpoints rebuild the same model; taken is what was added."""
    in_channels = input_shape[0] if input_shape is not None and len(input_shape) == 3 else None
    taken = kwargs_from_data(config.model, config.model_kwargs, count, in_channels)
    if not taken:
        return config, {}
    return dataclasses.replace(config, model_kwargs={**config.model_kwargs, **taken}), taken


def _task_for_data(task: Task, module: nn.Module, train_data, val_data) -> Task:
    """The task as the data asks (Task.for_data: CTC reads clip lengths where the targets carry them).

    Raises:
        ConfigError: training and validation data that disagree on whether their targets carry clip lengths.
    """
    if val_data is not None and sequence_lengths_in_target(val_data) != sequence_lengths_in_target(train_data):
        says = {True: "carry", False: "do not carry"}
        raise ConfigError(f"the training data's targets {says[sequence_lengths_in_target(train_data)]} each clip's frame "
                          f"count ({SEQUENCE_LENGTHS_IN_TARGET}) and the validation data's "
                          f"{says[sequence_lengths_in_target(val_data)]}: give both data sets the same targets")
    return task.for_data(train_data, module)


def _fit_clips_to_ctc(module: nn.Module, train_data, val_data) -> bool:
    """Clips checked against the model's own temporal_stride (ClipSequences.fit_ctc) before the first step: one too
    short for its glosses is refused, or left out by name with a warning (data_kwargs on_error skip), rather than
    counted as ctc_unfit in every epoch. Returns whether any clip was left out.

    Raises:
        ConfigError: a clip that cannot fit CTC (on_error raise), or no clip left in a split.
    """
    stride, dropped = getattr(module, "temporal_stride", 1), False
    for data in (train_data, val_data):
        if not isinstance(data, ClipSequences) or data.temporal_stride == stride:
            continue
        before = len(data.skipped)
        data.fit_ctc(stride)
        left_out = data.skipped[before:]
        if left_out:
            dropped = True
            warnings.warn(f"the {data.split} split: {len(left_out)} clips left out, too short for their glosses at the "
                          f"model's temporal_stride {stride}: " + "; ".join(left_out), stacklevel=2)
    return dropped


def _weighed_classes(config, task: Task, data: RunData, module: nn.Module) -> Task:
    """Config keys class_weights and sampler against the model: `task` with its loss's class weights, over the data's
    classes, else the model's outputs (a data set without class names), else the labels'; the balanced sampler's
    labels must each be one of those classes."""
    if data.labels is None:
        return task
    n_classes = class_count(data.labels, data.classes, output_count(module))
    task = task.with_class_weights(resolve_class_weights(config.class_weights, data.labels, n_classes, data.classes))
    if config.sampler == "balanced":
        class_counts(data.labels, n_classes, "sampler")
    return task


def _load_pretrained(module: nn.Module, config, world: distributed.World) -> Optional[LoadReport]:
    """Config key pretrained: the weights loaded into the model, reported on stderr (rank 0), with or without the
    progress bar (stdout is gpucore train's JSON summary)."""
    if config.pretrained in (None, NO_WEIGHTS):
        return None
    path = resolve_weights_path(config.pretrained, config.model, module)
    report = load_pretrained(module, path, config.pretrained_strict)
    if report.problems:
        warnings.warn(report.summary(), RuntimeWarning, stacklevel=4)  # at train(): setup_model, build_run, train
    elif world.is_main:
        print(f"gpucore: {report.summary()}", file=sys.stderr, flush=True)
    return report


def _wrap_for_training(module: nn.Module, config, device: torch.device, world: distributed.World):
    """What the engine calls: the placed module, wrapped for DDP and torch.compile as asked."""
    forward = module
    if world.launched:
        # A frozen backbone has no gradients to reduce: DDP must not wait for them.
        forward = torch.nn.parallel.DistributedDataParallel(
            module, device_ids=[device.index] if device.type == "cuda" else None,
            find_unused_parameters=config.freeze != "none")
    return _compiled(forward, device) if config.compile else forward


def _compiled(forward, device: torch.device):
    """torch.compile(forward); on the CPU with inductor's vector width named in its options. Inductor picks its
    vectors by ATEN_CPU_CAPABILITY, but its on-disk graph cache keys (torch 2.13) leave that choice out: a graph
    compiled under avx512 was loaded by an avx2 process and computed garbage max-pool indices, or corrupted the heap.
    The width in the options puts it into the key."""
    options = None
    if device.type == "cpu":
        from torch._inductor.cpu_vec_isa import pick_vec_isa
        from torch._inductor.exc import InvalidCxxCompiler

        try:
            options = {"cpp.simdlen": pick_vec_isa().bit_width()}  # inductor probes the CPU with its C++ compiler
        except InvalidCxxCompiler:
            pass  # no compiler: the first batch's compile fails, naming config key compile
    return torch.compile(forward, options=options)
