"""Config key loggers: where rank 0 records a run besides metrics.jsonl and training_stats.json (csv: metrics.csv,
tensorboard: event files, mlflow: an MLflow run). Each logger is a Callback (base.Logger); none fails a run."""
from __future__ import annotations

from typing import List

from .base import Logger, flat_config
from .csv_logger import CSVLogger
from .mlflow_logger import MLflowLogger
from .tensorboard_logger import TensorBoardLogger


def make_loggers(config, is_main: bool, run_dir, placement) -> List[Logger]:
    """The loggers config key loggers names, in its order, each given what it reads of the run of `config` placed as
    `placement` (setup_model.Placement): the path of its run directory `run_dir` (run_dir.RunDir); TensorBoard and
    MLflow also the run's hyperparameters, config.json's values flattened once here (flat_config); MLflow also the
    config and placement. None on ranks other than 0 (not `is_main`)."""
    if not is_main:
        return []
    hyperparameters = flat_config(run_dir.config)
    makers = {CSVLogger.name: lambda: CSVLogger(run_dir.path),
              TensorBoardLogger.name: lambda: TensorBoardLogger(run_dir.path, hyperparameters),
              MLflowLogger.name: lambda: MLflowLogger(config, run_dir.path, placement, hyperparameters)}
    return [makers[name]() for name in config.loggers]
