"""What every callback hook receives first, as `trainer` (Lightning's name, which keeps its Trainer apart from its
fit loop): the run's config, model, data and run directory, its position and history and how the fit stands, and the
way to stop it. Not the loop itself, nor the engine."""
from __future__ import annotations

from typing import List, Optional

from torch import nn

from .engine_config import RunEngine
from .fit_outcome import STOPPED, FitOutcome
from .position import RunPosition
from .run_dir import RunDir
from .setup_data import RunData
from .setup_model import RunModel


class Trainer:
    """The fit as a callback sees it.

    Attributes:
        config: the run's configuration (a TrainConfig: its keys as the run completed them from the data).
        data: the run's data (training/setup_data.py's RunData): `train_set` and `val_set` (None without validation
            data; each an EpochData: `data`, `plan`, `batches(epoch)`), `classes`, `input_shape`.
        run_dir: the run directory (training/run_dir.py's RunDir): `path`, `checkpoint_dir`.
        position: where the run is (the epoch, optimizer steps as of the last log, the batching; position.py).
        history: one dict per epoch trained, the rows of metrics.jsonl.
    """

    def __init__(self, config, data: RunData, run_dir: RunDir, model: RunModel, training: RunEngine,
                 position: RunPosition, history: List[dict], outcome: FitOutcome):
        self.config, self.data, self.run_dir = config, data, run_dir
        self.position, self.history = position, history
        # The engine part, not the engine: RunEngine.release frees the engine at once, which a reference held here
        # would prevent.
        self._model, self._training, self._outcome = model, training, outcome

    @property
    def model(self) -> nn.Module:
        """The model being trained (not a DDP or compiled wrapper)."""
        return self._model.module

    def note_host_read(self, source: str) -> None:
        """Counts one host read of device values a callback made (it waits for the device), under `source` in
        training_stats.json's host_syncs_by_source."""
        self._training.engine.note_host_read(source)

    @property
    def epoch(self) -> int:
        """Epochs trained so far: the current epoch's index, from 0."""
        return self.position.epoch

    @property
    def status(self) -> str:
        """completed (also while the run trains, until something ends it early), early_stopped, stopped,
        interrupted or failed (gpucore.training.fit_outcome)."""
        return self._outcome.status

    @property
    def stop_reason(self) -> Optional[str]:
        """Why the fit stopped, once it has (e.g. "max epochs reached (10)")."""
        return self._outcome.reason

    @property
    def resumed(self) -> Optional[dict]:
        """Where a resume started (the checkpoint, its epoch and data position); None for a new run."""
        return self._outcome.resumed

    @property
    def should_stop(self) -> bool:
        """Whether the run ends after the current epoch. Set it to True to stop there (status stopped)."""
        return self._outcome.asked is not None

    @should_stop.setter
    def should_stop(self, value: bool) -> None:
        if value:
            self.stop("a callback set trainer.should_stop")
        else:
            self._outcome.asked = None

    def stop(self, reason: str, status: str = STOPPED) -> None:
        """End the run after the current epoch (its record and checkpoints written) with `status`, saying `reason`
        where the run's end is reported (the terminal, training_stats.json's stop_reason)."""
        self._outcome.ask_stop(reason, status)
