"""Config key loggers against the real trackers: an MLflow SQLite store read back with MlflowClient, TensorBoard's
event files read back with its EventAccumulator, metrics.csv; a run killed and resumed is one MLflow run with the
histories of an uninterrupted one; two gloo processes log once; a tracker that cannot be reached, or is not
installed, is one warning and the run finishes. Also `gpucore runs`."""
import csv
import json
import os
import pathlib
import re
import sys
import urllib.parse
import warnings

import pytest
import torch

import gpucore
from gpucore.cli import main
from gpucore.evaluation.run_report import report_after_training
from gpucore.training import distributed

from conftest import require

pytestmark = pytest.mark.slow  # trains several runs, seconds each

SMALL = dict(data="synthetic_fashion", data_kwargs={"train_size": 256, "val_size": 64, "seed": 3}, progress=False,
             batch_size=32, epochs=3, seed=5, device="cpu", precision="32", log_every_n_steps=3, name="tiny",
             loggers=["csv", "tensorboard", "mlflow"])
STEPS_PER_EPOCH = 8  # 256 samples in batches of 32
TIMINGS = ("epoch_time_s", "val_time_s", "samples_per_s")  # the only numbers two runs of the same config differ in


class StepsSeen(gpucore.Callback):
    """The steps and running metrics on_log got, as the loggers got them."""

    def __init__(self):
        self.steps = []

    def on_log(self, trainer, step, metrics):
        self.steps.append((step, dict(metrics)))


class KilledAfterLogging(gpucore.Callback):
    """Fails the run at the end of epoch `epoch`, after the loggers logged it and before its checkpoint: what a
    kill there leaves behind."""

    def __init__(self, epoch):
        self.epoch = epoch

    def on_epoch_end(self, trainer, epoch, record):
        if epoch == self.epoch:
            raise RuntimeError(f"killed in epoch {epoch}")


def flat(config, prefix=""):
    """The config as MLflow params: mappings opened into dotted keys, other values as text (JSON but for strings)."""
    params = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            params.update(flat(value, f"{name}."))
        else:
            params[name] = value if isinstance(value, str) else json.dumps(value)
    return params


def tracking_uri(run_dir):
    """The default store of the runs in `run_dir`; the other tests log to the straight run's, each to an experiment
    of its own (a new SQLite store takes seconds to create)."""
    return f"sqlite:///{run_dir}/mlflow.db"


def mlflow_client(run_dir):
    return require("mlflow.tracking").MlflowClient(tracking_uri(run_dir))


def only_run(client, experiment="tiny"):
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    assert len(runs) == 1, [run.info.run_name for run in runs]
    return runs[0]


def histories(client, run):
    return {key: [(metric.step, metric.value) for metric in
                  sorted(client.get_metric_history(run.info.run_id, key), key=lambda metric: metric.step)]
            for key in run.data.metrics}


def jsonl(path):
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def csv_rows(path):
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        return reader.fieldnames, list(reader)


def untimed(rows):
    return [{key: value for key, value in row.items() if key not in TIMINGS} for row in rows]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """One uninterrupted run with every logger (and the report, as gpucore.train writes it), 3 epochs of 8 steps."""
    require("mlflow")
    require("tensorboard")
    run_dir = tmp_path_factory.mktemp("straight")
    seen = StepsSeen()
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        patch.setattr(sys.modules["gpucore.train"], "report_after_training", report_after_training)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = gpucore.train(dict(SMALL, run_dir=str(run_dir), mlflow_log_model=True), callbacks=[seen])
    assert not [str(w.message) for w in caught if str(w.message).startswith("logger '")]
    return result, seen


def test_mlflow_holds_the_config_every_logged_metric_and_the_run_files(straight):
    result, seen = straight
    run_dir = pathlib.Path(result.run_dir)
    client = mlflow_client(run_dir.parent)  # the default store: mlflow.db beside the run directories
    run = only_run(client)
    assert run.info.run_name == "tiny" and run.info.status == "FINISHED"
    assert run.data.params == flat(json.loads((run_dir / "config.json").read_text()))
    assert run.data.params["lr"] == "0.001" and run.data.params["data_kwargs.train_size"] == "256"
    assert {key: run.data.tags[key] for key in ("gpucore.device", "gpucore.precision", "gpucore.version",
                                                "torch.version")} == {
        "gpucore.device": "cpu", "gpucore.precision": "32", "gpucore.version": gpucore.__version__,
        "torch.version": torch.__version__}

    logged = histories(client, run)
    epochs = jsonl(run_dir / "metrics.jsonl")
    numbers = [key for key, value in epochs[0].items() if value is not None]
    for key in numbers:  # every number of metrics.jsonl, at the global step of its epoch's end
        assert logged[key] == [(row["epoch"] * STEPS_PER_EPOCH, row[key]) for row in epochs], key
    assert [step for step, _ in seen.steps] == [3, 6, 11, 14, 19, 22]  # every 3rd step of each epoch's 8
    for key in seen.steps[0][1]:
        if key != "epoch":
            assert logged[f"step/{key}"] == [(step, metrics[key]) for step, metrics in seen.steps], key
    assert set(logged) == set(numbers) | {f"step/{key}" for key in seen.steps[0][1] if key != "epoch"}

    artifacts = pathlib.Path(urllib.parse.urlparse(run.info.artifact_uri).path)
    assert artifacts.is_relative_to(run_dir.parent / "mlartifacts")
    expected = ["report.html", "per_class.json", "training_stats.json", "config.json", "checkpoints/best.pt",
                *(f"plots/{name}" for name in sorted(os.listdir(run_dir / "plots")))]
    assert len(expected) > 6  # the report drew its plots
    assert sorted(str(path.relative_to(artifacts)) for path in artifacts.rglob("*") if path.is_file()) == \
        sorted(expected)
    for name in expected:
        assert (artifacts / name).read_bytes() == (run_dir / name).read_bytes(), name
    assert json.loads((run_dir / "mlflow_run.json").read_text())["run_id"] == run.info.run_id
    last = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert last["callbacks"]["logger:mlflow"]["run_id"] == run.info.run_id


def test_metrics_csv_has_a_row_per_logged_step_and_per_epoch(straight):
    result, seen = straight
    columns, rows = csv_rows(os.path.join(result.run_dir, "metrics.csv"))
    epochs = jsonl(result.metrics_path)
    assert columns[:2] == ["epoch", "step"]
    step_rows = [row for row in rows if row["step/loss"]]
    epoch_rows = [row for row in rows if row["train_loss"]]
    assert len(step_rows) + len(epoch_rows) == len(rows) == len(seen.steps) + len(epochs)
    assert [(int(row["step"]), int(row["epoch"])) for row in step_rows] == \
        [(step, metrics["epoch"]) for step, metrics in seen.steps]
    for row, (_, metrics) in zip(step_rows, seen.steps):
        assert all(float(row[f"step/{key}"]) == value for key, value in metrics.items() if key != "epoch")
    for row, record in zip(epoch_rows, epochs):
        assert int(row["step"]) == record["epoch"] * STEPS_PER_EPOCH
        assert {key: float(row[key]) for key in record if record[key] is not None} == \
            {key: value for key, value in record.items() if value is not None}


def test_tensorboard_shows_the_scalars_and_the_hyperparameters(straight):
    result, _ = straight
    accumulator_module = require("tensorboard.backend.event_processing.event_accumulator")
    plugin_data = require("tensorboard.plugins.hparams.plugin_data_pb2")
    accumulator = accumulator_module.EventAccumulator(os.path.join(result.run_dir, "tensorboard"))
    accumulator.Reload()
    epochs = jsonl(result.metrics_path)
    for key in ("train_loss", "val_accuracy", "lr"):
        assert [(event.step, event.value) for event in accumulator.Scalars(key)] == \
            [(row["epoch"], pytest.approx(row[key], rel=1e-6)) for row in epochs]  # float32 in the event file
    content = accumulator.PluginTagToContent("hparams")
    start = plugin_data.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    config = json.loads(open(os.path.join(result.run_dir, "config.json")).read())
    assert start.hparams["lr"].number_value == config["lr"]
    assert start.hparams["optimizer"].string_value == config["optimizer"]
    assert start.hparams["data_kwargs.train_size"].number_value == 256
    assert start.hparams["betas"].string_value == "[0.9, 0.999]"
    assert len(start.hparams) == len(flat(config))
    experiment = plugin_data.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    final = {key for key, value in epochs[-1].items() if value is not None and key != "epoch"}
    assert {info.name.tag for info in experiment.metric_infos} == final
    # in the scalars' folder, not in a subfolder of its own as SummaryWriter.add_hparams would write them
    assert all(entry.is_file() for entry in os.scandir(os.path.join(result.run_dir, "tensorboard")))


@pytest.mark.slow
@pytest.mark.parametrize("killed_in", [1, 2])
def test_a_killed_and_resumed_run_is_one_mlflow_run_with_the_uninterrupted_histories(straight, tmp_path, killed_in):
    """Killed in epoch 2: resumed from epoch 1's checkpoint (the run id from it); in epoch 1: no checkpoint yet, the
    run starts again in the same directory (the run id from mlflow_run.json). Epoch `killed_in` was logged before
    the kill and is trained again: MLflow keeps one value per step, metrics.csv and TensorBoard too."""
    result, _ = straight
    store, experiment = os.path.dirname(result.run_dir), f"killed-in-{killed_in}"
    config = dict(SMALL, run_dir=str(tmp_path), mlflow_tracking_uri=tracking_uri(store), mlflow_experiment=experiment,
                  report_cam_layer="features." * 700)  # 6,300 characters, past MLflow's limit (no report drawn here)
    with pytest.raises(RuntimeError, match=f"killed in epoch {killed_in}"):
        gpucore.train(config, callbacks=[KilledAfterLogging(killed_in)])
    client = mlflow_client(store)
    assert only_run(client, experiment).info.status == "FAILED"
    resumed = gpucore.train(dict(config, resume="auto"))
    assert resumed.status == "completed" and resumed.run_dir == str(tmp_path / "tiny")

    run, uninterrupted = only_run(client, experiment), only_run(client)
    assert run.info.status == "FINISHED"
    logged, expected = histories(client, run), histories(client, uninterrupted)
    assert set(logged) == set(expected)
    for key in expected:
        assert [step for step, _ in logged[key]] == [step for step, _ in expected[key]], key
        if key not in TIMINGS:
            assert logged[key] == expected[key], key
    # the config of the run's first start (the resume's, resume: auto, is in its config.json and artifact), a value
    # longer than MLflow's 6,000 characters cut there
    params = flat(dict(json.loads((tmp_path / "tiny" / "config.json").read_text()), resume=None))
    assert run.data.params == dict(params, report_cam_layer=params["report_cam_layer"][:6000])

    columns, rows = csv_rows(tmp_path / "tiny" / "metrics.csv")
    straight_columns, straight_rows = csv_rows(os.path.join(result.run_dir, "metrics.csv"))
    assert columns == straight_columns and untimed(rows) == untimed(straight_rows)

    accumulator = require("tensorboard.backend.event_processing.event_accumulator").EventAccumulator(
        str(tmp_path / "tiny" / "tensorboard"))
    accumulator.Reload()
    assert [(event.step, event.value) for event in accumulator.Scalars("val_loss")] == \
        [(row["epoch"], pytest.approx(row["val_loss"], rel=1e-6)) for row in jsonl(result.metrics_path)]


@pytest.mark.slow
def test_two_gloo_processes_log_once(straight, tmp_path):
    store = os.path.dirname(straight[0].run_dir)
    result = gpucore.train(dict(SMALL, devices=2, epochs=2, loggers=["csv", "mlflow"], run_dir=str(tmp_path),
                                mlflow_tracking_uri=tracking_uri(store), mlflow_experiment="gloo"))
    assert result.status == "completed" and result.steps == 2 * 4  # 256 samples over 2 ranks in batches of 32
    client = mlflow_client(store)
    run = only_run(client, "gloo")
    logged = histories(client, run)
    for key, value in jsonl(result.metrics_path)[0].items():
        if value is not None:
            assert logged[key] == [(row["epoch"] * 4, row[key]) for row in jsonl(result.metrics_path)], key
    assert [step for step, _ in logged["step/loss"]] == [3, 7]  # rank 0's reads, once each
    _, rows = csv_rows(tmp_path / "tiny" / "metrics.csv")
    assert [int(row["step"]) for row in rows] == [3, 4, 7, 8]


def test_a_tracking_server_that_cannot_be_reached_is_one_warning_and_the_run_finishes(tmp_path):
    require("mlflow")
    url = f"http://127.0.0.1:{distributed.free_port()}"  # nothing listens there
    with pytest.warns(RuntimeWarning) as caught:
        result = gpucore.train(dict(SMALL, epochs=1, loggers=["mlflow", "csv"], mlflow_tracking_uri=url,
                                    run_dir=str(tmp_path)))
    messages = [str(warning.message) for warning in caught if str(warning.message).startswith("logger '")]
    assert len(messages) == 1 and messages[0].startswith("logger 'mlflow' is off for the rest of this run: ")
    assert "127.0.0.1" in messages[0] and messages[0].endswith("training goes on")
    assert result.status == "completed" and len(result.history) == 1
    assert len(csv_rows(tmp_path / "tiny" / "metrics.csv")[1]) == 3  # steps 3, 6 and the epoch: the csv logger went on


def test_a_tracker_that_is_not_installed_is_one_warning_each(tmp_path, monkeypatch):
    for package in ("mlflow", "torch.utils.tensorboard"):  # importing them, or a module of theirs, raises ImportError
        for name in [package, *(name for name in sys.modules if name.startswith(f"{package}."))]:
            monkeypatch.setitem(sys.modules, name, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = gpucore.train(dict(SMALL, epochs=1, run_dir=str(tmp_path)))
    messages = sorted(str(warning.message) for warning in caught if str(warning.message).startswith("logger '"))
    assert [message.split(":")[0] for message in messages] == [
        "logger 'mlflow' is off for the rest of this run", "logger 'tensorboard' is off for the rest of this run"]
    assert "pip install 'gpucore[mlflow]'" in messages[0] and "pip install tensorboard" in messages[1]
    assert result.status == "completed" and os.path.isfile(tmp_path / "tiny" / "metrics.csv")
    assert not os.path.exists(tmp_path / "tiny" / "tensorboard")


def test_default_loggers_name_only_installed_packages(monkeypatch):
    import importlib.util

    import gpucore.config

    installed = importlib.util.find_spec("tensorboard") is not None
    assert gpucore.load_config(None).loggers == (["csv", "tensorboard"] if installed else ["csv"])
    # Where tensorboard is missing (the main job installs none), the default leaves it out: no warning in the run.
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(gpucore.config.importlib.util, "find_spec",
                        lambda name, *args: None if name == "tensorboard" else real_find_spec(name, *args))
    assert gpucore.load_config(None).loggers == ["csv"]
    assert gpucore.load_config({"loggers": ["csv", "tensorboard"]}).loggers == ["csv", "tensorboard"]


def test_loggers_are_checked_by_name():
    for bad in (["wandb"], ["csv", "csv"]):
        with pytest.raises(gpucore.ConfigError, match=r"config key 'loggers' is .*; it must be a list of csv, "
                                                      r"tensorboard, mlflow, each at most once"):
            gpucore.load_config({"loggers": bad})


def test_gpucore_runs_lists_the_runs_of_a_folder(straight, tmp_path, capsys):
    result, _ = straight
    stats = json.loads(open(result.stats_path).read())
    assert main(["runs", os.path.dirname(result.run_dir)]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["name", "status", "epochs", "best", "device", "time"]
    best, seconds = stats["best"], sum(row["epoch_time_s"] for row in stats["epochs"])
    assert re.split(r"\s{2,}", row) == ["tiny", "completed", "3/3", f"val_accuracy {best['metric']:.4f} (epoch "
                                         f"{best['epoch']})", "cpu", f"{round(seconds)}s"]
    assert main(["runs", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"no runs in '{tmp_path}' (none of its folders holds a training_stats.json)\n"
    assert main(["runs", result.run_dir]) == 0  # a run directory itself: its row
    assert capsys.readouterr().out.splitlines()[1] == row
    assert main(["runs", str(tmp_path / "missing")]) == 2
    assert "is not a folder" in capsys.readouterr().err
