"""gpucore.predict / gpucore predict and gpucore.export / gpucore export, on a run trained here."""
import csv
import json
import os
import re
import stat
import sys

import numpy as np
import pytest
import torch
from torch import nn

import gpucore
from gpucore.data.builtin import CLASS_NAMES
from gpucore.data.synthetic import synthetic_captcha, synthetic_fashion
from gpucore.config import load_config
from gpucore.evaluation.load import LoadedModel
from gpucore.models import build_model
from gpucore.data.png import encode_png
from conftest import CAPTCHA_KWARGS, FASHION_KWARGS, gpucore_command, require

pytestmark = pytest.mark.slow  # runs gpucore commands and exports with onnx, seconds each

@pytest.fixture
def run(fashion_run, tmp_path):
    """The session's finished run on the synthetic Fashion set (float32, so validation and load() compute alike):
    a folder of this test's own, its last checkpoint, last val_accuracy and validation images and labels."""
    _, (x_val, y_val) = synthetic_fashion(**FASHION_KWARGS)
    return (tmp_path, f"{fashion_run.checkpoint_dir}/last.pt", fashion_run.history[-1]["val_accuracy"], x_val,
            y_val)


@pytest.mark.usefixtures("figures_skipped")  # checks numbers, rows and files: no figure
def test_predict_on_the_validation_images_gives_the_runs_accuracy(run, capsys):
    folder, checkpoint, val_accuracy, x_val, y_val = run
    np.save(folder / "val.npy", x_val[:, 0].numpy())          # N x H x W uint8, as an array
    classes = CLASS_NAMES["synthetic_fashion"]
    for index, (image, label) in enumerate(zip(x_val, y_val.tolist())):  # and as PNG files in class subfolders
        (folder / "val" / classes[label]).mkdir(parents=True, exist_ok=True)
        (folder / "val" / classes[label] / f"{index:04d}.png").write_bytes(encode_png(image[0]))

    from_array = gpucore.predict(checkpoint, folder / "val.npy", top_k=3, device="cpu")
    accuracy = (from_array.predicted == y_val).float().mean().item()
    assert accuracy == pytest.approx(val_accuracy, abs=1 / 200)  # what the engine reported (a near tie may flip)
    evaluated = gpucore.evaluate(checkpoint, device="cpu", out=str(folder / "evaluate"))["metrics"]["accuracy"]
    assert accuracy == pytest.approx(evaluated, abs=1 / 200)     # and what gpucore evaluate reports
    # the loaded model's own outputs in plain PyTorch: the same predictions, one by one
    probabilities = torch.softmax(gpucore.load(checkpoint, "cpu")(x_val), 1)
    assert torch.equal(from_array.predicted, probabilities.argmax(1))
    assert accuracy > 0.25, accuracy  # chance is 0.1; this seeded run reaches 0.37 (an untrained model fails)
    # top-k: the softmax of the loaded model's outputs, in order, with the class names
    top = probabilities.topk(3, 1)
    row = from_array.rows[7]
    assert row["input"] == "7" and [row[f"index_{k}"] for k in (1, 2, 3)] == top.indices[7].tolist()
    assert [row[f"class_{k}"] for k in (1, 2, 3)] == [classes[i] for i in top.indices[7].tolist()]
    assert [row[f"probability_{k}"] for k in (1, 2, 3)] == pytest.approx(top.values[7].tolist(), abs=1e-6)

    # The PNG folder through the command line: same images, same predictions; labels from the subfolders.
    out = folder / "predictions.csv"
    result = gpucore_command(capsys, "predict", checkpoint, str(folder / "val"), "--out", str(out), "--top-k", "3",
                             "--device", "cpu")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["inputs"] == 200 and summary["accuracy"] == pytest.approx(accuracy)
    with open(out, newline="") as handle:
        rows = list(csv.DictReader(handle))
    index = {int(r["input"].split("/")[1][:4]): r for r in rows}
    assert sorted(index) == list(range(200))
    assert [int(index[i]["index_1"]) for i in range(200)] == from_array.predicted.tolist()
    assert all(index[i]["label"] == classes[y_val[i]] for i in range(200))
    assert list(rows[0])[:5] == ["input", "label", "class_1", "index_1", "probability_1"]


@pytest.mark.usefixtures("figures_skipped")  # checks numbers and rows: no figure
def test_evaluate_takes_a_loaded_model_as_predict_and_export_do(run, tmp_path):
    """gpucore.evaluate of a gpucore.load result scores as evaluate of its checkpoint's path: the same metrics and per
    class rows; a value that is neither is a ConfigError naming what each entry point takes."""
    _, checkpoint, _, x_val, y_val = run
    loaded = gpucore.load(checkpoint, "cpu")
    from_path = gpucore.evaluate(checkpoint, device="cpu", out=str(tmp_path / "path"))
    from_loaded = gpucore.evaluate(loaded, out=str(tmp_path / "loaded"))
    assert from_loaded["metrics"] == from_path["metrics"] and from_loaded["per_class"] == from_path["per_class"]
    assert {key: from_loaded[key] for key in ("checkpoint", "data", "split", "samples", "scored")} == \
        {key: from_path[key] for key in ("checkpoint", "data", "split", "samples", "scored")}
    assert (from_loaded["split"], from_loaded["samples"]) == ("val", 200)  # the run's validation set
    right = (loaded(x_val).argmax(1) == y_val).float().mean().item()  # by hand, from the loaded model's outputs
    assert from_loaded["metrics"]["accuracy"] == pytest.approx(right, abs=1 / 200)  # a near tie may flip
    with open(tmp_path / "loaded" / "evaluation.json") as handle:
        assert json.load(handle)["metrics"] == from_path["metrics"]

    with pytest.raises(gpucore.ConfigError, match=r"gpucore.evaluate's checkpoint is a gpucore.load result, which "
                                                  r"holds its model already: model is for a checkpoint path"):
        gpucore.evaluate(loaded, model=loaded.module, out=str(tmp_path / "model"))
    refused = ((gpucore.evaluate, "gpucore.evaluate's checkpoint must be a checkpoint file's or run directory's path "
                                  "(str or os.PathLike) or a gpucore.load result (LoadedModel)", ()),
               (gpucore.predict, "gpucore.predict's checkpoint must be a checkpoint file's path (str or os.PathLike) "
                                 "or a gpucore.load result (LoadedModel)", (x_val,)),
               (gpucore.export, "gpucore.export's checkpoint must be a checkpoint file's path (str or os.PathLike) or "
                                "a gpucore.load result (LoadedModel)", ("safetensors",)))
    for entry, message, rest in refused:
        with pytest.raises(gpucore.ConfigError, match=re.escape(message + ", got FashionMnistCNN") + "$"):
            entry(loaded.module, *rest)
    with pytest.raises(gpucore.ConfigError, match=re.escape("gpucore.load's checkpoint must be a checkpoint file's "
                                                            "path (str or os.PathLike), got LoadedModel (a "
                                                            "gpucore.load result)") + "$"):
        gpucore.load(loaded)
    with pytest.raises(gpucore.ConfigError, match=re.escape("write_report's run_dir must be a run directory's path "
                                                            "(str or os.PathLike), got LoadedModel")):
        gpucore.write_report(loaded)


def test_predict_reads_idx_and_resizes_image_files_to_the_models_size(run, tmp_path):
    _, checkpoint, _, x_val, _ = run
    loaded = gpucore.load(checkpoint, "cpu")
    header = np.array([0, 0, 8, 3], np.uint8).tobytes() + np.array([20, 28, 28], ">i4").tobytes()
    (tmp_path / "t10k-images-idx3-ubyte").write_bytes(header + x_val[:20, 0].numpy().tobytes())
    from_idx = gpucore.predict(loaded, tmp_path / "t10k-images-idx3-ubyte")
    assert torch.equal(from_idx.outputs, loaded(x_val[:20]))
    # a 56 x 56 file is read at the checkpoint's 28 x 28, as the training reader resizes
    big = torch.nn.functional.interpolate(x_val[:1].float(), size=(56, 56), mode="nearest").to(torch.uint8)
    (tmp_path / "big.png").write_bytes(encode_png(big[0, 0]))
    resized = gpucore.data.read_files([str(tmp_path / "big.png")], [0], channels=1, size=(28, 28)).inputs
    assert torch.equal(gpucore.predict(loaded, tmp_path / "big.png").outputs, loaded(resized))


def test_predict_errors_name_the_bad_input(run, tmp_path, capsys):
    _, checkpoint, _, x_val, _ = run
    loaded = gpucore.load(checkpoint, "cpu")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(gpucore.ConfigError, match=r"notes.txt': unknown format; expected a folder"):
        gpucore.predict(loaded, tmp_path / "notes.txt")
    np.save(tmp_path / "rgb.npy", np.zeros((2, 3, 28, 28), np.uint8))
    with pytest.raises(gpucore.ConfigError, match=r"rgb.npy' holds an array of shape \(2, 3, 28, 28\); expected images "
                                                  r"of 1 channel\(s\) and 28 x 28"):
        gpucore.predict(loaded, tmp_path / "rgb.npy")
    with pytest.raises(gpucore.ConfigError, match="does not exist"):
        gpucore.predict(loaded, tmp_path / "missing")
    (tmp_path / "pictures").mkdir()
    (tmp_path / "pictures" / "a.png").write_bytes(encode_png(x_val[0, 0]))
    (tmp_path / "pictures" / "broken.png").write_bytes(encode_png(x_val[1, 0])[:60])
    result = gpucore_command(capsys, "predict", checkpoint, str(tmp_path / "pictures"), "--out",
                             str(tmp_path / "p.csv"))
    assert result.returncode == 2 and "broken.png" in result.stderr


def test_predict_decodes_captcha_text_and_writes_segmentation_masks(captcha_run, tmp_path):
    _, (x_val, _) = synthetic_captcha(**CAPTCHA_KWARGS)
    captcha = gpucore.predict(f"{captcha_run.checkpoint_dir}/last.pt", x_val, device="cpu")
    per_head = captcha.outputs.reshape(len(x_val), 4, -1).argmax(-1)
    expected = ["".join("0123456789abcdefghijklmnopqrstuvwxyz"[i] for i in row) for row in per_head.tolist()]
    assert [row["text"] for row in captcha.rows] == expected

    # segmentation: a one-channel model whose logit is the centred pixel value
    model = nn.Conv2d(1, 1, 1)
    with torch.no_grad():
        model.weight.fill_(1.0)
        model.bias.fill_(0.0)
    config = load_config({"loss": "dice_bce"})
    loaded = LoadedModel(model.eval(), config, ["background", "ink"], {"mean": [0.5], "std": [1.0]}, [1, 8, 8],
                         torch.device("cpu"), "seg.pt")
    images = torch.randint(0, 256, (3, 8, 8), dtype=torch.uint8)
    masks = gpucore.predict(loaded, images, masks=str(tmp_path / "masks"))
    expected = (images.float() / 255 - 0.5 > 0)
    for index, path in enumerate(masks.mask_files):
        written = gpucore._C.decode_image(path, 1)[..., 0]
        assert torch.equal(written, expected[index].to(torch.uint8) * 255)
        assert masks.rows[index]["foreground"] == pytest.approx(expected[index].float().mean().item())


def test_onnx_export_agrees_with_pytorch(run, tmp_path, monkeypatch, capsys):
    require("onnxruntime")
    require("onnxscript")
    onnx = require("onnx")
    _, checkpoint, _, x_val, _ = run
    result = gpucore_command(capsys, "export", checkpoint, "--format", "onnx", "--out", str(tmp_path / "model.onnx"))
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert 0 <= summary["max_abs_diff"] <= 1e-4 and summary["checked_inputs"] == [3, 1, 28, 28]
    # the file on its own: preprocessing from its metadata, then onnxruntime on real images of any batch size
    import onnxruntime

    proto = onnx.load(str(tmp_path / "model.onnx"))
    info = json.loads({p.key: p.value for p in proto.metadata_props}["gpucore.preprocessing"])
    assert info == {k: v for k, v in json.loads((tmp_path / "model.onnx.json").read_text()).items() if k != "weights"}
    x = (x_val[:5].float() / 255 - info["mean"][0]) / info["std"][0]
    session = onnxruntime.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    theirs = torch.from_numpy(session.run(None, {"inputs": x.numpy()})[0])
    torch.testing.assert_close(theirs, gpucore.load(checkpoint, "cpu")(x_val[:5]), rtol=0, atol=1e-4)
    # a difference above the tolerance fails the export, naming it
    exporter = sys.modules["gpucore.evaluation.export"]
    monkeypatch.setattr(exporter, "TOLERANCE", -1.0)
    with pytest.raises(exporter.ExportError, match=r"differ from PyTorch's by up to .*tolerance -1"):
        gpucore.export(checkpoint, "onnx", str(tmp_path / "again.onnx"))
    assert not (tmp_path / "again.onnx.json").exists()  # no preprocessing file for an export that failed its check


def test_safetensors_export_loads_into_a_fresh_model(run, tmp_path):
    safetensors_torch = require("safetensors.torch")
    _, checkpoint, _, x_val, _ = run
    written = gpucore.export(checkpoint, "safetensors", str(tmp_path / "weights.safetensors"))
    info = json.loads((tmp_path / "weights.safetensors.json").read_text())
    assert written["preprocessing"] == str(tmp_path / "weights.safetensors.json") and info["weights"] == "weights.safetensors"
    assert info["input_shape"] == [1, 28, 28] and info["classes"] == CLASS_NAMES["synthetic_fashion"]
    fresh = build_model(info["model"], info["model_kwargs"])
    fresh.load_state_dict(safetensors_torch.load_file(str(tmp_path / "weights.safetensors")))
    x = (x_val[:8].float() / 255 - info["mean"][0]) / info["std"][0]
    with torch.no_grad():
        torch.testing.assert_close(fresh.eval()(x), gpucore.load(checkpoint, "cpu")(x_val[:8]), rtol=1e-5, atol=1e-5)


def test_both_formats_keep_their_own_json_and_get_the_usual_mode(run, tmp_path):
    """Exporting ONNX then safetensors to the same folder keeps both JSON files; the files are 0666 less the umask
    (safetensors alone wrote its file 0600)."""
    require("onnxruntime")
    require("onnxscript")
    require("onnx")
    require("safetensors")
    _, checkpoint, _, _, _ = run
    previous = os.umask(0o022)
    try:
        onnx_written = gpucore.export(checkpoint, "onnx", str(tmp_path / "best.onnx"))
        os.umask(0o027)  # the files follow the umask in force, not a fixed mode
        tensors_written = gpucore.export(checkpoint, "safetensors", str(tmp_path / "best.safetensors"))
    finally:
        os.umask(previous)
    assert onnx_written["preprocessing"] == str(tmp_path / "best.onnx.json")
    assert tensors_written["preprocessing"] == str(tmp_path / "best.safetensors.json")
    onnx_info = json.loads((tmp_path / "best.onnx.json").read_text())
    tensors_info = json.loads((tmp_path / "best.safetensors.json").read_text())
    assert onnx_info["weights"] == "best.onnx" and tensors_info["weights"] == "best.safetensors"
    assert {k: v for k, v in onnx_info.items() if k != "weights"} == {k: v for k, v in tensors_info.items()
                                                                       if k != "weights"}
    assert not (tmp_path / "best.json").exists()
    modes = {name: stat.S_IMODE(os.stat(tmp_path / name).st_mode)
             for name in ("best.onnx", "best.onnx.json", "best.safetensors", "best.safetensors.json")}
    assert modes == {"best.onnx": 0o644, "best.onnx.json": 0o644, "best.safetensors": 0o640,
                     "best.safetensors.json": 0o640}


def test_export_errors_are_clear(run, monkeypatch):
    _, checkpoint, _, _, _ = run
    with pytest.raises(gpucore.ConfigError, match="export format 'tflite' is not one of onnx, safetensors"):
        gpucore.export(checkpoint, "tflite")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if it were not installed
    with pytest.raises(gpucore.ConfigError, match=r"onnx export needs .*onnxruntime, not installed.*pip "
                                                  r"install onnx onnxscript onnxruntime"):
        gpucore.export(checkpoint, "onnx")
