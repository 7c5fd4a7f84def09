"""Logger mlflow: the run as an MLflow run, through MLflow's client API (mlflow is imported only when this logger
is asked for: gpucore's mlflow extra). Tracking URI: config key mlflow_tracking_uri, else $MLFLOW_TRACKING_URI, else a
SQLite database beside the run directories (sqlite:///RUN_DIR/mlflow.db; a new experiment's artifacts then go to
RUN_DIR/mlartifacts); experiment: config key mlflow_experiment, else the config's name; run name: the run
directory's name.

A new MLflow run gets the config as params (flattened, values cut to MLflow's length limit); every start sets the
device, precision and the gpucore and torch versions as tags. Every logged step's running metrics (step/loss, ...)
and every epoch's row of metrics.jsonl are logged at the global step; at the end report.html, plots/,
per_class.json, training_stats.json and config.json as artifacts (checkpoints/best.pt too with mlflow_log_model),
and the status: FINISHED, KILLED after Ctrl-C, FAILED after an error.

The MLflow run's id is kept in every checkpoint (this callback's state) and in the run directory (mlflow_run.json),
so a resume, or a torchrun restart before the first checkpoint, continues the same MLflow run. Both, and the params,
hold the tracking URI with its credentials masked (redact.py); only the client connects with the real one. MLflow
keeps every value it is given, so a metric goes on after the last step an earlier, killed start logged for it: each
metric has one value per step, in the order of the steps."""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import time
from typing import Dict, Optional

import torch

from ... import _build_info
from ...checkpoint import write_json
from ...redact import masked
from ...run_files import BEST, CHECKPOINTS, CONFIG, MLFLOW_RUN, PER_CLASS, PLOTS, REPORT, STATS
from ..fit_outcome import FAILED, INTERRUPTED
from .base import Logger, numbers_of, step_metrics

DATABASE = "mlflow.db"  # the default store, in config key run_dir
ARTIFACTS = "mlartifacts"  # beside a SQLite store: where the experiments gpucore creates keep their artifacts
_STATUS = {INTERRUPTED: "KILLED", FAILED: "FAILED"}  # else FINISHED
_BATCH = 100  # params per log_batch call (MLflow's limit)


class MLflowLogger(Logger):
    name = "mlflow"

    def __init__(self, config, run_dir: str, placement, params: dict):
        super().__init__()
        self.tracking_uri = (config.mlflow_tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
                             or f"sqlite:///{os.path.join(os.path.abspath(config.run_dir), DATABASE)}")
        self.experiment = config.mlflow_experiment or config.name
        self.run_dir = run_dir
        self.log_model = config.mlflow_log_model
        self.params = params  # the config flattened (base.flat_config)
        self.tags = {"gpucore.device": str(placement.device), "gpucore.precision": placement.policy.precision,
                     "gpucore.version": _build_info.GPUCORE_VERSION, "torch.version": torch.__version__}
        self.run_id: Optional[str] = None
        self.client = None
        self.logged_up_to: Dict[str, int] = {}  # the last step of each metric an earlier start of this run logged

    def state_dict(self) -> dict:
        return {"run_id": self.run_id, "tracking_uri": masked(self.tracking_uri)}

    def load_state_dict(self, state: dict) -> None:
        if self._is_this_store(state["tracking_uri"]):  # another store does not know the run
            self.run_id = state["run_id"]

    def _is_this_store(self, recorded_uri: str) -> bool:
        """Whether `recorded_uri` (masked, or real as older releases recorded it) is this logger's tracking URI."""
        return masked(recorded_uri) == masked(self.tracking_uri)

    def start(self, trainer) -> None:
        try:
            from mlflow.entities import Param, RunTag
            from mlflow.tracking import MlflowClient
            from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH
        except ImportError as exc:
            raise ImportError("the mlflow package is not installed (pip install 'gpucore[mlflow]', or pip install "
                              "mlflow; or leave mlflow out of config key loggers)") from exc
        client = MlflowClient(self.tracking_uri)
        with _environment_defaults(_FAIL_FAST):
            experiment = client.get_experiment_by_name(self.experiment)
        run_id = self.run_id or self._run_id_in_run_dir()
        if run_id is None:
            experiment_id = (experiment.experiment_id if experiment is not None else
                             client.create_experiment(self.experiment, artifact_location=self._artifact_location()))
            run_id = client.create_run(experiment_id, run_name=os.path.basename(self.run_dir)).info.run_id
            params = [Param(key, _text(value)[:MAX_PARAM_VAL_LENGTH]) for key, value in self.params.items()]
            for first in range(0, len(params), _BATCH):
                client.log_batch(run_id, params=params[first:first + _BATCH])
        else:
            client.update_run(run_id, status="RUNNING")
            self.logged_up_to = {key: max(metric.step for metric in client.get_metric_history(run_id, key))
                                 for key in client.get_run(run_id).data.metrics}
        client.log_batch(run_id, tags=[RunTag(key, value) for key, value in self.tags.items()])
        self.client, self.run_id = client, run_id
        write_json(os.path.join(self.run_dir, MLFLOW_RUN), self.state_dict())

    def log_step(self, step: int, metrics: dict) -> None:
        self._log(step_metrics(metrics), step)

    def log_epoch(self, step: int, record: dict) -> None:
        self._log(numbers_of(record), step)

    def finish(self, trainer) -> None:
        try:
            for name in (REPORT, PER_CLASS, STATS, CONFIG):
                path = os.path.join(self.run_dir, name)
                if os.path.isfile(path):
                    self.client.log_artifact(self.run_id, path)
            plots = os.path.join(self.run_dir, PLOTS)
            if os.path.isdir(plots):
                self.client.log_artifacts(self.run_id, plots, artifact_path=PLOTS)
            best = os.path.join(self.run_dir, CHECKPOINTS, BEST)
            if self.log_model and os.path.isfile(best):
                self.client.log_artifact(self.run_id, best, artifact_path=CHECKPOINTS)
        finally:
            # MLflow prints a tracking server's run URL, made from the URI as given: credentials and all.
            with_credentials = masked(self.tracking_uri) != self.tracking_uri
            with _environment_defaults({"MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"} if with_credentials else {}):
                self.client.set_terminated(self.run_id, status=_STATUS.get(trainer.status, "FINISHED"))

    def _log(self, values: dict, step: int) -> None:
        from mlflow.entities import Metric

        timestamp = int(time.time() * 1000)
        metrics = [Metric(key, float(value), timestamp, step) for key, value in values.items()
                   if step > self.logged_up_to.get(key, -1)]
        if metrics:
            self.client.log_batch(self.run_id, metrics=metrics)

    def _run_id_in_run_dir(self) -> Optional[str]:
        """The MLflow run an earlier start in this run directory logged to, in this store."""
        path = os.path.join(self.run_dir, MLFLOW_RUN)
        if not os.path.isfile(path):
            return None
        with open(path, encoding="utf-8") as handle:
            saved = json.load(handle)
        return saved["run_id"] if self._is_this_store(saved["tracking_uri"]) else None

    def _artifact_location(self) -> Optional[str]:
        """A SQLite store's artifacts beside its database (MLflow's own default is ./mlruns wherever the run was
        started); a tracking server keeps its own default."""
        prefix = "sqlite:///"
        if not self.tracking_uri.startswith(prefix):
            return None
        database = self.tracking_uri[len(prefix):]
        return pathlib.Path(os.path.dirname(os.path.abspath(database)), ARTIFACTS).as_uri()


def _text(value) -> str:
    """A param's value as MLflow keeps it: a string as it is, a number or boolean as in JSON (true, 0.001)."""
    return value if isinstance(value, str) else json.dumps(value)


# MLflow retries a tracking server it cannot reach for minutes (MLFLOW_HTTP_REQUEST_MAX_RETRIES, ..._TIMEOUT): the
# first request gives up at once, or after 10 seconds without an answer, unless those are set; the run then trains on
# without this logger.
_FAIL_FAST = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


@contextlib.contextmanager
def _environment_defaults(values: Dict[str, str]):
    """MLflow's environment variables `values` for the calls inside, each only where the user did not set it."""
    added = [name for name in values if name not in os.environ]
    os.environ.update({name: values[name] for name in added})
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)
