"""What the loggers share: `Logger`, a Callback that turns the loop's hooks into the four steps a tracker needs (start,
a logged step, an epoch, finish) and keeps a failing tracker from failing the run (its first error is one warning
naming the logger and the reason, the logger is off from then on and training goes on), and the names and values
they record."""
from __future__ import annotations

import json
import numbers
import warnings
from typing import Any, Dict

from ...redact import masked, masked_values
from ..callbacks import Callback


class Logger(Callback):
    """A Callback that records the run. Subclasses implement start, log_step, log_epoch and finish; none of them is
    called again once an error turned the logger off. Steps are optimizer steps taken (the engine's global step)."""

    name = ""  # its entry in config key loggers

    def __init__(self):
        self.started = False
        self.off = False

    @property
    def state_key(self) -> str:
        """logger:NAME, apart from the user's callbacks whatever their classes' names (a CSVLogger of one's own)."""
        return f"logger:{self.name}"

    def start(self, trainer) -> None:
        """Before the first epoch, after a resume restored the state."""

    def log_step(self, step: int, metrics: Dict[str, float]) -> None:
        """Every log_every_n_steps optimizer steps: the epoch's running training metrics so far and its number."""

    def log_epoch(self, step: int, record: dict) -> None:
        """After an epoch: its row of metrics.jsonl; `step` is the global step at its end."""

    def finish(self, trainer) -> None:
        """After the run and its report (also after an error: trainer.status is then failed)."""

    def on_fit_start(self, trainer) -> None:
        self._guarded(self.start, trainer)
        self.started = not self.off

    def on_log(self, trainer, step: int, metrics: dict) -> None:
        self._guarded(self.log_step, step, metrics)

    def on_epoch_end(self, trainer, epoch: int, record: dict) -> None:
        self._guarded(self.log_epoch, trainer.position.steps_taken, record)

    def teardown(self, trainer) -> None:
        if self.started:
            self._guarded(self.finish, trainer)

    def _guarded(self, action, *args) -> None:
        if self.off:
            return
        try:
            action(*args)
        except Exception as exc:  # noqa: BLE001 - a tracker's failure is never the run's
            self.off = True
            # A tracker's error may name its URI, credentials and all (MLflow's "API request to https://...").
            warnings.warn(masked(f"logger '{self.name}' is off for the rest of this run: {type(exc).__name__}: {exc}; "
                                 "training goes on"), RuntimeWarning, stacklevel=2)


def step_metrics(metrics: dict) -> Dict[str, float]:
    """The running training metrics of a logged step, named step/KEY (step/loss, step/lr), apart from the epoch
    rows' names; the epoch number is left out."""
    return {f"step/{key}": value for key, value in metrics.items() if key != "epoch"}


def numbers_of(record: dict) -> Dict[str, float]:
    """The entries of a record that are numbers (memory figures are None on the CPU)."""
    return {key: value for key, value in record.items()
            if isinstance(value, numbers.Real) and not isinstance(value, bool)}


def flat_config(config: dict) -> Dict[str, Any]:
    """The config as hyperparameters: mappings opened into dotted keys (data_kwargs.train_size), an empty one kept
    as {}; numbers, strings (credentials in URIs masked) and booleans as they are, lists and null as JSON text."""
    flat: Dict[str, Any] = {}

    def add(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for key, item in value.items():
                add(f"{prefix}.{key}", item)
        elif isinstance(value, (str, bool, numbers.Real)):
            flat[prefix] = value
        else:
            flat[prefix] = json.dumps(value)

    for name, value in masked_values(config).items():
        add(name, value)
    return flat
