"""Nothing secret leaves in a run's files, and a run stays inside its run_dir: credentials in URIs are masked in
everything gpucore writes or prints (redact.py), the real value is used only to connect or build, a masked value read
back is never used; config key name is one folder name, refused otherwise before anything is created."""
import importlib.util
import json
import os
import pathlib

import pytest
import torch
from torch import nn

import gpucore
from gpucore import redact
from gpucore.cli import main
from gpucore.config import load_config, with_real_values
from gpucore.errors import ConfigError
from gpucore.models.registry import build_model
from gpucore.training.run_dir import check_resume_keeps_the_run

from conftest import require

# ---- redact.masked --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("https://alice:TOKEN@mlflow.example.com", "https://***@mlflow.example.com"),
    ("https://ghp_TOKEN@github.com/org/repo.git", "https://***@github.com/org/repo.git"),
    ("postgresql://user:p@ss@db:5432/mlflow", "postgresql://***@db:5432/mlflow"),
    ("sqlite:////runs/mlflow.db?token=T&mode=ro", "sqlite:////runs/mlflow.db?token=***&mode=ro"),
    ("https://b.blob.core.windows.net/c/w.pt?sv=2024&sig=S&se=2026", "https://b.blob.core.windows.net/c/w.pt?sv=2024&sig=***&se=2026"),
    ("https://s3.amazonaws.com/b/k?X-Amz-Credential=C&X-Amz-Signature=S&X-Amz-Security-Token=T&X-Amz-Date=1",
     "https://s3.amazonaws.com/b/k?X-Amz-Credential=***&X-Amz-Signature=***&X-Amz-Security-Token=***&X-Amz-Date=1"),
    ("https://h/p?api_key=K&apiKey=K&access_token=A&client_secret=S&password=P&page=2",
     "https://h/p?api_key=***&apiKey=***&access_token=***&client_secret=***&password=***&page=2"),
    ("https://h/callback#access_token=A&state=1", "https://h/callback#access_token=***&state=1"),
    ("checkpoint 'https://u:P@h/w.pt' does not exist", "checkpoint 'https://***@h/w.pt' does not exist"),
    ("/data/runs/best.pt", "/data/runs/best.pt"),
    ("package.module:factory", "package.module:factory"),
    ("https://h/p?monkey=1&keys=2", "https://h/p?monkey=1&keys=2"),
])
def test_masked_hides_userinfo_and_secret_parameters_and_keeps_the_rest(text, expected):
    assert redact.masked(text) == expected
    assert redact.masked(expected) == expected  # masking twice changes nothing
    assert redact.holds_mask(expected) == (expected != text)
    assert not redact.holds_mask(text)


def test_masked_values_masks_nested_strings_and_returns_what_it_did_not_change():
    state = nn.BatchNorm2d(2).state_dict()  # an OrderedDict with _metadata, which load_state_dict reads
    values = {"model": state, "config": {"uri": "https://u:P@h", "lr": 0.1, "list": ["x", "https://h?token=T"]}}
    result = redact.masked_values(values)
    assert result["model"] is state and result["model"]._metadata == state._metadata
    assert result["config"] == {"uri": "https://***@h", "lr": 0.1, "list": ["x", "https://h?token=***"]}
    assert values["config"]["uri"] == "https://u:P@h"  # the given object is left as it was
    unchanged = {"a": ["b", 1], "c": {"d": "e"}}
    assert redact.masked_values(unchanged) is unchanged


# ---- a run stays inside its run_dir ---------------------------------------------------------------------------------

BAD_NAMES = ["../../escaped_run", "a/b", "a\\b", "..", ".", "x\0y", "/tmp/absolute"]
NAME_ERROR = "config key 'name' is {!r}; it must be one folder name: not empty, not . or .., without / \\ or NUL"


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_run_name_that_is_not_one_folder_is_refused_before_anything_is_created(tmp_path, capsys, name):
    run_dir = tmp_path / "nested" / "runs"
    small = dict(data="synthetic_fashion", device="cpu", epochs=1, run_dir=str(run_dir), name=name, progress=False)
    with pytest.raises(ConfigError) as raised:
        gpucore.train(small)
    assert str(raised.value).startswith("config: " + NAME_ERROR.format(name))
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps(small))
    with pytest.raises(ConfigError) as raised:
        load_config(str(config_file))
    assert str(raised.value).startswith(f"config file '{config_file}': " + NAME_ERROR.format(name))
    assert main(["train", str(config_file), "--set", "run_dir=" + str(run_dir)]) == 2
    assert main(["train", "--set", f"name={name}", "--set", "data=synthetic_fashion", "--set", f"run_dir={run_dir}"]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert [line.startswith("gpucore: error: ") and NAME_ERROR.format(name) in line for line in errors] == [True, True]
    assert sorted(os.listdir(tmp_path)) == ["config.json"]  # no run_dir, no run anywhere


def test_names_made_from_a_model_name_are_one_folder():
    assert load_config(None, {"model": "timm:hf-hub:org/vit"}).name == "timm_hf-hub_org_vit"
    assert load_config(None, {"name": "resnet18-lr3e-4"}).name == "resnet18-lr3e-4"


# ---- nothing secret in a run's files --------------------------------------------------------------------------------

MLFLOW_TOKEN = "mlflow-token-5f1c2e9a"
WEIGHTS_USER, WEIGHTS_PASSWORD = "gpucore-test-user", "weights-password-7b3d"
SECRETS = (MLFLOW_TOKEN, WEIGHTS_USER, WEIGHTS_PASSWORD)
WEIGHTS_URL = f"https://{WEIGHTS_USER}:{WEIGHTS_PASSWORD}@hub.example.com/weights.pt?api_key={MLFLOW_TOKEN}"
WEIGHTS_URL_MASKED = "https://***@hub.example.com/weights.pt?api_key=***"
URLS_BUILT_WITH = []


def model_from_url(weights_url, num_classes=10, in_channels=1):
    """A model whose factory takes a URL with credentials (as one fetching its weights would): records what it got."""
    URLS_BUILT_WITH.append(weights_url)
    return nn.Sequential(nn.Conv2d(in_channels, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(4, num_classes))


def strings_in(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from strings_in(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from strings_in(item)


def assert_no_secret_in(folder: pathlib.Path) -> list:
    """Every byte of every file under `folder`, checkpoints also unpickled: no secret. Returns the files read."""
    files = sorted(path for path in folder.rglob("*") if path.is_file())
    for path in files:
        data = path.read_bytes()
        for secret in SECRETS:
            assert secret.encode() not in data, f"{secret} in {path}"
        if path.suffix == ".pt":
            payload = torch.load(path, weights_only=True)
            leaked = [text for text in strings_in(payload) if any(secret in text for secret in SECRETS)]
            assert leaked == [], path
    return files


@pytest.mark.draws_report
@pytest.mark.slow  # trains, resumes, evaluates, exports: about a minute
def test_no_secret_in_the_run_directory_or_the_console_and_the_real_values_connect(tmp_path, monkeypatch, capfd):
    mlflow = require("mlflow.tracking")
    connected = []

    class RecordingClient(mlflow.MlflowClient):
        def __init__(self, tracking_uri=None, *args, **kwargs):
            connected.append(tracking_uri)
            super().__init__(tracking_uri, *args, **kwargs)

    monkeypatch.setattr(mlflow, "MlflowClient", RecordingClient)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    URLS_BUILT_WITH.clear()
    store = tmp_path / "store"
    store.mkdir()
    tracking_uri = f"sqlite:///{store}/mlflow.db?token={MLFLOW_TOKEN}"
    tracking_uri_masked = f"sqlite:///{store}/mlflow.db?token=***"
    loggers = ["csv", "mlflow"] + (["tensorboard"] if importlib.util.find_spec("tensorboard") else [])
    run_dir = tmp_path / "runs" / "secret"
    settings = {"model": f"{__name__}:model_from_url", "model_kwargs.weights_url": WEIGHTS_URL,
                "mlflow_tracking_uri": tracking_uri, "loggers": json.dumps(loggers), "data": "synthetic_fashion",
                "data_kwargs": "{train_size: 64, val_size: 32}", "batch_size": "32", "epochs": "1",
                "schedule": "constant", "device": "cpu", "precision": "32", "progress": "false",
                "run_dir": str(tmp_path / "runs"), "name": "secret", "mlflow_log_model": "true", "report": "false"}
    assert main(["train"] + [f"--set={key}={value}" for key, value in settings.items()]) == 0

    # A resume from config.json, which holds the masked values: each must be given again, or it is an error naming it.
    resume = ["train", "--resume", str(run_dir), "--set", "epochs=2", "--set", "report=true"]  # draws report.html
    assert main(resume) == 2
    assert f"gpucore: error: config key 'model_kwargs' is {{'weights_url': '{WEIGHTS_URL_MASKED}'" in capfd.readouterr().err
    resume += ["--set", f"model_kwargs.weights_url={WEIGHTS_URL}"]
    assert main(resume) == 2
    assert (f"gpucore: error: config key 'mlflow_tracking_uri' is '{tracking_uri_masked}', as a run's files record "
            "it: its credentials were masked") in capfd.readouterr().err
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_uri)  # MLflow's own variable gives the real value
    assert main(resume) == 0
    monkeypatch.delenv("MLFLOW_TRACKING_URI")

    best = str(run_dir / "checkpoints" / "best.pt")
    with pytest.raises(ConfigError, match="config key 'model_kwargs' is .*masked"):
        gpucore.load(best)  # the checkpoint's model_kwargs are masked: never built with them
    model = model_from_url(WEIGHTS_URL)
    evaluation = gpucore.evaluate(best, model=model, device="cpu", out=str(run_dir / "evaluate-val"))
    export_format = "onnx" if all(importlib.util.find_spec(name) for name in ("onnx", "onnxruntime")) else "safetensors"
    exported = gpucore.export(gpucore.load(best, "cpu", model), export_format,
                              str(run_dir / "export" / f"best.{export_format}"))
    console = capfd.readouterr()

    assert connected and set(connected) == {tracking_uri}  # every MLflow client connected with the real URI
    assert URLS_BUILT_WITH and set(URLS_BUILT_WITH) == {WEIGHTS_URL}
    config = json.loads((run_dir / "config.json").read_text())
    assert (config["mlflow_tracking_uri"], config["model_kwargs"]["weights_url"]) == (tracking_uri_masked,
                                                                                     WEIGHTS_URL_MASKED)
    stats = json.loads((run_dir / "training_stats.json").read_text())
    assert stats["config"]["mlflow_tracking_uri"] == tracking_uri_masked and len(stats["epochs"]) == 2
    last = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert last["config"]["model_kwargs"]["weights_url"] == WEIGHTS_URL_MASKED
    assert last["callbacks"]["logger:mlflow"]["tracking_uri"] == tracking_uri_masked
    assert json.loads((run_dir / "mlflow_run.json").read_text())["tracking_uri"] == tracking_uri_masked
    assert WEIGHTS_URL_MASKED in (run_dir / "report.html").read_text(encoding="utf-8")
    assert json.loads(pathlib.Path(exported["preprocessing"]).read_text())["model_kwargs"]["weights_url"] == \
        WEIGHTS_URL_MASKED
    assert evaluation["samples"] == 32

    client = mlflow.MlflowClient(tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name("secret").experiment_id])
    assert [len(client.get_metric_history(run.info.run_id, "val_accuracy")) for run in runs] == [2]  # one run, resumed
    assert runs[0].data.params["mlflow_tracking_uri"] == tracking_uri_masked
    assert runs[0].data.params["model_kwargs.weights_url"] == WEIGHTS_URL_MASKED

    files = {path.relative_to(tmp_path).as_posix() for path in assert_no_secret_in(tmp_path)}
    expected = {"runs/secret/" + name for name in ("config.json", "training_stats.json", "metrics.jsonl", "metrics.csv",
                                                   "report.html", "per_class.json", "mlflow_run.json",
                                                   "checkpoints/best.pt", "checkpoints/last.pt",
                                                   "evaluate-val/evaluation.json", f"export/best.{export_format}",
                                                   f"export/best.{export_format}.json")}
    assert expected <= files
    assert ("tensorboard" not in loggers) or any(name.startswith("runs/secret/tensorboard/events") for name in files)
    assert any(name.startswith("store/mlartifacts/") for name in files)  # MLflow's copies of the run's files
    for secret in SECRETS:
        assert secret not in console.out and secret not in console.err


# ---- a masked value read back is never used -------------------------------------------------------------------------

def test_a_masked_value_is_refused_naming_its_key_unless_nothing_uses_it(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    recorded = {"mlflow_tracking_uri": "https://***@mlflow.example.com", "loggers": ["csv"]}
    assert with_real_values(load_config(recorded)).mlflow_tracking_uri == "https://***@mlflow.example.com"  # unused
    logging = dict(recorded, loggers=["csv", "mlflow"])
    with pytest.raises(ConfigError) as raised:
        with_real_values(load_config(logging))
    assert str(raised.value) == (
        "config key 'mlflow_tracking_uri' is 'https://***@mlflow.example.com', as a run's files record it: its "
        "credentials were masked (***), and gpucore never connects or builds with a masked value. Give the real "
        "value: --set mlflow_tracking_uri=... or in the config, or $MLFLOW_TRACKING_URI")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://other:T@elsewhere.example.com")  # not this URI: still refused
    with pytest.raises(ConfigError, match="config key 'mlflow_tracking_uri'"):
        with_real_values(load_config(logging))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://alice:T@mlflow.example.com")
    assert with_real_values(load_config(logging)).mlflow_tracking_uri == "https://alice:T@mlflow.example.com"
    with pytest.raises(ConfigError, match=r"--set model_kwargs\.source\.url=\.\.\. or in the config$"):
        with_real_values(load_config({"model_kwargs": {"depth": 2, "source": {"url": "https://h/w?sig=***"}}}))
    with pytest.raises(ConfigError, match=r"^config key 'model_kwargs' is \{'url': 'https://\*\*\*@h'\}.* give "
                                          r"gpucore\.load the model"):
        build_model("fashion_mnist_cnn", {"url": "https://***@h"})


def test_a_resume_compares_values_as_recorded_and_says_them_masked():
    own = {"mlflow_tracking_uri": "https://***@mlflow.example.com", "lr": 0.1}
    same = {"mlflow_tracking_uri": "https://alice:NEW-TOKEN@mlflow.example.com", "lr": 0.1}
    check_resume_keeps_the_run(own, same, "resume: auto", "checkpoint 'last.pt'", "pretrained: last.pt")  # goes on
    elsewhere = dict(same, mlflow_tracking_uri="https://alice:NEW-TOKEN@other.example.com")
    with pytest.raises(ConfigError) as raised:
        check_resume_keeps_the_run(own, elsewhere, "resume: auto", "checkpoint 'last.pt'", "pretrained: last.pt")
    assert str(raised.value).startswith(
        "config key 'mlflow_tracking_uri': resume: auto goes on with the run's own mlflow_tracking_uri "
        "('https://***@mlflow.example.com' in checkpoint 'last.pt'), not 'https://***@other.example.com'; ")
