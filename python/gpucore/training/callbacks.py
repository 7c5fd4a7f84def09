"""The fit loop's callbacks, with the hooks Lightning users know. `Callback` is the base class: every hook the
loop calls, in the order a run calls them, each a no-op until overridden; epochs count from 1. A callback's
`state_dict()` is saved in every checkpoint (under its `state_key`) and given back to `load_state_dict` on
resume. Setting `trainer.should_stop = True` in any hook ends the run after the current epoch (its checkpoint
written), with status "stopped" (EarlyStopping: "early_stopped").

The built-in ones: ModelCheckpoint (last/best/every-N checkpoints; state: the best metric and epoch),
EarlyStopping (config key patience; state: the best metric and epoch) and FreezeBackbone (config key freeze; no
state: frozen or not follows from the epoch, which the checkpoint restores). Objects that are not Callbacks but
have some of the hook methods are called too, as before."""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from torch import nn

from ..errors import ConfigError
from ..models.registry import backbone_split
from ..run_files import BEST, EVERY_N_PREFIX, INTERRUPTED, LAST, every_n_name
from .run_dir import RunDir


class Callback:
    """Override the hooks you need. `self.trainer` is the fit loop (set before on_fit_start): its `epoch`,
    `history`, `run` (model, engine, config) and `should_stop`."""

    trainer: Any = None

    @property
    def state_key(self) -> str:
        """Where this callback's state is kept in a checkpoint; two callbacks of a run must differ in it."""
        return type(self).__qualname__

    def on_fit_start(self, trainer) -> None:
        """Before the first epoch (after a resume restored the state)."""

    def on_epoch_start(self, epoch: int) -> None:
        """Before epoch `epoch` trains, after the model is put in training mode."""

    def on_step_end(self, step: int, metrics: dict) -> None:
        """Every log_every_n_steps optimizer steps: the step count and the running metrics (and the epoch)."""

    def on_epoch_end(self, epoch: int, record: dict) -> None:
        """After the epoch's validation: its row of metrics.jsonl."""

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """A checkpoint is about to be written: its contents, which the callback may add to."""

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """A resume read `checkpoint`; called after load_state_dict."""

    def on_fit_end(self, trainer) -> None:
        """After the last epoch, early stopping, a stop or Ctrl-C (trainer.status says which)."""

    def teardown(self, trainer) -> None:
        """At the very end, after report.html is written; also after an error (trainer.status is then failed)."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Takes back what state_dict returned."""


def call(callbacks: Sequence[Any], method: str, *args) -> None:
    for callback in callbacks:
        hook = getattr(callback, method, None)
        if hook is not None:
            hook(*args)


class Monitor:
    """The metric that decides "better" (config keys monitor, mode, min_delta); `auto` is settled by the
    first epoch's record: the validation accuracy (or IoU, or loss) when there is validation data."""

    AUTO_ORDER = ("val_accuracy", "val_seq_accuracy", "val_iou", "val_loss", "train_loss")

    def __init__(self, name: str, mode: str, min_delta: float):
        self.name = None if name == "auto" else name
        self.mode = None if mode == "auto" else mode
        self.min_delta = min_delta

    def value(self, record: dict) -> Optional[float]:
        if self.name is None:
            self.name = next((n for n in self.AUTO_ORDER if n in record), "train_loss")
        if self.name not in record:
            raise ConfigError(f"config key 'monitor': '{self.name}' is not reported; reported: "
                              f"{', '.join(sorted(k for k in record if k != 'epoch'))}")
        if self.mode is None:
            self.mode = "min" if "loss" in self.name else "max"
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

    def on_epoch_end(self, epoch: int, record: dict) -> None:
        self.update(epoch, record)
        if epoch - (self.best_epoch or 0) >= self.patience:
            self.trainer.should_stop = True
            self.trainer.stop_status = "early_stopped"


class ModelCheckpoint(BestEpoch):
    """After each epoch: checkpoints/last.pt; best.pt when the monitored metric improved; epoch_NNNN.pt
    every `save_every_n_epochs` epochs, keeping the newest `keep_last_k`. The loop calls it after the other
    callbacks, so that the checkpoint holds their state after the epoch."""

    def __init__(self, monitor: Monitor, run_dir: RunDir, payload: Callable[[int], dict], save_every_n_epochs: int,
                 keep_last_k: int):
        super().__init__(monitor)
        self.run_dir, self.payload = run_dir, payload
        self.save_every_n_epochs, self.keep_last_k = save_every_n_epochs, keep_last_k

    def on_epoch_end(self, epoch: int, record: dict) -> None:
        improved = self.update(epoch, record)
        payload = self.payload(epoch)
        self.run_dir.save(LAST, payload)
        if improved:
            self.run_dir.save(BEST, payload)
        if self.save_every_n_epochs and epoch % self.save_every_n_epochs == 0:
            self.run_dir.save(every_n_name(epoch), payload)
            self.run_dir.keep_newest(EVERY_N_PREFIX, self.keep_last_k)
        self.run_dir.remove(INTERRUPTED)  # superseded by last.pt


class FreezeBackbone(Callback):
    """Config keys freeze: backbone and freeze_epochs. Epochs 1 to freeze_epochs train the classifier head alone:
    the backbone's parameters are set requires_grad=False (they get no gradients, so the fused step, clipping and
    the loss scaler pass them by and their optimizer state stays as it was) and its BatchNorm layers are put in eval
    mode (running statistics unchanged). From the next epoch on, every layer trains. Frozen or not follows from
    the epoch alone, so a resumed run freezes exactly as the uninterrupted one did."""

    def __init__(self, model: nn.Module, freeze_epochs: int):
        split = backbone_split(model, "freeze")
        self.params = split.backbone_params
        self.norms = [module for name, module in model.named_modules()
                      if isinstance(module, nn.modules.batchnorm._BatchNorm) and not split.in_head(name)]
        self.freeze_epochs = freeze_epochs

    def on_epoch_start(self, epoch: int) -> None:
        frozen = epoch <= self.freeze_epochs
        for param in self.params:
            param.requires_grad_(not frozen)
        if frozen:
            for norm in self.norms:
                norm.eval()
