"""Logger tensorboard: event files in the run directory's tensorboard/ folder: each number of an epoch's row of
metrics.jsonl as a scalar at that epoch, and at the end the hyperparameters (the config, flattened) with the last
epoch's numbers as the HParams view's metrics, in the same folder as the scalars. A resumed run, or one started again
in the directory of a run killed before its first checkpoint, hides the scalars an earlier start logged for the
epochs it trains again (purge_step), so each epoch shows once."""
from __future__ import annotations

import os

from ...run_files import TENSORBOARD
from .base import Logger, numbers_of


class TensorBoardLogger(Logger):
    name = "tensorboard"

    def __init__(self, run_dir: str, hyperparameters: dict):
        super().__init__()
        self.path = os.path.join(run_dir, TENSORBOARD)
        self.hyperparameters = hyperparameters  # the config flattened (base.flat_config)
        self.writer = None

    def start(self, trainer) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise ImportError("the tensorboard package is not installed (pip install tensorboard; or leave tensorboard "
                              "out of config key loggers)") from exc
        self.writer = SummaryWriter(self.path, purge_step=trainer.epoch + 1)

    def log_epoch(self, step: int, record: dict) -> None:
        for key, value in numbers_of(record).items():
            if key != "epoch":
                self.writer.add_scalar(key, value, record["epoch"])

    def finish(self, trainer) -> None:
        from torch.utils.tensorboard.summary import hparams

        try:
            if trainer.history:
                final = {key: value for key, value in numbers_of(trainer.history[-1]).items() if key != "epoch"}
                for summary in hparams(self.hyperparameters, final):
                    self.writer.file_writer.add_summary(summary)
        finally:
            self.writer.close()
