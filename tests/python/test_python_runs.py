"""Runs trained from Python (gpucore.train(cfg, model=net, train_data=..., val_data=...)) record what they used,
not the config's defaults: the commands that read such a run back (predict, evaluate, report, gradcam) rebuild an
importable model, say what to pass for what they cannot rebuild, and never fall back to Fashion-MNIST or the
default model; a report is never replaced by a worse one."""
import csv
import json
import os
import textwrap

import numpy as np
import pytest
import torch
from torch import nn

import gpucore
from gpucore import cli
from gpucore.errors import ConfigError

pytestmark = pytest.mark.draws_report  # the runs' own report.html is what `gpucore report` must not make worse

MODULE = "pyruns_tiny_models"
MODEL_SOURCE = """
    from torch import nn


    class TinyNet(nn.Module):
        def __init__(self, num_classes=3):
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU())
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Linear(4, num_classes)

        def forward(self, x):
            return self.classifier(self.pool(self.features(x)).flatten(1))


    def tiny_net():
        return TinyNet()
"""
RUN = dict(epochs=1, batch_size=32, progress=False, device="cpu", seed=0)


def _tensors(count, seed):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 256, (count, 1, 12, 12), dtype=torch.uint8, generator=generator),
            torch.randint(0, 3, (count,), generator=generator))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A folder with the importable model module (put on sys.path), a .npz data set and a .npy of inputs."""
    folder = tmp_path_factory.mktemp("pyruns")
    (folder / f"{MODULE}.py").write_text(textwrap.dedent(MODEL_SOURCE))
    (x_train, y_train), (x_val, y_val) = _tensors(64, 1), _tensors(32, 2)
    np.savez(folder / "data.npz", x_train=x_train.numpy(), y_train=y_train.numpy(), x_val=x_val.numpy(),
             y_val=y_val.numpy())
    np.save(folder / "inputs.npy", _tensors(7, 3)[0].numpy())
    return folder


@pytest.fixture
def on_path(files, monkeypatch):
    monkeypatch.syspath_prepend(str(files))
    return files


def _train(run_dir, net=None, **overrides):
    return gpucore.train(dict(RUN, run_dir=str(run_dir), **overrides), model=net, train_data=_tensors(64, 1),
                         val_data=_tensors(32, 2))


@pytest.fixture(scope="module")
def importable_run(files, tmp_path_factory):
    import sys

    sys.path.insert(0, str(files))
    try:
        module = __import__(MODULE)
        return _train(tmp_path_factory.mktemp("importable"), module.TinyNet())
    finally:
        sys.path.remove(str(files))


def _cli(capsys, *args):
    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def _refused(code, out, err, *names):
    """Exit status 2 and one line on stderr, naming each of `names`; no traceback."""
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in out + err
    for name in names:
        assert name in err, err


def test_a_python_run_records_the_importable_model_and_python_data(importable_run):
    config = json.load(open(os.path.join(importable_run.run_dir, "config.json")))
    assert config["model"] == f"{MODULE}:TinyNet" and config["model_kwargs"] == {}
    assert config["data"] == "python:train_data"
    saved = torch.load(os.path.join(importable_run.checkpoint_dir, "best.pt"), weights_only=False)
    assert saved["config"]["model"] == f"{MODULE}:TinyNet" and saved["config"]["data"] == "python:train_data"
    # Unnamed, the run is named after the model it trained, not after config key model's default.
    assert os.path.basename(importable_run.run_dir) == "TinyNet" == config["name"]


def test_what_is_recorded_for_models_that_are_not_rebuilt_with_no_arguments(on_path):
    from gpucore.models.builtin import FashionMnistCNN
    from gpucore.models.registry import python_model_spec

    module = __import__(MODULE)

    class Local(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(2, 2)

    assert python_model_spec(module.TinyNet()) == (f"{MODULE}:TinyNet", {})
    # Importable, but TinyNet() has 3 outputs: not what was trained, unless model_kwargs say so.
    assert python_model_spec(module.TinyNet(num_classes=5)) == (f"python:{MODULE}.TinyNet", {})
    assert python_model_spec(module.TinyNet(num_classes=5), "fashion_mnist_cnn", {"num_classes": 5}) == (
        f"{MODULE}:TinyNet", {"num_classes": 5})
    # A built-in given as a module keeps the config's name where that builds it.
    assert python_model_spec(FashionMnistCNN(num_classes=4), "fashion_mnist_cnn", {"num_classes": 4}) == (
        "fashion_mnist_cnn", {"num_classes": 4})
    assert python_model_spec(FashionMnistCNN(num_classes=4), "fashion_mnist_cnn", {}) == (
        f"python:{FashionMnistCNN.__module__}.FashionMnistCNN", {})
    spec, kwargs = python_model_spec(Local())
    assert spec.startswith("python:") and spec.endswith("<locals>.Local") and kwargs == {}
    net = module.TinyNet()
    state = torch.random.get_rng_state()
    python_model_spec(net)
    assert torch.equal(state, torch.random.get_rng_state())  # checking it draws no random numbers of the run


def test_predict_on_an_importable_run_gives_the_models_own_predictions(importable_run, on_path, capsys, tmp_path):
    best = os.path.join(importable_run.checkpoint_dir, "best.pt")
    out = tmp_path / "predictions.csv"
    code, printed, err = _cli(capsys, "predict", best, on_path / "inputs.npy", "--out", out, "--top-k", "3",
                              "--device", "cpu")
    assert code == 0, err
    rows = list(csv.DictReader(open(out)))
    payload = torch.load(best, weights_only=False)
    net = __import__(MODULE).TinyNet()
    net.load_state_dict(payload["model"])
    stats = payload["input_stats"]
    x = torch.from_numpy(np.load(on_path / "inputs.npy")).float() / 255
    x = (x - torch.tensor(stats["mean"]).reshape(1, -1, 1, 1)) / torch.tensor(stats["std"]).reshape(1, -1, 1, 1)
    with torch.no_grad():
        probabilities = torch.softmax(net.eval()(x), 1)
    assert len(rows) == 7
    for row, expected in zip(rows, probabilities):
        assert int(row["index_1"]) == int(expected.argmax())
        assert float(row["probability_1"]) == pytest.approx(float(expected.max()), abs=1e-5)


@pytest.mark.usefixtures("figures_skipped")  # checks numbers, rows and files: no figure
def test_evaluate_an_importable_run_on_data_given_with_data(importable_run, on_path, capsys, tmp_path):
    best = os.path.join(importable_run.checkpoint_dir, "best.pt")
    code, out, err = _cli(capsys, "evaluate", best, "--data", on_path / "data.npz", "--out", tmp_path / "ev",
                          "--device", "cpu")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["samples"] == 96 and summary["data"] == str(on_path / "data.npz")  # all: x_train and x_val
    code, out, err = _cli(capsys, "evaluate", best, "--data", on_path / "data.npz", "--split", "test", "--out",
                          tmp_path / "test", "--device", "cpu")
    assert code == 0, err
    summary = json.loads(out)
    assert (summary["split"], summary["samples"]) == ("test", 32)  # x_val, its held-out split
    assert 0 <= summary["metrics"]["accuracy"] <= 1


def test_evaluate_of_python_data_without_data_says_to_pass_it(files, on_path, capsys, tmp_path):
    # The model named in the config (a package.module:factory), the data given in Python.
    run = _train(tmp_path / "runs", model=f"{MODULE}:TinyNet", report=False)
    config = json.load(open(os.path.join(run.run_dir, "config.json")))
    assert config["model"] == f"{MODULE}:TinyNet" and config["data"] == "python:train_data"
    code, out, err = _cli(capsys, "evaluate", os.path.join(run.checkpoint_dir, "best.pt"), "--out", tmp_path / "ev",
                          "--device", "cpu")
    _refused(code, out, err, "--data", "python:train_data")
    assert "fashion" not in (out + err).lower()
    assert not (tmp_path / "ev").exists()


def test_report_of_an_importable_run_keeps_a_better_report_and_draws_with_data(importable_run, on_path, capsys):
    report = os.path.join(importable_run.run_dir, "report.html")
    before = open(report, "rb").read()
    assert b'alt="confusion_matrix.png"' in before  # drawn at the end of training, from the data given
    code, out, err = _cli(capsys, "report", importable_run.run_dir, "--device", "cpu")
    _refused(code, out, err, "--data", "kept")
    assert open(report, "rb").read() == before
    code, out, err = _cli(capsys, "report", importable_run.run_dir, "--data", on_path / "data.npz", "--device", "cpu")
    assert code == 0, err
    assert open(report, "rb").read() == before  # the page of other data is written beside the run's own
    assert out.strip() == os.path.join(importable_run.run_dir, "report-data.html")
    page = open(out.strip(), encoding="utf-8").read()
    for figure in ("curves.png", "confusion_matrix.png", "val_predictions.png", "train_batch.png"):
        assert f'alt="{figure}"' in page
    assert "Not drawn" not in page
    assert not [name for name in os.listdir(importable_run.run_dir) if name.startswith(".report-")]


def test_a_model_that_cannot_be_imported_is_asked_for_never_rebuilt_as_the_default(on_path, capsys, tmp_path):
    class Net(nn.Module):  # defined here: no import path rebuilds it
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU())
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Linear(4, 3)

        def forward(self, x):
            return self.classifier(self.pool(self.features(x)).flatten(1))

    net = Net()
    run = _train(tmp_path / "runs", net)
    config = json.load(open(os.path.join(run.run_dir, "config.json")))
    assert config["model"].startswith("python:") and config["model"].endswith("<locals>.Net")
    assert config["data"] == "python:train_data"
    best = os.path.join(run.checkpoint_dir, "best.pt")
    report = os.path.join(run.run_dir, "report.html")
    before = open(report, "rb").read()
    inputs = on_path / "inputs.npy"
    commands = [("predict", best, inputs, "--out", tmp_path / "p.csv"),
                ("evaluate", best, "--data", on_path / "data.npz", "--out", tmp_path / "ev"),
                ("report", run.run_dir), ("report", run.run_dir, "--data", on_path / "data.npz"),
                ("gradcam", "--checkpoint", best, "--images", inputs, "--out", tmp_path / "cam")]
    for command in commands:
        code, out, err = _cli(capsys, *command, "--device", "cpu")
        _refused(code, out, err, "--model", "model=", "Net")
        assert "FashionMnistCNN" not in err and "does not fit" not in err
    assert open(report, "rb").read() == before
    assert not (tmp_path / "p.csv").exists() and not (tmp_path / "cam").exists()

    # What the message says to pass works: the model itself in Python, or a factory that builds it by name.
    loaded = gpucore.load(best, device="cpu", model=net)
    x = torch.from_numpy(np.load(inputs))
    assert loaded(x).shape == (7, 3)
    code, out, err = _cli(capsys, "predict", best, inputs, "--out", tmp_path / "p.csv", "--device", "cpu",
                          "--model", f"{MODULE}:tiny_net")
    assert code == 0, err
    rows = list(csv.DictReader(open(tmp_path / "p.csv")))
    assert [int(r["index_1"]) for r in rows] == loaded(x).argmax(1).tolist()


def test_weights_that_do_not_fit_the_model_are_named_in_full(importable_run):
    best = os.path.join(importable_run.checkpoint_dir, "best.pt")
    with pytest.raises(ConfigError) as error:
        gpucore.load(best, device="cpu", model=nn.Sequential(nn.Linear(4, 3)))
    message = str(error.value)
    assert "\n" not in message and not message.rstrip().endswith(":")
    assert "missing keys: 0.weight, 0.bias" in message
    assert "unexpected keys: features.0.weight" in message
