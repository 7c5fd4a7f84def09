"""Policies applied around each epoch, as callbacks on the protocol users' callbacks use: optional
`on_epoch_start(epoch)` (after the model is put in training mode), `on_epoch_end(epoch, record)` and
`on_step_end(step, metrics)` methods; epochs count from 1. ModelCheckpoint carries state that a checkpoint
saves (`state_dict` / `load_state_dict`), so a resumed run goes on where it stopped; FreezeBackbone's state
follows from the epoch, which the checkpoint restores."""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from torch import nn

from ..errors import ConfigError
from ..models.registry import backbone_split, is_under
from .run_dir import RunDir


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


class ModelCheckpoint:
    """After each epoch: checkpoints/last.pt; best.pt when the monitored metric improved; epoch_NNNN.pt
    every `save_every_n_epochs` epochs, keeping the newest `keep_last_k`. Tracks the best metric and epoch."""

    def __init__(self, monitor: Monitor, run_dir: RunDir, payload: Callable[[int], dict], save_every_n_epochs: int,
                 keep_last_k: int):
        self.monitor, self.run_dir, self.payload = monitor, run_dir, payload
        self.save_every_n_epochs, self.keep_last_k = save_every_n_epochs, keep_last_k
        self.best: Optional[float] = None
        self.best_epoch: Optional[int] = None

    def epochs_without_improvement(self, epochs_trained: int) -> int:
        """What config key patience counts: epochs since the best one (or since the start, if none was)."""
        return epochs_trained - (self.best_epoch or 0)

    def on_epoch_end(self, epoch: int, record: dict) -> None:
        value = self.monitor.value(record)
        improved = self.monitor.improved(value, self.best)
        if improved:
            self.best, self.best_epoch = value, epoch
        payload = self.payload(epoch)
        self.run_dir.save("last.pt", payload)
        if improved:
            self.run_dir.save("best.pt", payload)
        if self.save_every_n_epochs and epoch % self.save_every_n_epochs == 0:
            self.run_dir.save(f"epoch_{epoch:04d}.pt", payload)
            self.run_dir.keep_newest("epoch_", self.keep_last_k)
        self.run_dir.remove("interrupted.pt")  # superseded by last.pt

    def state_dict(self) -> dict:
        """The "best" entry of training_stats.json and of checkpoints."""
        return {"metric": self.best, "epoch": self.best_epoch, "monitor": self.monitor.name}

    def load_state_dict(self, state: dict) -> None:
        self.best, self.best_epoch = state["metric"], state["epoch"]
        if state["monitor"] is not None:
            self.monitor.name = state["monitor"]


class FreezeBackbone:
    """Config keys freeze: backbone and freeze_epochs. Epochs 1 to freeze_epochs train the classifier head alone:
    the backbone's parameters are set requires_grad=False (they get no gradients, so the fused step, clipping and
    the loss scaler pass them by and their optimizer state stays as it was) and its BatchNorm layers are put in eval
    mode (running statistics unchanged). From the next epoch on, every layer trains. Frozen or not follows from
    the epoch alone, so a resumed run freezes exactly as the uninterrupted one did."""

    def __init__(self, model: nn.Module, freeze_epochs: int):
        split = backbone_split(model, "freeze")
        self.params = split.backbone_params
        self.norms = [module for name, module in model.named_modules()
                      if isinstance(module, nn.modules.batchnorm._BatchNorm) and not is_under(name, split.head)]
        self.freeze_epochs = freeze_epochs

    def on_epoch_start(self, epoch: int) -> None:
        frozen = epoch <= self.freeze_epochs
        for param in self.params:
            param.requires_grad_(not frozen)
        if frozen:
            for norm in self.norms:
                norm.eval()
