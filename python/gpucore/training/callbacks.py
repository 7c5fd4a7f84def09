"""The fit loop's callbacks, with the hooks Lightning users know. `Callback` is the base class: every hook the
loop calls, in the order a run calls them, each a no-op until overridden; every hook is given the trainer (trainer.py:
the fit as a callback sees it) first; epochs count from 1. A callback's `state_dict()` is saved in every checkpoint (under its
`state_key`) and given back to `load_state_dict` on resume. Setting `trainer.should_stop = True` in any hook ends
the run after the current epoch (its checkpoint written), with status "stopped" (EarlyStopping: "early_stopped").

The built-in ones: ModelCheckpoint (last/best/every-N checkpoints; state: the best metric and epoch),
EarlyStopping (config key patience; state: the best metric and epoch) and FreezeBackbone (config key freeze; no
state: frozen or not follows from the epoch, which the checkpoint restores). Objects that are not Callbacks but
have some of the hook methods are called too (`CallbackList`)."""
from __future__ import annotations

import inspect
import warnings
from typing import Any, Dict, List, Optional, Sequence

from torch import nn

from ..errors import ConfigError
from ..models.surgery import backbone_split
from ..run_files import BEST, EVERY_N_PREFIX, INTERRUPTED, LAST, every_n_name
from .fit_outcome import EARLY_STOPPED
from .frozen_layers import CannotFold, FrozenLayersForward
from .run_dir import RunDir


class Callback:
    """A training callback, as Lightning users know them: override the hooks you need.

    `trainer`, every hook's first argument, is the fit as a callback sees it (gpucore.training.trainer.Trainer;
    Lightning's name): its `epoch`, `position`, `history`, `run` (model, engine, config), `model`, `status`,
    `resumed`, `should_stop` (set it to end the run after this epoch) and `stop(reason)`. The hooks run in the order listed; what
    state_dict returns is saved in every checkpoint under `state_key` and given back on resume.
    """

    @property
    def state_key(self) -> str:
        """Where this callback's state is kept in a checkpoint; two callbacks of a run must differ in it."""
        return type(self).__qualname__

    def on_fit_start(self, trainer) -> None:
        """Before the first epoch (after a resume restored the state).

        Args:
            trainer: the fit loop.
        """

    def on_epoch_start(self, trainer, epoch: int) -> None:
        """Before epoch `epoch` trains, after the model is put in training mode.

        Args:
            trainer: the fit loop.
            epoch: the epoch, from 1.
        """

    def on_train_step_end(self, trainer, step: int) -> None:
        """After every optimizer step (Lightning's on_train_batch_end fires after every batch; with
        accumulate_grad_batches 1 that is the same). Costs nothing unless a callback overrides it: only then
        does the engine call back into Python after each step.

        Args:
            trainer: the fit loop.
            step: the optimizer steps done in the current epoch, from 1 (counted from the epoch's start, also in a
                run resumed mid-epoch), like Lightning's batch_idx a count within the epoch (the run's count,
                trainer.position.steps_taken, is as of the last on_log: reading it on the host waits for the GPU).
        """

    def on_log(self, trainer, step: int, metrics: dict) -> None:
        """Every log_every_n_steps optimizer steps, when the host reads the running metrics (the progress bar
        and the loggers' steps); was on_step_end before this release.

        Args:
            trainer: the fit loop.
            step: the optimizer steps taken in the run.
            metrics: the epoch's running metrics (and the epoch).
        """

    def on_epoch_end(self, trainer, epoch: int, record: dict) -> None:
        """After the epoch's validation.

        Args:
            trainer: the fit loop.
            epoch: the epoch, from 1.
            record: the epoch's row of metrics.jsonl.
        """

    def on_save_checkpoint(self, trainer, checkpoint: dict) -> None:
        """A checkpoint is about to be written.

        Args:
            trainer: the fit loop.
            checkpoint: its contents, which the callback may add to.
        """

    def on_load_checkpoint(self, trainer, checkpoint: dict) -> None:
        """A resume read a checkpoint; called after load_state_dict.

        Args:
            trainer: the fit loop.
            checkpoint: the checkpoint's contents.
        """

    def on_fit_end(self, trainer) -> None:
        """After the last epoch, early stopping, a stop or Ctrl-C (trainer.status says which).

        Args:
            trainer: the fit loop.
        """

    def teardown(self, trainer) -> None:
        """At the very end, after report.html is written; also after an error (trainer.status is then failed).

        Args:
            trainer: the fit loop.
        """

    def state_dict(self) -> dict:
        """The callback's state, saved in every checkpoint.

        Returns:
            A dict that torch.load(weights_only=True) can read back (numbers, strings, lists, dicts, tensors).
        """
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Take back what state_dict returned, on resume.

        Args:
            state: the dict state_dict returned when the checkpoint was written.
        """


# The hooks as they were written before 0.1.0, without the trainer (their arguments then): such a hook is refused,
# naming the signature to write, not left to fail with a TypeError mid-run.
_WITHOUT_TRAINER = {"on_epoch_start": "epoch", "on_step_end": "step, metrics", "on_epoch_end": "epoch, record",
                    "on_save_checkpoint": "checkpoint", "on_load_checkpoint": "checkpoint"}
# The hooks renamed, by their new names: a callback that defines the old one (in its class or a subclass of the one
# that defines the new one) has it called in the new one's place, with a DeprecationWarning, until the next release.
# on_step_end ran every log_every_n_steps steps, not after every step as its name said (on_train_step_end does that).
_RENAMED = {"on_log": "on_step_end"}


class CallbackList:
    """A run's callbacks in the order they are called, each hook given `trainer` and the hook's arguments."""

    def __init__(self, callbacks: Sequence[Any], trainer):
        self.callbacks: List[Any] = list(callbacks)
        self.trainer = trainer
        # (id(callback), hook): the callback's old method called for the hook, where it defines a renamed one
        for callback in self.callbacks:
            for hook in _WITHOUT_TRAINER:
                _check_takes_trainer(callback, hook)
        self.renamed = {(id(callback), hook): old for callback in self.callbacks for hook, old in _RENAMED.items()
                        if _uses_old_name(callback, hook, old)}
        self.stateful = _stateful(self.callbacks)  # by state key: what checkpoints keep

    def __iter__(self):
        return iter(self.callbacks)

    def append(self, callback: Any) -> None:
        """`callback` called after every other (ModelCheckpoint: a checkpoint holds the others' state)."""
        for hook in _WITHOUT_TRAINER:
            _check_takes_trainer(callback, hook)
        self.callbacks.append(callback)
        self.renamed.update({(id(callback), hook): old for hook, old in _RENAMED.items()
                             if _uses_old_name(callback, hook, old)})
        self.stateful = _stateful(self.callbacks)

    def call(self, hook: str, *args) -> None:
        for callback in self.callbacks:
            name = self.renamed.get((id(callback), hook), hook)
            method = getattr(callback, name, None)
            if method is not None:
                method(self.trainer, *args)

    def state_dict(self) -> Dict[str, dict]:
        """Every stateful callback's state_dict(), by its state key: what checkpoints keep."""
        return {key: callback.state_dict() for key, callback in self.stateful.items()}

    def load_state_dict(self, states: Dict[str, dict]) -> None:
        """Gives each callback the state a checkpoint kept under its key (none: it starts as new)."""
        for key, callback in self.stateful.items():
            if key in states:
                callback.load_state_dict(states[key])

    def overridden(self, hook: str) -> bool:
        """Whether some callback defines `hook` itself (a Callback's no-op does not count): the loop asks this of
        on_train_step_end, so that a run without such a callback does not call into Python after every step."""
        return any(_defines(callback, hook) for callback in self.callbacks)


def _stateful(callbacks: Sequence[Any]) -> Dict[str, Any]:
    """The callbacks whose state checkpoints keep, by state key (a Callback's, else its class name)."""
    stateful: Dict[str, Any] = {}
    for callback in callbacks:
        if not hasattr(callback, "state_dict"):
            continue
        key = getattr(callback, "state_key", type(callback).__qualname__)
        if key in stateful:
            raise ConfigError(f"two callbacks keep their state under '{key}' in checkpoints; give one of them "
                              "another state_key (a property of gpucore.Callback)")
        stateful[key] = callback
    return stateful


def _defines(callback: Any, hook: str) -> bool:
    """Whether `callback` has `hook` other than Callback's no-op."""
    method = getattr(callback, hook, None)
    return method is not None and getattr(method, "__func__", None) is not getattr(Callback, hook, None)


def _defining_class(callback: Any, name: str) -> int:
    """Where in the callback's class's MRO `name` is defined (0: the instance itself); -1: nowhere."""
    if name in getattr(callback, "__dict__", {}):
        return 0
    for depth, cls in enumerate(type(callback).__mro__, start=1):
        if name in vars(cls):
            return depth
    return -1


def _uses_old_name(callback: Any, hook: str, old: str) -> bool:
    """Whether `callback` defines the renamed hook `old` and no `hook` of its own below it; warns if so."""
    old_at = _defining_class(callback, old)
    if old_at < 0 or not _defines(callback, old):
        return False
    new_at = _defining_class(callback, hook)
    if 0 <= new_at <= old_at and _defines(callback, hook):
        return False  # the new hook is as specific: a callback written for both releases
    warnings.warn(f"callback {type(callback).__name__}: hook {old} is deprecated and stops working in the next "
                  f"release; it is called every log_every_n_steps optimizer steps, so it is named {hook} now: "
                  f"define {hook}(self, trainer, step, metrics), or on_train_step_end(self, trainer, step) for one "
                  "call after every optimizer step", DeprecationWarning, stacklevel=3)
    return True


def _check_takes_trainer(callback: Any, hook: str) -> None:
    """ConfigError if `callback`'s `hook` has the signature of before 0.1.0 (no trainer)."""
    method = getattr(callback, hook, None)
    if method is None:
        return
    try:
        signature = inspect.signature(method)
    except (TypeError, ValueError):  # no signature to read (a builtin): called the current way
        return
    arguments = _WITHOUT_TRAINER[hook].split(", ")
    if _binds(signature, len(arguments)) and not _binds(signature, len(arguments) + 1):
        raise ConfigError(f"callback {type(callback).__name__}: {hook}({_WITHOUT_TRAINER[hook]}) takes no trainer; "
                          f"every hook is called with the trainer first since 0.1.0: define {hook}(self, trainer, "
                          f"{_WITHOUT_TRAINER[hook]})")


def _binds(signature: inspect.Signature, count: int) -> bool:
    try:
        signature.bind(*range(count))
    except TypeError:
        return False
    return True


class Monitor:
    """The metric that decides "better" (config keys monitor, mode, min_delta). `auto` is settled by the first
    epoch's record: the first of the task's primary metrics on the validation data that it reports, else the
    validation loss, else the training loss; mode `auto` is the metric's own (`modes`: the task's metrics by record
    name, Task.metric_modes)."""

    def __init__(self, name: str, mode: str, min_delta: float, modes: Dict[str, str], primary_metrics: Sequence[str]):
        self.name = None if name == "auto" else name
        self.mode = None if mode == "auto" else mode
        self.min_delta = min_delta
        self.modes = modes
        self.auto_order = tuple(f"val_{metric}" for metric in primary_metrics) + ("val_loss",)

    def value(self, record: dict) -> Optional[float]:
        if self.name is None:
            self.name = next((n for n in self.auto_order if n in record), "train_loss")
        if self.name not in record:
            raise ConfigError(f"config key 'monitor': '{self.name}' is not reported; reported: "
                              f"{', '.join(sorted(k for k in record if k != 'epoch'))}")
        if self.mode is None:
            self.mode = self.modes[self.name]
        return record[self.name]

    def improved(self, value: Optional[float], best: Optional[float]) -> bool:
        if value is None:
            return False
        if best is None:
            return True
        return value < best - self.min_delta if self.mode == "min" else value > best + self.min_delta


class BestEpoch(Callback):
    """Tracks the epoch with the best monitored metric; what ModelCheckpoint and EarlyStopping both follow."""

    def __init__(self, monitor: Monitor):
        self.monitor = monitor
        self.best: Optional[float] = None
        self.best_epoch: Optional[int] = None

    def update(self, epoch: int, record: dict) -> bool:
        """Whether epoch `epoch` improved on the best so far (it is then the best)."""
        value = self.monitor.value(record)
        improved = self.monitor.improved(value, self.best)
        if improved:
            self.best, self.best_epoch = value, epoch
        return improved

    def state_dict(self) -> dict:
        """Also the "best" entry of training_stats.json."""
        return {"metric": self.best, "epoch": self.best_epoch, "monitor": self.monitor.name}

    def load_state_dict(self, state: dict) -> None:
        self.best, self.best_epoch = state["metric"], state["epoch"]
        if state["monitor"] is not None:
            self.monitor.name = state["monitor"]


class EarlyStopping(BestEpoch):
    """Config keys patience and min_delta: stops the run once `patience` epochs in a row did not improve the
    monitored metric (counted from the best epoch, or from the start when none was)."""

    def __init__(self, monitor: Monitor, patience: int):
        super().__init__(monitor)
        self.patience = patience

    def on_epoch_end(self, trainer, epoch: int, record: dict) -> None:
        self.update(epoch, record)
        if epoch - (self.best_epoch or 0) >= self.patience:
            since = f"since epoch {self.best_epoch}" if self.best_epoch else "since the start"
            trainer.stop(f"early stopping: {self.monitor.name} did not improve for {self.patience} epoch"
                         f"{'s' if self.patience > 1 else ''} ({since})", EARLY_STOPPED)


class ModelCheckpoint(BestEpoch):
    """After each epoch: checkpoints/last.pt; best.pt when the monitored metric improved; epoch_NNNN.pt
    every `save_every_n_epochs` epochs, keeping the newest `keep_last_k`. The loop calls it after the other
    callbacks, so that the checkpoint holds their state after the epoch."""

    STATE_KEY = "ModelCheckpoint"  # checkpoints also keep its state, the best epoch, as "best"

    @property
    def state_key(self) -> str:
        return self.STATE_KEY

    def __init__(self, monitor: Monitor, run_dir: RunDir, checkpointing, save_every_n_epochs: int, keep_last_k: int):
        super().__init__(monitor)
        self.run_dir, self.checkpointing = run_dir, checkpointing  # checkpointing.Checkpointing: what it saves
        self.save_every_n_epochs, self.keep_last_k = save_every_n_epochs, keep_last_k

    def on_epoch_end(self, trainer, epoch: int, record: dict) -> None:
        improved = self.update(epoch, record)
        snapshot = self.checkpointing.snapshot()  # one copy to the host for all of the epoch's files
        # best.pt first: a stop in a later file's wait for the other ranks (signals.HELD_STOP_GRACE_S) leaves
        # interrupted.pt, which holds this state, newest, and never a best epoch that best.pt does not hold.
        if improved:
            self.run_dir.save(BEST, snapshot)
        self.run_dir.save(LAST, snapshot)
        if self.save_every_n_epochs and epoch % self.save_every_n_epochs == 0:
            self.run_dir.save(every_n_name(epoch), snapshot)
            self.run_dir.keep_newest(EVERY_N_PREFIX, self.keep_last_k)
        self.run_dir.remove(INTERRUPTED)  # superseded by last.pt


class FreezeBackbone(Callback):
    """Config keys freeze: backbone and freeze_epochs. Epochs 1 to freeze_epochs train the classifier head alone:
    the backbone's parameters are set requires_grad=False (they get no gradients, so the fused step, clipping and
    the loss scaler pass them by and their optimizer state stays as it was) and its BatchNorm layers are put in eval
    mode (running statistics unchanged). From the next epoch on, every layer trains. Frozen or not follows from
    the epoch alone, so a resumed run freezes exactly as the uninterrupted one did.

    While frozen, the engine trains through FrozenLayersForward (frozen_layers.py: BatchNorms folded into the
    layers before them, weights cast once to `autocast_dtype`), made at the first frozen epoch and kept while the
    backbone stays frozen; `fold_off` says why not (None: fold), e.g. a model under DDP or torch.compile.
    `frozen_layers()` is training_stats.json's account of it."""

    def __init__(self, model: nn.Module, freeze_epochs: int, autocast_dtype=None, fold_off: Optional[str] = None):
        split = backbone_split(model, "freeze")
        self.model = model
        self.params = split.backbone_params
        self.norms = [module for name, module in model.named_modules()
                      if isinstance(module, nn.modules.batchnorm._BatchNorm) and not split.in_head(name)]
        self.freeze_epochs = freeze_epochs
        self.autocast_dtype = autocast_dtype
        self.fold_off = fold_off
        self.forward: Optional[FrozenLayersForward] = None
        self.folded: Optional[Dict[str, Any]] = None  # the summary of a folded forward since dropped

    def on_epoch_start(self, trainer, epoch: int) -> None:
        frozen = epoch <= self.freeze_epochs
        for param in self.params:
            param.requires_grad_(not frozen)
        if not frozen:
            if self.forward is not None:  # the layers train again: the engine calls the model itself
                self.folded, self.forward = self.forward.summary(), None
            return
        for norm in self.norms:
            norm.eval()
        if self.forward is None and self.fold_off is None:
            try:
                self.forward = FrozenLayersForward(self.model, self.autocast_dtype, trainer.note_host_read)
            except CannotFold as exc:
                self.fold_off = str(exc)

    def epoch_forward(self, model_forward):
        """What the engine calls this epoch: the folded forward of a frozen epoch (built in on_epoch_start), else
        `model_forward`."""
        return self.forward if self.forward is not None else model_forward

    def frozen_layers(self) -> Dict[str, Any]:
        """What the frozen epochs' forward folded and cast once, or why the model's own forward trained them."""
        if self.forward is not None:
            return self.forward.summary()
        return self.folded or {"unchanged": self.fold_off or "no epoch has trained frozen yet"}
