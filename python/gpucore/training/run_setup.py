"""Everything a training run is built from, in order: seeding, device and precision, the process group,
the model on its device, the data sets, the C++ engine and the run directory."""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence

import torch
from torch import nn

from .. import _C
from .. import transforms as transforms_list

from ..config import run_name_of
from ..data.builtin import (BUILTIN as BUILTIN_DATA, DATA_VAL_FRACTION, PYTHON_DATA, check_fits_task,
                            check_model_segments, class_names, read_data)
from ..data.class_balance import (balanced_sampling_weights, class_count, class_labels, imbalance, known_class_labels,
                                  resolve_class_weights)
from ..data.epoch_data import EpochData, training_set, validation_set
from ..data.image_files import MASK_VOID, ImageFiles, read_masks_alike
from ..data.labeled_data import LabeledData
from ..data.split import split
from ..device.placement import place_model
from ..data.tensor_inputs import as_images
from ..data.torch_samples import DatasetSamples, dataset_samples
from ..device.select import PrecisionPolicy, resolve_precision, select_device
from ..errors import ConfigError
from ..models.pretrained import NO_WEIGHTS, LoadReport, load_pretrained, resolve_weights_path
from ..models.registry import build_model, kwargs_from_data, python_model_spec
from ..models.surgery import classifier_head, output_count
from ..tasks import TORCH_IGNORE_INDEX, Classification, MultiLabel, Task, task_of
from . import distributed
from .ema import ema_tensors, make_ema
from .engine_config import check_monitor, cuda_graphs_plan, engine_config, param_groups
from .position import Batching
from .rng import seed_everything
from .run_dir import RunDir
from .user_loss import UserLoss, callable_name


@dataclass
class Run:
    config: Any
    task: Task  # what kind of model it trains (config keys loss and heads), decided once here
    auto_monitor: Sequence[str]  # what config key monitor: auto follows, in order (Task.primary_metrics)
    world: distributed.World
    device: torch.device
    device_reason: str
    policy: PrecisionPolicy
    module: nn.Module  # the model itself: its state is what checkpoints hold
    forward: Callable  # what the engine calls: the module, wrapped for DDP and torch.compile as asked
    loss: Optional[UserLoss]  # train()'s loss argument, which replaces the task's built-in loss
    validation: Optional[dict]  # where the validation data came from, for training_stats.json (None: no validation)
    classes: Optional[List[str]]  # class names, when the data has them
    input_shape: Optional[List[int]]  # one input as the model takes it (C, H, W for images; H, W 0 when they vary)
    pretrained: Optional[LoadReport]  # what config key pretrained loaded
    from_data: dict  # what model_kwargs took from the data ({num_classes, in_channels}; config holds them too)
    train_set: EpochData
    val_set: Optional[EpochData]
    steps_per_epoch: int
    channels_last: bool  # config key channels_last, resolved
    engine: Any
    graphs_reason: Optional[str]  # config key cuda_graphs true or auto, but steps run eagerly: why
    ema: Optional[nn.Module]  # config key ema_decay: the model's moving average, which the engine updates
    run_dir: RunDir
    group_store: Optional[Any]  # the store of the process group this run created (None: it created none)

    def summary(self) -> dict:
        """The facts of the run for training_stats.json."""
        return {"device": str(self.device), "device_reason": self.device_reason, "precision": self.policy.to_dict(),
                "channels_last": self.channels_last, "torch": torch.__version__, "config": self.run_dir.config,
                "classes": self.classes, "data": self.data_identity, "run_dir": self.run_dir.path,
                "launcher": self.world.launcher or None, "world_size": self.world.size,
                "restart": self.world.restart,  # TORCHELASTIC_RESTART_COUNT
                "validation": self.validation,
                "loss": self.loss.name if self.loss is not None else self.config.loss,
                "class_weights": self._class_weights(),
                "sampler": self.config.sampler,
                "model_kwargs_from_data": self.from_data,
                "pretrained": self.pretrained.to_dict() if self.pretrained else None}

    def _class_weights(self) -> Optional[dict]:
        """The loss's weight per class by name (config key class_weights resolved), or None: every class weighs 1."""
        weights = self.task.class_weights
        if weights is None:
            return None
        names = self.classes if self.classes and len(self.classes) == len(weights) else range(len(weights))
        return {str(name): weight for name, weight in zip(names, weights)}

    @property
    def normalization(self) -> Optional[tuple]:
        """Per-channel (mean, std) of the training inputs the batches are standardised with, or None."""
        return self.train_set.plan.normalization

    @property
    def data_identity(self) -> dict:
        """What the training and validation data are (data/identity.py): checkpoints record it, a resume checks it."""
        return {"train": self.train_set.plan.identity, "val": self.val_set.plan.identity if self.val_set else None}

    def release_engine(self) -> None:
        """Frees the engine (optimizer state, gradients, the captured CUDA graph) now rather than at a later garbage
        collection, which a process forked meanwhile (a DataLoader worker) could run, touching CUDA in the child."""
        self.engine = None

    def close(self) -> None:
        """The end of the run, however it ended: the data sets' reader threads joined, the run directory released,
        the process group gone."""
        for data_set in (self.train_set, self.val_set):
            if data_set is not None:
                data_set.close()
        self.run_dir.release()
        if self.group_store is not None:
            torch.distributed.destroy_process_group()


def build_run(config, world: distributed.World, model=None, train_data=None, val_data=None, loss=None) -> Run:
    task = task_of(config)
    loss = _user_loss(config, task, loss)
    seed_everything(config.seed)
    if config.deterministic:
        # cuBLAS is deterministic only with a fixed workspace, which torch otherwise refuses to run without.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
    preference = config.device
    if world.launched and config.device in ("auto", "cuda") and not config.no_cuda and torch.cuda.is_available():
        preference = f"cuda:{world.local_rank}"  # each process binds its local GPU
    choice = select_device(preference, no_cuda=config.no_cuda, no_mps=config.no_mps or world.launched)
    device = str(choice.device)
    group_store = distributed.start(world, choice.device, config.dist_timeout)
    distributed.check_same(json.dumps(config.to_dict(), sort_keys=True), "the configuration")
    policy = resolve_precision(config.precision, choice.device, tf32=config.tf32, cudnn_benchmark=config.cudnn_benchmark)
    policy.apply()

    given = train_data
    train_data, val_data, validation = _training_data(config, task, train_data, val_data)
    config = _resolved_ignore_index(config, train_data)
    task = task_of(config)
    if given is None:
        check_fits_task(config.data, task, train_data, val_data)
    read_masks_alike(train_data, val_data)
    classes = _classes(config, given, train_data)
    count = _class_count(task, classes, train_data, val_data)
    _check_class_count(config, task, classes, count, given is not None)
    input_shape = _input_shape(train_data, config)
    from_data = {}
    if model is None:
        config, from_data = _model_kwargs_from_data(config, count, input_shape)
    seed_everything(config.seed)  # the model's initial weights as when it was built before reading the data
    module = model if model is not None else build_model(config.model, config.model_kwargs, config.pretrained)
    if not isinstance(module, nn.Module):
        named = (f"; to name a model, set config key model: gpucore.train({{'model': {module!r}}}, ...) or "
                 f"--set model={module}" if isinstance(module, str) else "")
        raise ConfigError(f"train()'s model argument must be a torch.nn.Module, got {type(module).__name__}{named}")
    pretrained = _load_pretrained(module, config, world)
    _check_outputs(module, config, task, classes, count, model is not None)
    _check_mask_classes(module, config, task, model is not None, train_data, val_data)
    task, sampling_weights = _class_balance(config, task, train_data, classes, module)
    if given is None:
        check_model_segments(config.data, task, lambda: _classifier_evidence(module, input_shape),
                             "the model given to train()" if model is not None else f"model '{config.model}'",
                             train_data, val_data)
    channels_last = place_model(module, config, choice.device, policy)
    forward = _wrap_for_training(module, config, choice.device, world)
    ema = make_ema(module, config)
    train_set = training_set(train_data, config, choice.device, rank=world.rank, world_size=world.size, identify=True,
                             sampling_weights=sampling_weights)
    distributed.check_same(train_set.total_batches(), "the number of batches per epoch (data length)")
    val_set = validation_set(val_data, config, choice.device, train_set.plan.normalization, identify=True)
    check_monitor(config, task, val_set is not None)
    balanced_because = _balanced_monitor_reason(config, task, train_data, classes, val_set is not None)
    if balanced_because and world.is_main:
        print(f"gpucore: monitor: auto follows val_{task.balanced_metric}, not val_{task.primary_metric}, because "
              f"{balanced_because}", file=sys.stderr, flush=True)
    steps_per_epoch = Batching.of(config).steps_in(train_set.total_batches())
    graphs, graphs_reason = cuda_graphs_plan(config, device, data_parallel=world.launched)
    engine = _C.Engine(param_groups(module, config),
                       engine_config(config, task, device, policy, steps_per_epoch, channels_last, world.size,
                                     cuda_graphs=graphs),
                       *ema_tensors(module, ema))
    eager_reason = graphs_reason or engine.graph_stats()["reason"]
    if eager_reason and config.cuda_graphs == "true":
        warnings.warn(f"cuda_graphs: true, but this run's steps run eagerly: {eager_reason}", stacklevel=3)
    config = recorded_config(config, model, given, loss)
    run_dir = RunDir(config, world)
    run_dir.create()
    return Run(config=config, task=task, auto_monitor=task.primary_metrics(imbalanced=balanced_because is not None),
               world=world, device=choice.device, device_reason=choice.reason, policy=policy,
               module=module, forward=forward, loss=loss, validation=validation,
               classes=classes, input_shape=input_shape, from_data=from_data, pretrained=pretrained,
               train_set=train_set, val_set=val_set, steps_per_epoch=steps_per_epoch, channels_last=channels_last,
               engine=engine, graphs_reason=graphs_reason, ema=ema, run_dir=run_dir, group_store=group_store)


def _resolved_ignore_index(config, train_data):
    """Config key ignore_index, unset: MASK_VOID (255) for a segmentation folder's masks, whose void pixels read as it
    (image_files.mask_table), else torch's -100. The resolved value is what config.json and the checkpoints record, so
    evaluate and the report ignore what training ignored."""
    if config.ignore_index is not None:
        return config
    masks = isinstance(train_data, ImageFiles) and train_data.mask_paths is not None
    return dataclasses.replace(config, ignore_index=MASK_VOID if masks else TORCH_IGNORE_INDEX)


def _check_mask_classes(module: nn.Module, config, task: Task, given: bool, *data_sets) -> None:
    """Every mask value of the segmentation pairs among `data_sets` is a class the model scores, or ignore_index
    (cross_entropy; losses of one output per pixel take 0 and 1): ConfigError naming the file and value before the
    first step, where torch would fail (a CUDA device assert) or a metric count it. The model's outputs are its
    classifier head's (surgery.output_count), else the channels of its output for an input of zeros of the first
    image's shape; a model that shows neither is left to the loss."""
    mask_sets = [data for data in data_sets if isinstance(data, ImageFiles) and data.mask_paths is not None]
    if not mask_sets:
        return
    whose = "the model given to train()" if given else f"model '{config.model}'"
    if task.loss == "cross_entropy":
        outputs = output_count(module)
        if outputs is None:
            probed = _probe_output(module, mask_sets[0].image_shape())
            if probed is None or probed.dim() != 4:
                return
            outputs = probed.shape[1]
        classes, ignore_index, whose = outputs, task.ignore_index, f"{whose} ({outputs} outputs)"
    else:
        classes, ignore_index, whose = 2, None, f"{whose} (loss {task.loss})"
    for data in mask_sets:
        data.check_mask_classes(classes, ignore_index, whose)


def _user_loss(config, task: Task, loss: Optional[Callable]) -> Optional[UserLoss]:
    """train()'s loss argument as the engine calls it. Config key class_weights weighs the built-in loss, which a
    loss callable replaces; a config that records a loss callable (loss_callable) trains only with one."""
    if config.class_weights != "none":
        task.check_weighs_classes()
    if loss is None:
        if config.loss_callable is not None:
            raise ConfigError(f"config key 'loss_callable' says the run trained with the loss callable "
                              f"{config.loss_callable}, which a config cannot call: pass it to gpucore.train(..., "
                              f"loss=...), or remove the key to train with the built-in loss '{config.loss}'")
        return None
    if not callable(loss):
        raise ConfigError(f"train()'s loss argument must be a callable (output, target) -> scalar tensor, got "
                          f"{type(loss).__name__}")
    if config.class_weights != "none":
        raise ConfigError(f"config key 'class_weights' weighs the built-in loss '{config.loss}', which train()'s loss "
                          f"argument ({callable_name(loss)}) replaces: give your loss the weights (e.g. "
                          "functools.partial(F.cross_entropy, weight=w)), or set class_weights: none")
    return UserLoss(loss)


def _class_balance(config, task: Task, train_data, classes: Optional[List[str]], module: nn.Module):
    """Config keys class_weights and sampler for the training data: the task with its loss's class weights, and the
    balanced sampler's weight per sample (None without one)."""
    if config.class_weights == "none" and config.sampler == "none":
        return task, None
    key = "sampler" if config.class_weights == "none" else "class_weights"
    labels = class_labels(train_data, key)
    n_classes = class_count(labels, classes, output_count(module))
    task = task.with_class_weights(resolve_class_weights(config.class_weights, labels, n_classes, classes))
    return task, balanced_sampling_weights(labels, n_classes) if config.sampler == "balanced" else None


def _balanced_monitor_reason(config, task: Task, train_data, classes: Optional[List[str]],
                             has_val: bool) -> Optional[str]:
    """Why monitor: auto follows the task's balanced metric (balanced accuracy) rather than its primary one (accuracy,
    which predicting the largest class alone scores high on imbalanced data): config key class_weights or sampler
    set, or training classes imbalanced beyond IMBALANCE_RATIO (counted when known without reading the data); None
    when it does not (another monitor, no validation, a task without such a metric, balanced classes)."""
    if config.monitor != "auto" or not has_val or task.balanced_metric is None:
        return None
    if config.class_weights != "none":
        return "config key class_weights is set"
    if config.sampler == "balanced":
        return "config key sampler is balanced"
    labels = known_class_labels(train_data)
    return None if labels is None else imbalance(labels, classes)


def python_model_name(model: nn.Module, config) -> str:
    """The run name of an unnamed run of `model`, given in Python: its built-in name, else its class's name
    (python_model_spec), e.g. 'fashion_mnist_cnn' or 'ResNet'."""
    name, _ = python_model_spec(model, config.model, config.model_kwargs)
    return run_name_of(name.split(":")[-1].split(".")[-1])


def recorded_config(config, model: Optional[nn.Module], train_data, loss: Optional[UserLoss] = None) -> Any:
    """The config that config.json and the checkpoints hold: what the run used. A model given in Python is recorded
    by the name that rebuilds it (the config's own built-in name, or 'package.module:ClassName': python_model_spec),
    else as 'python:MODULE.QUALNAME' with model_kwargs {}; data given in Python as PYTHON_DATA; a loss callable by
    its name (loss_callable). Never the defaults it did not use. A folder or file of config key `data` is recorded
    as its absolute path."""
    changes = {} if loss is None else {"loss_callable": loss.name}
    if model is not None:
        name, kwargs = python_model_spec(model, config.model, config.model_kwargs)
        changes.update(model=name, model_kwargs=kwargs)
    if train_data is not None:
        changes["data"] = PYTHON_DATA
    elif config.data not in BUILTIN_DATA and os.path.exists(os.path.expanduser(config.data)):
        changes["data"] = os.path.abspath(os.path.expanduser(config.data))  # evaluate and report run from anywhere
    return dataclasses.replace(config, **changes) if changes else config


def _load_pretrained(module: nn.Module, config, world: distributed.World) -> Optional[LoadReport]:
    """Config key pretrained: the weights loaded into the model, reported on stderr (rank 0), with or without the
    progress bar (stdout is gpucore train's JSON summary)."""
    if config.pretrained in (None, NO_WEIGHTS):
        return None
    path = resolve_weights_path(config.pretrained, config.model, module)
    report = load_pretrained(module, path, config.pretrained_strict)
    if report.problems:
        warnings.warn(report.summary(), RuntimeWarning, stacklevel=3)
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
    return torch.compile(forward) if config.compile else forward


def _training_data(config, task: Task, train_data, val_data):
    """(train, val, validation): the caller's data, else what config key `data` names, and where the validation data
    came from (training_stats.json's "validation"; None: the run does not validate). Data sets read by gpucore's
    readers are served like tensors; image files may also be streamed. Without validation data (val_data, or the
    held-out split of config key `data`), config key val_fraction holds out a seeded share of the training data
    (unset: DATA_VAL_FRACTION of config key `data`, none of the caller's data); never when val_data is given. A label
    file holds several labels per row for a multi-label task."""
    train_data, val_data = ((d.inputs, d.targets) if isinstance(d, LabeledData) and not isinstance(d, ImageFiles)
                            else dataset_samples(d, config.data_kwargs) for d in (train_data, val_data))
    given = train_data is not None
    if not given:
        train_data, own_split = read_data(config.data, config.data_kwargs,
                                          multi_label=True if isinstance(task, MultiLabel) else None)
        if val_data is None and own_split is not None:
            return train_data, own_split, {"source": "held_out_split", "of": f"data: {config.data}"}
    if val_data is not None:
        return train_data, val_data, {"source": "val_data"}
    if given:
        fraction, whose = config.val_fraction or 0.0, "train_data"
    else:
        fraction = DATA_VAL_FRACTION if config.val_fraction is None else config.val_fraction
        whose = f"data: {config.data}"
    train_data, val_data, held_out = split(train_data, fraction, config.seed)
    if held_out is None:
        return train_data, None, None
    return train_data, val_data, dict(source="val_fraction", of=whose, **held_out.to_dict())


def _classes(config, given, train_data) -> Optional[List[str]]:
    """Class names: those of the caller's gpucore data set or torch Dataset (its `classes`: torch_samples.py), else of
    config key `data` (image folders, built-in sets)."""
    data = train_data if isinstance(train_data, DatasetSamples) else given if given is not None else train_data
    if isinstance(data, (LabeledData, DatasetSamples)):
        return list(data.classes) if data.classes else None
    return class_names(config.data, config.data_kwargs) if given is None else None


def _input_shape(train_data, config) -> Optional[List[int]]:
    """One input's shape as training reads it: images' [C, H, W], H and W 0 for images read at their own sizes (a
    folder without a size; a torch Dataset's images with a transforms list that brings each to one size)."""
    if isinstance(train_data, ImageFiles):
        return [train_data.channels, *train_data.size]
    if isinstance(train_data, DatasetSamples):
        if not train_data.images:
            return None
        channels, height, width = train_data.image_shape()
        own_sizes = transforms_list.plan(config.transforms, config.crop_padding, config.hflip,
                                         (height, width)).training_per_image  # as the data's plan decides it
        return [channels, 0, 0] if own_sizes else [channels, height, width]
    if isinstance(train_data, tuple) and isinstance(train_data[0], torch.Tensor):
        return list(as_images(train_data[0]).shape[1:])
    return None


def _class_count(task: Task, classes: Optional[List[str]], train_data, val_data) -> Optional[int]:
    """How many outputs the data's classes take: for classification its class names, else its integer labels' largest
    + 1 (training and validation data: a class only the validation data has still needs its output); for multi-label
    its targets' width. None where the data does not say (masks, a torch Dataset without class names, other tasks)."""
    if isinstance(task, Classification):
        if classes:
            return len(classes)
        labels = [t for t in map(_label_targets, (train_data, val_data))
                  if t is not None and t.dim() == 1 and not t.is_floating_point() and t.numel()]
        return max(int(t.max()) for t in labels) + 1 if labels else None
    if isinstance(task, MultiLabel):
        targets = _label_targets(train_data)
        return int(targets.shape[1]) if targets is not None and targets.dim() == 2 else None
    return None


def _label_targets(data) -> Optional[torch.Tensor]:
    """The targets of image files (not masks) or (inputs, targets) tensors, read without decoding an image."""
    if isinstance(data, ImageFiles):
        return data.targets if data.mask_paths is None else None
    if isinstance(data, tuple) and len(data) == 2 and isinstance(data[1], torch.Tensor):
        return data[1]
    return None


def _model_kwargs_from_data(config, count: Optional[int], input_shape: Optional[List[int]]):
    """(config, taken): config key model_kwargs completed from the data, as Ultralytics takes `nc` from its data set:
    num_classes (the data's class count, _class_count) and in_channels (images: their channels), each where the
    model's factory takes it and model_kwargs does not give it (registry.kwargs_from_data). The config returned
    holds them, so that config.json and the checkpoints rebuild the same model; taken is what was added."""
    num_classes = count
    in_channels = input_shape[0] if input_shape is not None and len(input_shape) == 3 else None
    taken = kwargs_from_data(config.model, config.model_kwargs, num_classes, in_channels)
    if not taken:
        return config, {}
    return dataclasses.replace(config, model_kwargs={**config.model_kwargs, **taken}), taken


def _check_class_count(config, task: Task, classes: Optional[List[str]], count: Optional[int], given: bool) -> None:
    """Classification needs two classes at least: with one, every target is class 0, the loss is 0 from the first step
    and the accuracy 1, whatever the model learns."""
    if count is None or count >= 2 or not isinstance(task, Classification):
        return
    where = "train_data" if given else f"config key 'data' ('{config.data}')"
    found = f"1 class ({classes[0]})" if classes else "1 class (id 0)" if count else "no classes"
    raise ConfigError(f"{where} has {found}; classification (loss {config.loss}) needs 2 classes at least: "
                      "one subfolder of images per class, or two labels in a label file")


def _check_outputs(module: nn.Module, config, task: Task, classes: Optional[List[str]], count: Optional[int],
                   given: bool) -> None:
    """A classifier must have an output per class of the data (_class_count): fewer is a ConfigError, more a warning
    (outputs no target ever names); a multi-label model exactly one per label (the loss pairs them). Only where the
    data says its class count and gpucore finds the model's head (surgery.output_count)."""
    if count is None:
        return
    outputs = output_count(module)
    if outputs is None or outputs == count:
        return
    whose = "the model given to train()" if given else f"model '{config.model}'"
    fix = ("give it a head of that many outputs" if given
           else f"set model_kwargs num_classes: {count} (or leave num_classes out: it is taken from the data)")
    named = f"{count} classes ({_listed(classes) if classes else f'ids 0 to {count - 1}'})"
    if outputs < count or isinstance(task, MultiLabel):
        raise ConfigError(f"{whose} has {outputs} outputs, but the data has {named}"
                          f"{', one output each for ' + task.name if isinstance(task, MultiLabel) else ''}: {fix}")
    warnings.warn(f"{whose} has {outputs} outputs, but the data has {named}: outputs {count} to {outputs - 1} name no "
                  f"class; {fix}", stacklevel=4)


def _classifier_evidence(module: nn.Module, input_shape) -> Optional[str]:
    """Why `module` is a classifier, or None: its outputs for one input of zeros of the data's shape (eval mode: no
    BatchNorm statistics move) are one row per image; or, where it takes no such input (another size, images at their
    own sizes), its head is a Linear layer."""
    output = _probe_output(module, input_shape)
    if output is not None:
        return f"outputs of shape {tuple(output.shape)}: one row per image" if output.dim() == 2 else None
    head = classifier_head(module)
    if head is not None and isinstance(module.get_submodule(head), nn.Linear):
        return f"its head {head} is a Linear layer of {module.get_submodule(head).out_features} outputs"
    return None


def _probe_output(module: nn.Module, input_shape) -> Optional[torch.Tensor]:
    """The model's output for one input of zeros of the data's shape (eval mode: no BatchNorm statistics move), or None
    where it takes no such input (another size, images at their own sizes) or gives no tensor."""
    if not input_shape or not all(input_shape):
        return None
    training = module.training
    try:
        with torch.no_grad():
            output = module.eval()(torch.zeros(1, *input_shape))
    except Exception:  # noqa: BLE001 - only a probe; the caller, else the first step, tells
        return None
    finally:
        module.train(training)
    output = output[0] if isinstance(output, (tuple, list)) else output
    return output if isinstance(output, torch.Tensor) else None


def _listed(classes: List[str], most: int = 5) -> str:
    return ", ".join(classes[:most]) + (f", ... ({len(classes) - most} more)" if len(classes) > most else "")
