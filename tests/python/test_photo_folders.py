"""Runs on folders of real photos (crops of scikit-learn's china.jpg and flower.jpg; random pictures where scikit-learn
is missing): num_classes and in_channels taken from the data, a classifier's head checked against the classes, and
every CLI command ending in a message, never a traceback (a head wider than the class list, missing paths, one class,
grey and RGBA images among RGB ones)."""
import csv
import json
import os
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

import gpucore
from gpucore.errors import ConfigError
from gpucore.models import FastCNN
from gpucore.models.registry import kwargs_from_data
from gpucore.models.surgery import output_count
from conftest import gpucore_command, gpucore_process, require

pytestmark = pytest.mark.slow  # trains small runs, seconds each

CLASSES = ["bridge", "flower", "temple"]  # sorted: the order the folder reader gives
RUN = dict(epochs=1, device="cpu", precision="32", progress=False, batch_size=8, model="fast_cnn",
           data_kwargs={"size": [32, 32]}, report=False)


def _photos():
    """Two real RGB photos (H x W x 3 uint8), or seeded random pictures where scikit-learn is not installed."""
    try:
        from sklearn.datasets import load_sample_images
        return [np.asarray(image) for image in load_sample_images().images]
    except ImportError:
        generator = np.random.default_rng(0)
        return [generator.integers(0, 256, (427, 640, 3), dtype=np.uint8) for _ in range(2)]


def make_folder(root, classes=CLASSES, per_class=6):
    """Class subfolders of 32 x 32 JPEG crops: each class from its own region of the photos."""
    china, flower = _photos()
    sources = {"bridge": (china, 250), "flower": (flower, 100), "temple": (china, 0)}
    for c, name in enumerate(classes):
        image, top = sources.get(name, (flower, 300))
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i in range(per_class):
            y, x = top + 8 * i, 40 * i + 20 * c
            Image.fromarray(image[y:y + 32, x:x + 32]).save(os.path.join(root, name, f"{i}.jpg"))
    return str(root)


def _more_photos():
    """scikit-image's sample photos (coffee, chelsea, astronaut) where it is installed, else none."""
    try:
        from skimage import data as skimage_data
        return [skimage_data.coffee(), skimage_data.chelsea(), skimage_data.astronaut()]
    except ImportError:
        return []


def make_mixed_folder(root, per_class=6, seed=0):
    """Two class subfolders ("china", "flower") of real photos' crops of mixed sizes (60-200 pixels a side), as a user's
    own folder is: JPEG and PNG, one grey image and one RGBA PNG per class; each class from its own photos."""
    china, flower = _photos()
    more = _more_photos()
    sources = {"china": [china] + more[:1], "flower": [flower] + more[1:]}
    generator = np.random.default_rng(seed)
    for name, photos in sources.items():
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i in range(per_class):
            photo = photos[i % len(photos)]
            height, width = (int(v) for v in generator.integers(60, 201, 2))
            top = int(generator.integers(0, photo.shape[0] - height + 1))
            left = int(generator.integers(0, photo.shape[1] - width + 1))
            image = Image.fromarray(photo[top:top + height, left:left + width])
            image = image.convert("L") if i == 1 else image.convert("RGBA") if i == 2 else image
            image.save(os.path.join(root, name, f"{i}.{'jpg' if i in (0, 3, 4) else 'png'}"))
    return str(root)


def _one_line_error(result):
    """A CLI failure: exit status 2, and stderr one line `gpucore: error: ...`, no traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpucore: error: "), result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("photos") / "data")


def test_classes_and_channels_come_from_an_rgb_photo_folder(photos, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the head fits the classes: no warning
        result = gpucore.train(RUN, data=photos, run_dir=str(tmp_path), name="rgb")
    model = result.model
    assert model.features[0].in_channels == 3  # fast_cnn's default is 1
    assert output_count(model) == 3  # fast_cnn's default is 10
    stats = json.load(open(result.stats_path))
    assert stats["model_kwargs_from_data"] == {"num_classes": 3, "in_channels": 3}
    assert stats["classes"] == CLASSES
    config = json.load(open(os.path.join(result.run_dir, "config.json")))
    assert config["model_kwargs"] == {"num_classes": 3, "in_channels": 3}

    loaded = gpucore.load(os.path.join(result.checkpoint_dir, "best.pt"), device="cpu")
    assert loaded.config.model_kwargs == {"num_classes": 3, "in_channels": 3}
    assert output_count(loaded.module) == 3 and loaded.module.features[0].in_channels == 3
    images = torch.from_numpy(np.stack([np.asarray(Image.open(os.path.join(photos, c, "0.jpg"))) for c in CLASSES]))
    outputs = loaded(images.permute(0, 3, 1, 2).contiguous())
    assert outputs.shape == (3, 3)
    predictions = gpucore.predict(loaded, photos, top_k=5)
    assert len(predictions) == 18 and {row["label"] for row in predictions.rows} == set(CLASSES)
    assert all(row["class_3"] in CLASSES and "class_4" not in row for row in predictions.rows)  # 3 outputs: top 3
    assert predictions.notes == []


def test_given_model_kwargs_win_and_a_wider_head_warns(photos, tmp_path):
    with pytest.warns(UserWarning, match=r"model 'fast_cnn' has 7 outputs, but the data has 3 classes .*num_classes: 3"):
        result = gpucore.train(RUN, data=photos, run_dir=str(tmp_path), model_kwargs={"num_classes": 7})
    assert output_count(result.model) == 7
    assert json.load(open(result.stats_path))["model_kwargs_from_data"] == {"in_channels": 3}


def test_a_head_narrower_than_the_classes_is_refused(photos, tmp_path):
    with pytest.raises(ConfigError, match=r"model 'fast_cnn' has 2 outputs, but the data has 3 classes "
                                          r"\(bridge, flower, temple\): set model_kwargs num_classes: 3"):
        gpucore.train(RUN, data=photos, run_dir=str(tmp_path), model_kwargs={"num_classes": 2})
    with pytest.raises(ConfigError, match=r"the model given to train\(\) has 2 outputs, but the data has 3 classes"):
        gpucore.train(RUN, data=photos, run_dir=str(tmp_path), model=FastCNN(num_classes=2, in_channels=3))


def test_a_torchvision_model_gets_a_head_of_the_datas_classes(photos, tmp_path):
    require("torchvision")
    result = gpucore.train({**RUN, "model": "torchvision:resnet18"}, data=photos, run_dir=str(tmp_path))
    assert result.model.fc.out_features == 3  # torchvision's default: 1000
    loaded = gpucore.load(os.path.join(result.checkpoint_dir, "last.pt"), device="cpu")
    assert loaded.module.fc.out_features == 3


def test_what_each_kind_of_model_takes_from_the_data():
    assert kwargs_from_data("fast_cnn", {}, 5, 3) == {"num_classes": 5, "in_channels": 3}
    assert kwargs_from_data("fashion_mnist_cnn", {"num_classes": 4}, 5, 1) == {"in_channels": 1}
    assert kwargs_from_data("captcha_cnn", {}, 5, 3) == {"in_channels": 3}  # its heads x classes are its own
    assert kwargs_from_data("timm:resnet18", {"in_chans": 1}, 5, 3) == {"num_classes": 5}
    assert kwargs_from_data("torchvision:resnet18", {}, None, 3) == {"in_channels": 3}
    assert kwargs_from_data("smp:Unet", {}, 5, 3) == {}
    assert kwargs_from_data("gpucore.models.builtin:FashionMnistCNN", {}, 5, 3) == {"num_classes": 5,
                                                                                   "in_channels": 3}
    assert kwargs_from_data("collections:OrderedDict", {}, 5, 3) == {}  # takes neither


# ---- the CLI on a checkpoint whose head is wider than its class list ---------------------------------------

@pytest.fixture(scope="module")
def wide(photos, tmp_path_factory):
    folder = tmp_path_factory.mktemp("wide")
    with pytest.warns(UserWarning, match="model 'fashion_mnist_cnn' has 7 outputs"):
        # fashion_mnist_cnn (28 x 28 inputs): fast_cnn's adaptive max-pool does not convert to ONNX
        result = gpucore.train({**RUN, "report": True, "model": "fashion_mnist_cnn", "data_kwargs": {"size": [28, 28]}},
                               data=photos, run_dir=str(folder), name="wide", model_kwargs={"num_classes": 7})
    return result.run_dir, os.path.join(result.checkpoint_dir, "best.pt")


def test_predict_names_the_outputs_without_a_class(photos, wide, tmp_path, capsys):
    _, checkpoint = wide
    out = tmp_path / "p.csv"
    result = gpucore_command(capsys, "predict", checkpoint, photos, "--out", str(out), "--device", "cpu")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    summary = json.loads(result.stdout)
    assert summary["inputs"] == 18
    assert summary["notes"] == ["the model has 7 outputs but its checkpoint names 3 classes; outputs 3 to 6 are "
                                "named output_INDEX"]
    rows = list(csv.DictReader(open(out)))
    assert len(rows) == 18
    for row in rows:
        for rank in range(1, 6):  # the default --top-k 5, wider than the 3 classes
            index = int(row[f"index_{rank}"])
            assert 0 <= index < 7
            assert row[f"class_{rank}"] == (CLASSES[index] if index < 3 else f"output_{index}")
        assert len({row[f"index_{rank}"] for rank in range(1, 6)}) == 5


@pytest.mark.parametrize("command", ["evaluate", "gradcam", "export-onnx", "export-safetensors", "report"])
@pytest.mark.usefixtures("figures_skipped")  # checks numbers, rows and files: no figure
def test_each_command_ends_without_a_traceback_on_a_wide_head(photos, wide, tmp_path, command, capsys):
    run_dir, checkpoint = wide
    args = {"evaluate": ["evaluate", checkpoint, "--device", "cpu", "--out", str(tmp_path / "ev")],
            "gradcam": ["gradcam", "--checkpoint", checkpoint, "--images", os.path.join(photos, "flower"),
                        "--out", str(tmp_path / "cam"), "--device", "cpu"],
            "export-onnx": ["export", checkpoint, "--format", "onnx", "--out", str(tmp_path / "m.onnx")],
            "export-safetensors": ["export", checkpoint, "--format", "safetensors",
                                   "--out", str(tmp_path / "m.safetensors")],
            "report": ["report", run_dir, "--device", "cpu"]}[command]
    result = gpucore_command(capsys, *args)
    assert "Traceback" not in result.stderr, result.stderr
    if result.returncode == 2:
        _one_line_error(result)
        return
    assert result.returncode == 0, result.stderr
    if command == "evaluate":
        summary = json.loads(result.stdout)
        assert summary["samples"] == json.load(open(os.path.join(run_dir, "training_stats.json")))["validation"]["val_samples"]
        assert set(summary["metrics"]) >= {"accuracy", "loss"}
        per_class = json.load(open(tmp_path / "ev" / "per_class.json"))
        assert [row["class"] for row in per_class][:3] == CLASSES
    elif command == "gradcam":
        assert json.loads(result.stdout)["images"] == 6
    elif command.startswith("export"):
        info = json.loads(result.stdout)
        assert os.path.isfile(tmp_path / ("m.onnx" if command == "export-onnx" else "m.safetensors")), info
    else:
        assert result.stdout.strip().endswith("report.html")


# ---- bad input: a message naming the file or key, exit status 2 ------------------------------------------

@pytest.mark.parametrize("command", ["predict-checkpoint", "predict-inputs", "evaluate-checkpoint", "evaluate-data",
                                     "gradcam-checkpoint", "gradcam-images", "export", "report", "train-data"])
def test_a_path_that_does_not_exist_is_named(photos, wide, tmp_path, command, capsys, monkeypatch):
    run_dir, checkpoint = wide
    missing = str(tmp_path / "missing")
    args = {"predict-checkpoint": ["predict", missing, photos, "--device", "cpu"],
            "predict-inputs": ["predict", checkpoint, missing, "--device", "cpu"],
            "evaluate-checkpoint": ["evaluate", missing, "--device", "cpu"],
            "evaluate-data": ["evaluate", checkpoint, "--data", missing, "--device", "cpu"],
            "gradcam-checkpoint": ["gradcam", "--checkpoint", missing, "--images", photos, "--out", str(tmp_path)],
            "gradcam-images": ["gradcam", "--checkpoint", checkpoint, "--images", missing, "--out", str(tmp_path),
                               "--device", "cpu"],
            "export": ["export", missing, "--format", "onnx"],
            "report": ["report", missing],
            "train-data": ["train", "--set", f"data={missing}", "--set", "epochs=1", "--set", "device=cpu"]}[command]
    monkeypatch.chdir(tmp_path)
    line = _one_line_error(gpucore_command(capsys, *args))
    assert f"'{missing}'" in line
    if command in ("evaluate-data", "train-data"):
        assert "config key 'data'" in line and "class subfolders of images" in line


def test_a_folder_of_one_class_is_refused(tmp_path):  # a gpucore process: the command's own stderr, one line
    folder = make_folder(tmp_path / "one", classes=["flower"])
    line = _one_line_error(gpucore_process("train", "--set", f"data={folder}", "--set", "epochs=1", "--set",
                                           "device=cpu", "--set", "model=fast_cnn", "--set",
                                           f"run_dir={tmp_path / 'runs'}", "--set", "progress=false"))
    assert f"config key 'data' ('{folder}') has 1 class (flower)" in line and "needs 2 classes at least" in line
    assert not os.path.exists(tmp_path / "runs")


@pytest.mark.usefixtures("figures_skipped")  # checks numbers, rows and files: no figure
def test_evaluate_labels_by_the_checkpoints_classes_and_refuses_one_it_lacks(wide, tmp_path, capsys):
    _, checkpoint = wide
    subset = make_folder(tmp_path / "flower", classes=["flower"])  # a class of three: labelled as the model numbers it
    result = gpucore_command(capsys, "evaluate", checkpoint, "--data", subset, "--device", "cpu", "--out",
                             str(tmp_path / "ev"))
    assert result.returncode == 0, result.stderr
    assert "has no folder for classes bridge, temple of the model" in result.stderr
    rows = json.load(open(tmp_path / "ev" / "per_class.json"))
    assert {row["class"]: row["support"] for row in rows if row.get("support")} == {"flower": 6}  # all of it
    folder = make_folder(tmp_path / "tree", classes=["bridge", "flower", "tree"])
    line = _one_line_error(gpucore_command(capsys, "evaluate", checkpoint, "--data", folder, "--device", "cpu",
                                           "--out", str(tmp_path / "ev2")))
    assert f"image folder '{folder}' has class folder tree that the model does not have" in line
    assert "its classes: bridge, flower, temple" in line


def test_grey_and_rgba_images_among_rgb_ones_train_and_predict(tmp_path):
    folder = make_folder(tmp_path / "mixed", classes=["bridge", "flower"])
    china, flower = _photos()
    Image.fromarray(china[250:282, 0:32]).convert("L").save(os.path.join(folder, "bridge", "grey.jpg"))
    rgba = np.dstack([flower[100:132, 0:32], np.full((32, 32), 255, np.uint8)])
    Image.fromarray(rgba, "RGBA").save(os.path.join(folder, "flower", "alpha.png"))  # opaque: RGB as it is
    result = gpucore.train(RUN, data=folder, run_dir=str(tmp_path / "runs"))
    assert result.status == "completed" and result.skipped_files == []
    loaded = gpucore.load(os.path.join(result.checkpoint_dir, "best.pt"), device="cpu")
    assert loaded.input_shape == [3, 32, 32] and output_count(loaded.module) == 2
    predictions = gpucore.predict(loaded, folder, top_k=2)
    rows = {row["input"]: row for row in predictions.rows}
    assert len(rows) == 14
    assert rows[os.path.join("bridge", "grey.jpg")]["label"] == "bridge"
    assert rows[os.path.join("flower", "alpha.png")]["label"] == "flower"
    assert all({row["class_1"], row["class_2"]} == {"bridge", "flower"} for row in rows.values())
    read = gpucore.data.read_files([os.path.join(folder, "flower", "alpha.png"),
                                    os.path.join(folder, "bridge", "grey.jpg")], labels=[1, 0], channels=3)
    alpha, grey = read[0][0], read[1][0]
    assert torch.equal(alpha, torch.from_numpy(rgba[..., :3]).permute(2, 0, 1))  # opaque alpha: the RGB values
    assert torch.equal(grey[0], grey[1]) and torch.equal(grey[1], grey[2])  # grey: three equal channels
