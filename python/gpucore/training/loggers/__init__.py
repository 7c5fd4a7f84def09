"""Config key loggers: where rank 0 records a run besides metrics.jsonl and training_stats.json (csv: metrics.csv,
tensorboard: event files, mlflow: an MLflow run). Each logger is a Callback (base.Logger); none fails a run."""
from __future__ import annotations

from typing import List

from .base import Logger
from .csv_logger import CSVLogger
from .mlflow_logger import MLflowLogger
from .tensorboard_logger import TensorBoardLogger


def make_loggers(config, is_main: bool, run_dir: str, placement) -> List[Logger]:
    """The loggers config key loggers names, in its order, each recording into run directory `run_dir` the run of
    `config` placed as `placement` (setup_model.Placement); none on ranks other than 0 (not `is_main`)."""
    if not is_main:
        return []
    by_name = {logger.name: logger for logger in (CSVLogger, TensorBoardLogger, MLflowLogger)}
    return [by_name[name](config, run_dir, placement) for name in config.loggers]
