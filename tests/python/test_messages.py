"""Messages that say what was given and what to do (issue 46, items 4 and 5): bad inputs end with exit 2 and one
line naming the bad thing and what is valid, never a traceback; no silently wrong results."""
import os
import pathlib
import sys

import numpy as np
import pytest
import torch

import gpucore
from gpucore.data.synthetic import synthetic_fashion
from gpucore.data.png import encode_png
import forked_python
from conftest import gpucore_command, run_copy

ROOT = pathlib.Path(__file__).resolve().parents[2]
PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(gpucore.__file__)))  # the gpucore under test
KWARGS = {"train_size": 128, "val_size": 32, "seed": 1}


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHON_DIR + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _refused(result, *texts):
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    for text in texts:
        assert text in result.stderr, result.stderr


@pytest.fixture
def run(fashion_run):
    """The session's finished run of the synthetic Fashion set (read-only): its run directory and last checkpoint."""
    return pathlib.Path(fashion_run.run_dir), pathlib.Path(fashion_run.checkpoint_dir) / "last.pt"


# --- item 4: wrong results, silently ------------------------------------------------------------------------------

def test_float_images_in_0_255_are_refused_by_predict(run, tmp_path, capsys):
    _, checkpoint = run
    _, (x_val, _) = synthetic_fashion(**KWARGS)
    np.save(tmp_path / "raw.npy", x_val.float().numpy())          # 0..255 as floats: taken as [0, 1] before
    np.save(tmp_path / "scaled.npy", (x_val.float() / 255).numpy())
    with pytest.raises(gpucore.ConfigError, match=r"raw.npy' holds torch.float32 values from 0 to 255; .* takes uint8 "
                                                  r"images \(0..255\) or floats in \[0, 1\].*divide them by 255"):
        gpucore.predict(checkpoint, tmp_path / "raw.npy", device="cpu")
    with pytest.raises(gpucore.ConfigError, match=r"inputs \(a tensor\) holds torch.float32 values from 0 to 255"):
        gpucore.predict(checkpoint, x_val.float(), device="cpu")
    scaled = gpucore.predict(checkpoint, tmp_path / "scaled.npy", device="cpu")
    as_uint8 = gpucore.predict(checkpoint, x_val, device="cpu")
    assert torch.equal(scaled.predicted, as_uint8.predicted)

    result = gpucore_command(capsys, "predict", checkpoint, tmp_path / "raw.npy", "--out", tmp_path / "p.csv",
                             "--device", "cpu")
    _refused(result, "raw.npy' holds torch.float32 values from 0 to 255", "uint8 images (0..255) or floats in [0, 1]")
    assert not (tmp_path / "p.csv").exists()


def test_a_segmentation_folder_is_refused_for_a_classifier_not_read_as_two_classes(run, tmp_path, capsys):
    for sub in ("images", "masks"):
        (tmp_path / "seg" / sub).mkdir(parents=True)
        for index in range(4):
            (tmp_path / "seg" / sub / f"{index}.png").write_bytes(encode_png(torch.zeros(8, 8, dtype=torch.uint8)))
    with pytest.raises(gpucore.ConfigError, match=r"seg' holds images and their masks \(segmentation\), but loss "
                                                  r"'cross_entropy' \(classification\) does not train on masks"):
        gpucore.train(run_dir=str(tmp_path / "out"), epochs=1, progress=False, device="cpu", data=str(tmp_path / "seg"))
    _, checkpoint = run
    result = gpucore_command(capsys, "evaluate", checkpoint, "--data", tmp_path / "seg", "--out", tmp_path / "ev",
                             "--device", "cpu")
    _refused(result, "holds images and their masks (segmentation)", "set loss: dice_bce")


# --- item 5: messages ---------------------------------------------------------------------------------------------

def test_a_folder_or_a_config_as_checkpoint_says_what_a_checkpoint_is(run, capsys):
    run_dir, checkpoint = run
    result = gpucore_command(capsys, "predict", run_dir, run_dir / "config.json", "--device", "cpu")
    _refused(result, f"checkpoint '{run_dir}' is a folder, not a checkpoint file; give one of its checkpoints:",
             str(run_dir / "checkpoints" / "best.pt"))
    result = gpucore_command(capsys, "predict", run_dir / "config.json", "x.npy", "--device", "cpu")
    _refused(result, "config.json' cannot be read: it is not a file torch.save wrote",
             "a checkpoint is a .pt file a gpucore run wrote, e.g. RUN_DIR/checkpoints/best.pt")
    assert "Please file an issue" not in result.stderr and "weights_only" not in result.stderr
    with pytest.raises(gpucore.ConfigError, match="does not exist; a checkpoint is a .pt file"):
        gpucore.load(run_dir / "missing.pt", "cpu")


def test_ctrl_c_during_report_ends_in_one_line_and_leaves_plots(fashion_run, tmp_path, monkeypatch, capsys):
    from gpucore import cli
    from gpucore.report import plots

    run_dir = run_copy(fashion_run, tmp_path)
    before = {p.name: p.read_bytes() for p in (run_dir / "plots").iterdir()}
    assert before  # the report written at the end of training

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(plots, "confusion_matrix", interrupted, raising=True)
    assert cli.main(["report", str(run_dir), "--device", "cpu"]) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "report interrupted; report.html and plots/" in err and "Traceback" not in err
    assert {p.name: p.read_bytes() for p in (run_dir / "plots").iterdir()} == before
    assert not [p for p in run_dir.iterdir() if p.name.startswith(".plots")]
    monkeypatch.undo()
    assert cli.main(["report", str(run_dir), "--device", "cpu"]) == 0  # and the next report replaces plots/
    assert sorted(p.name for p in (run_dir / "plots").iterdir()) == sorted(before)


def test_transforms_that_change_the_image_size_are_named(tmp_path):
    with pytest.raises(gpucore.TrainingError) as error:
        gpucore.train(run_dir=str(tmp_path), epochs=1, progress=False, device="cpu", data="synthetic_fashion",
                      data_kwargs=KWARGS, transforms=[{"RandomCrop": {"size": 24}}])
    message = str(error.value)
    assert "config key transforms turns the 28 x 28 images into 24 x 24" in message
    assert "(config keys model, model_kwargs, data, data_kwargs, transforms)" in message


def test_a_misspelt_transform_gets_the_closest_name():
    with pytest.raises(gpucore.ConfigError, match=r"transforms\[0\] RandomResizeCrop: unknown transform; supported: "
                                                  r".*Did you mean 'RandomResizedCrop'\?"):
        gpucore.load_config(None, {"transforms": [{"RandomResizeCrop": {"size": 24}}]})


def test_csv_errors_name_the_file_and_line(tmp_path):
    (tmp_path / "a.png").write_bytes(encode_png(torch.zeros(4, 4, dtype=torch.uint8)))
    (tmp_path / "b.png").write_bytes(encode_png(torch.zeros(4, 4, dtype=torch.uint8)))
    cases = {"label.csv": ("image,label\na.png,0\nb.png,cat\n", r"label.csv': 'label' mixes class names \('cat', line "
                                                                 r"3\) and integer class ids \(0, line 2\)"),
             "file.csv": ("image,label\na.png,0\nc.png,1\n", r"file.csv' line 3: image 'c.png' does not exist"),
             "short.csv": ("image,label\na.png,0\nb.png,1\na.png\n",
                           r"short.csv' line 4 has 1 of the header's 2 columns")}
    for name, (text, message) in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(gpucore.ConfigError, match=message):
            gpucore.data.read_csv(str(tmp_path / name), channels=1)
    gpucore.data.read_csv(str(tmp_path / "file.csv"), channels=1, on_error="skip")  # the reader skips it


def test_run_training_example_help_has_no_traceback():
    script = ROOT / "examples" / "classifier_gradcam" / "scripts" / "run_training.py"
    result = forked_python.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=300,
                               env=_env())
    assert result.returncode == 0 and "KEY=VALUE" in result.stdout and "Traceback" not in result.stderr
    result = forked_python.run([sys.executable, str(script), "epochs"], capture_output=True, text=True, timeout=300,
                               env=_env())
    assert result.returncode == 2 and "got 'epochs'" in result.stderr and "Traceback" not in result.stderr


def test_the_console_script_imports_a_model_from_the_current_folder(tmp_path):
    """The `gpucore` console script has its own folder first on sys.path, not the current one (python -m has it)."""
    (tmp_path / "mymodule.py").write_text("from torch import nn\n\ndef factory(num_classes=10):\n"
                                          "    return nn.Sequential(nn.Flatten(), nn.Linear(784, num_classes))\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # the console script as pip writes it
    (bin_dir / "gpucore").write_text("import sys\nfrom gpucore.cli import command\nsys.exit(command())\n")
    args = ["train", "--set", "model=mymodule:factory", "--set", "data=synthetic_fashion", "--set", "epochs=1",
            "--set", "device=cpu", "--set", "progress=false", "--set", f"run_dir={tmp_path / 'run'}",
            "--set", 'data_kwargs={"train_size": 64, "val_size": 16}', "--set", "report=false"]
    result = forked_python.run([sys.executable, str(bin_dir / "gpucore"), *args], capture_output=True, text=True,
                               timeout=600, cwd=tmp_path, env=_env())
    assert result.returncode == 0, result.stderr
    assert '"status": "completed"' in result.stdout
