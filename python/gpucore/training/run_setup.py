"""A training run's set-up, in one order: the process (seeding, device, the process group, precision), then three
steps, each in its own file and owning its part of the run, as Lightning's connectors each own one concern: the data
(setup_data.py: RunData), the model (setup_model.py: RunModel and its Placement), the engine (engine_config.py); then
the run directory. Each step is given the parts before it, never the other way round."""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch import nn

from ..config import run_name_of
from ..data.builtin import BUILTIN as BUILTIN_DATA, PYTHON_DATA
from ..device.select import resolve_precision, select_device
from ..errors import ConfigError
from ..models.registry import python_model_spec
from ..tasks import Task, task_of
from . import distributed
from .engine_config import RunEngine, setup_engine
from .rng import seed_everything
from .run_dir import RunDir
from .setup_data import RunData, setup_data
from .setup_model import Placement, RunModel, check_model_argument, setup_model
from .user_loss import UserLoss, callable_name


@dataclass
class Run:
    """A run as its set-up left it: the config it trains with, its task, and its parts (data, model, placement, the
    engine: `training`), the run directory and the process group."""

    config: Any
    task: Task  # what kind of model it trains (config keys loss and heads), decided once here
    world: distributed.World
    loss: Optional[UserLoss]  # train()'s loss argument, which replaces the task's built-in loss
    data: RunData  # the data sets and what the data says (classes, input shape): setup_data.py
    model: RunModel  # the model, its wrapped forward and EMA: setup_model.py
    placement: Placement  # its device, precision policy and memory format: setup_model.py
    training: RunEngine  # the engine, its one owner, and what the engine step decided: engine_config.py
    run_dir: RunDir
    group_store: Optional[Any]  # the store of the process group this run created (None: it created none)

    def summary(self) -> dict:
        """The facts of the run for training_stats.json."""
        data, placement = self.data, self.placement
        return {"device": str(placement.device), "device_reason": placement.device_reason,
                "precision": placement.policy.to_dict(), "channels_last": placement.channels_last,
                "torch": torch.__version__, "config": self.run_dir.config,
                "classes": data.classes, "data": data.identity, "run_dir": self.run_dir.path,
                "launcher": self.world.launcher or None, "world_size": self.world.size,
                "restart": self.world.restart,  # TORCHELASTIC_RESTART_COUNT
                "validation": data.validation,
                "loss": self.loss.name if self.loss is not None else self.config.loss,
                "class_weights": self._class_weights(),
                "sampler": self.config.sampler,
                "model_kwargs_from_data": self.model.from_data,
                "pretrained": self.model.pretrained.to_dict() if self.model.pretrained else None}

    def _class_weights(self) -> Optional[dict]:
        """The loss's weight per class by name (config key class_weights resolved), or None: every class weighs 1."""
        weights = self.task.class_weights
        if weights is None:
            return None
        classes = self.data.classes
        names = classes if classes and len(classes) == len(weights) else range(len(weights))
        return {str(name): weight for name, weight in zip(names, weights)}

    @property
    def engine(self):
        """The C++ engine (_C.Engine), None once released."""
        return self.training.engine

    def release_engine(self) -> None:
        """Frees the engine now (RunEngine.release)."""
        self.training.release()

    def close(self) -> None:
        """The end of the run, however it ended: the data sets' reader threads joined, the run directory released,
        the process group gone."""
        self.data.close()
        self.run_dir.release()
        if self.group_store is not None:
            torch.distributed.destroy_process_group()


def build_run(config, world: distributed.World, model=None, train_data=None, val_data=None, loss=None) -> Run:
    """The run `config` asks for, set up step by step: the process, the data, the model, the engine, the run
    directory. `model`, `train_data`, `val_data` and `loss` are train()'s arguments."""
    task = task_of(config)
    loss = _user_loss(config, task, loss)
    check_model_argument(model)
    choice, policy, group_store = _start_process(config, world)
    config, task, data = setup_data(config, task, world, choice.device, train_data, val_data)
    config, task, run_model, placement = setup_model(config, task, data, world, choice, policy, model)
    training = setup_engine(config, task, world, data, run_model, placement)
    config = recorded_config(config, model, train_data, loss)
    run_dir = RunDir(config, world)
    run_dir.create()
    return Run(config=config, task=task, world=world, loss=loss, data=data, model=run_model, placement=placement,
               training=training, run_dir=run_dir, group_store=group_store)


def _start_process(config, world: distributed.World):
    """(device choice, precision policy, process group store or None): this process seeded (config keys seed and
    deterministic), its device chosen (each launched process its local GPU), the process group joined (every rank
    with the same config) and the precision applied."""
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
    group_store = distributed.start(world, choice.device, config.dist_timeout)
    distributed.check_same(json.dumps(config.to_dict(), sort_keys=True), "the configuration")
    policy = resolve_precision(config.precision, choice.device, tf32=config.tf32,
                               cudnn_benchmark=config.cudnn_benchmark, deterministic=config.deterministic)
    policy.apply()
    return choice, policy, group_store


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
