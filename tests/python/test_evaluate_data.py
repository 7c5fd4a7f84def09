"""Evaluation scores what the user asked for, on folders of real photo crops: `--data FOLDER` scores all of it (split
all), `--split val` the samples the run validated on, `--split test`/`train` a train/ + test/ folder's own splits, a
split that does not apply is refused naming those that do; `gpucore report --data` writes its page beside the run's
own report, which stays byte-identical; a torch Dataset and a Hugging Face dataset evaluate, report and predict as
the same images given as a folder; `gpucore predict` takes several paths."""
import csv
import glob
import json
import os

import numpy as np
import pytest
import torch
from PIL import Image

import gpucore
from gpucore import cli
from gpucore.errors import ConfigError
from test_photo_folders import CLASSES, _photos

pytestmark = pytest.mark.slow  # trains one small run, seconds

SOURCES = {"bridge": (0, 250), "flower": (1, 100), "temple": (0, 0)}  # each class: its photo and its rows


def crop_folder(root, per_class, shift=0, counts=None):
    """Class subfolders of 32 x 32 PNG crops of real photos (scikit-learn's china.jpg and flower.jpg), each class from
    its own region; `shift` moves the crops, so folders of other shifts hold other images."""
    photos = _photos()
    for c, name in enumerate(CLASSES):
        photo, top = photos[SOURCES[name][0]], SOURCES[name][1]
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i in range((counts or {}).get(name, per_class)):
            y, x = top + 6 * i + shift, (37 * i + 20 * c + 3 * shift) % (photo.shape[1] - 32)
            Image.fromarray(photo[y:y + 32, x:x + 32]).save(os.path.join(root, name, f"{i:02d}.png"))
    return str(root)


def folder_images(root):
    """(PIL images, labels) of a class folder in the order gpucore reads it (classes sorted, files sorted)."""
    images, labels = [], []
    for label, name in enumerate(CLASSES):
        for path in sorted(glob.glob(os.path.join(root, name, "*.png"))):
            images.append(Image.open(path).convert("RGB"))
            labels.append(label)
    return images, labels


class Photos(torch.utils.data.Dataset):
    """A torch Dataset as scripts write one: (PIL image, class) pairs, with ImageFolder's `classes`."""

    def __init__(self, images, labels, classes=CLASSES):
        self.images, self.labels, self.classes = images, labels, classes

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        return self.images[index], self.labels[index]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A fast_cnn trained 2 epochs on a 3-class folder of 36 crops (its val_fraction share held out by file name), its
    report drawn; and a held-out folder of 40 other crops."""
    root = tmp_path_factory.mktemp("evaluate_data")
    train = crop_folder(root / "train", 12)
    holdout = crop_folder(root / "holdout", 14, shift=3, counts={"temple": 12})
    result = gpucore.train(dict(data=train, run_dir=str(root / "runs"), epochs=2, device="cpu", precision="32",
                                progress=False, batch_size=8, model="fast_cnn", data_kwargs={"size": [32, 32]}))
    result.root, result.train_folder, result.holdout = root, train, holdout
    result.best = os.path.join(result.checkpoint_dir, "best.pt")
    return result


@pytest.mark.usefixtures("figures_skipped")  # checks numbers, rows and files: no figure
def test_evaluate_of_a_held_out_folder_scores_all_of_it(run, tmp_path, capsys):
    predictions = gpucore.predict(run.best, run.holdout, device="cpu")
    right = (predictions.predicted == predictions.labels).sum().item() / 40  # by hand, from predict's outputs
    assert len(predictions) == 40
    summary = gpucore.evaluate(run.best, data=run.holdout, device="cpu", out=str(tmp_path / "ev"))
    assert (summary["split"], summary["samples"], summary["data"]) == ("all", 40, os.path.abspath(run.holdout))
    assert summary["scored"] == f"all 40 samples of '{os.path.abspath(run.holdout)}'"
    assert summary["metrics"]["accuracy"] == pytest.approx(right, abs=1e-9)
    assert sum(row["support"] for row in summary["per_class"]) == 40
    # the command line: the same, and said in its JSON; the default folder is named by the data
    assert cli.main(["evaluate", run.best, "--data", run.holdout, "--device", "cpu"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["samples"], printed["split"], printed["data"]) == (40, "all", os.path.abspath(run.holdout))
    assert printed["metrics"]["accuracy"] == pytest.approx(right, abs=1e-9)
    assert os.path.isfile(os.path.join(run.run_dir, "evaluate-holdout", "evaluation.json"))


@pytest.mark.usefixtures("figures_skipped")  # checks numbers, rows and files: no figure
def test_split_val_scores_the_samples_the_run_validated_on(run, tmp_path):
    stats = json.load(open(os.path.join(run.run_dir, "training_stats.json")))
    recorded = stats["validation"]
    assert recorded["source"] == "val_fraction" and recorded["val_samples"] == 4  # 0.1 of 36, by file name
    best = next(row for row in run.history if row["epoch"] == stats["best"]["epoch"])
    for data in (None, run.train_folder):  # the run's own data, named or not
        summary = gpucore.evaluate(run.best, data=data, split="val", device="cpu", out=str(tmp_path / "val"))
        assert (summary["split"], summary["samples"]) == ("val", recorded["val_samples"])
        assert summary["metrics"]["accuracy"] == pytest.approx(best["val_accuracy"], abs=1e-9)
        assert summary["metrics"]["loss"] == pytest.approx(best["val_loss"], rel=1e-5)
        assert summary["scored"].startswith("the 4 samples the run validated on: the share val_fraction 0.1 held out "
                                            "with seed")
    # no split given: the run's own data scores its validation samples, data given all of it
    assert gpucore.evaluate(run.best, device="cpu", out=str(tmp_path / "own"))["samples"] == 4
    assert gpucore.evaluate(run.best, data=run.train_folder, device="cpu", out=str(tmp_path / "all"))["samples"] == 36
    # train: the rest
    train = gpucore.evaluate(run.best, data=run.train_folder, split="train", device="cpu", out=str(tmp_path / "t"))
    assert train["samples"] == 32
    # another folder is not what the run validated on: refused, naming the splits that do apply
    with pytest.raises(ConfigError, match=r"split 'val' does not apply to data '.*holdout': its val part is not the "
                                          r"run's validation data \(.*\); splits that do: all$"):
        gpucore.evaluate(run.best, data=run.holdout, split="val", device="cpu")


@pytest.mark.usefixtures("figures_skipped")  # checks numbers, rows and files: no figure
def test_split_test_and_train_of_a_folder_with_its_own_splits(run, tmp_path):
    root = tmp_path / "kaggle"
    crop_folder(root / "train", 3, shift=5)
    crop_folder(root / "test", 4, shift=7)
    loaded = gpucore.load(run.best, "cpu")
    expected = {}
    for part in ("train", "test"):
        predictions = gpucore.predict(loaded, str(root / part))
        expected[part] = (len(predictions), (predictions.predicted == predictions.labels).sum().item() / len(predictions))
    for split in ("test", "train"):
        summary = gpucore.evaluate(run.best, data=str(root), split=split, device="cpu", out=str(tmp_path / split))
        assert (summary["samples"], summary["metrics"]["accuracy"]) == (expected[split][0],
                                                                        pytest.approx(expected[split][1], abs=1e-9))
    everything = gpucore.evaluate(run.best, data=str(root), device="cpu", out=str(tmp_path / "all"))
    assert everything["samples"] == 21 and everything["scored"].endswith("(2 splits: training and held-out)")
    right = expected["train"][0] * expected["train"][1] + expected["test"][0] * expected["test"][1]
    assert everything["metrics"]["accuracy"] == pytest.approx(right / 21, abs=1e-9)
    # beside val/, split test is test/ (the held-out split the run validates on is val/), all is every folder
    crop_folder(root / "val", 2, shift=9)
    assert gpucore.evaluate(run.best, data=str(root), split="test", device="cpu", out=str(tmp_path / "t2"))[
        "samples"] == 12
    assert gpucore.evaluate(run.best, data=str(root), device="cpu", out=str(tmp_path / "a2"))["samples"] == 27


def test_a_split_that_does_not_apply_is_refused_naming_those_that_do(run, capsys):
    with pytest.raises(ConfigError, match=r"split 'test' does not apply to data '.*holdout': it has no held-out split "
                                          r"of its own \(a test/, validation/, val/ or valid/ folder beside train/.*\); "
                                          r"splits that do: "
                                          r"all$"):
        gpucore.evaluate(run.best, data=run.holdout, split="test", device="cpu")
    with pytest.raises(ConfigError, match=r"split 'test' does not apply to data '.*train': .*; splits that do: all, "
                                          r"val, train$"):
        gpucore.evaluate(run.best, data=run.train_folder, split="test", device="cpu")
    with pytest.raises(ConfigError, match=r"split 'every' is not one of all, val, test, train \(all: every sample"):
        gpucore.evaluate(run.best, data=run.holdout, split="every", device="cpu")
    with pytest.raises(SystemExit):  # argparse: the choices listed
        cli.main(["evaluate", run.best, "--split", "every"])
    error = capsys.readouterr().err
    assert "invalid choice: 'every'" in error and all(split in error for split in ("all", "val", "test", "train"))


def _snapshot(run_dir):
    """Every file of the run's own report (report.html, plots/, per_class.json) and training_stats.json, as bytes."""
    paths = ["report.html", "per_class.json", "training_stats.json"] + [
        os.path.join("plots", name) for name in os.listdir(os.path.join(run_dir, "plots"))]
    return {path: open(os.path.join(run_dir, path), "rb").read() for path in paths}


def test_report_with_data_writes_beside_the_runs_report_and_leaves_it_byte_identical(run, capsys):
    before = _snapshot(run.run_dir)
    assert cli.main(["report", run.run_dir, "--data", run.holdout, "--device", "cpu"]) == 0
    page = capsys.readouterr().out.strip()
    assert page == os.path.join(run.run_dir, "report-holdout.html")
    assert _snapshot(run.run_dir) == before
    text = open(page, encoding="utf-8").read()
    assert f"all 40 samples of &#x27;{os.path.abspath(run.holdout)}&#x27;" in text
    assert 'alt="confusion_matrix.png"' in text
    assert os.path.isfile(os.path.join(run.run_dir, "plots-holdout", "confusion_matrix.png"))
    rows = json.load(open(os.path.join(run.run_dir, "per_class-holdout.json")))
    evaluated = gpucore.evaluate(run.best, data=run.holdout, device="cpu", out=os.path.join(run.root, "e"))
    assert rows == evaluated["per_class"]
    # a split other than all is named in the file; the run's own report still untouched
    assert gpucore.write_report(run.run_dir, device="cpu", data=run.train_folder, split="train").endswith(
        "report-train-train.html")
    assert _snapshot(run.run_dir) == before


def _same_evaluation(first, second):
    assert first["samples"] == second["samples"]
    for name, value in first["metrics"].items():
        assert second["metrics"][name] == pytest.approx(value, rel=1e-5, abs=1e-6), name
    assert first["per_class"] == second["per_class"]


@pytest.mark.usefixtures("figures_skipped")  # checks numbers, rows and files: no figure
def test_a_torch_dataset_evaluates_reports_and_predicts_as_the_same_images_as_a_folder(run, tmp_path):
    images, labels = folder_images(run.holdout)
    dataset = Photos(images, labels)
    folder = gpucore.evaluate(run.best, data=run.holdout, device="cpu", out=str(tmp_path / "folder"))
    summary = gpucore.evaluate(run.best, data=dataset, device="cpu", out=str(tmp_path / "dataset"))
    assert summary["split"] == "all" and summary["data"] == "40 samples of a Photos"
    _same_evaluation(folder, summary)
    page = gpucore.write_report(run.run_dir, device="cpu", data=dataset)
    assert os.path.basename(page) == "report-all.html"
    assert json.load(open(os.path.join(run.run_dir, "per_class-all.json"))) == folder["per_class"]
    from_folder, from_dataset = gpucore.predict(run.best, run.holdout, device="cpu"), gpucore.predict(
        run.best, dataset, device="cpu")
    torch.testing.assert_close(from_dataset.outputs, from_folder.outputs, rtol=1e-5, atol=1e-5)
    assert from_dataset.labels.tolist() == from_folder.labels.tolist() == labels
    assert [row["label"] for row in from_dataset.rows] == [row["label"] for row in from_folder.rows]
    gpucore_set = gpucore.data.read_image_folder(run.holdout, size=[32, 32])  # a gpucore data set: its inputs
    from_set = gpucore.predict(run.best, gpucore_set, device="cpu")
    torch.testing.assert_close(from_set.outputs, from_folder.outputs, rtol=1e-5, atol=1e-5)
    assert from_set.labels.tolist() == labels
    # the classes must be the model's, as in training
    with pytest.raises(ConfigError, match="has classes temple, flower, bridge, but the model of .* was trained on "
                                          "bridge, flower, temple"):
        gpucore.evaluate(run.best, data=Photos(images, labels, CLASSES[::-1]), device="cpu")
    with pytest.raises(ConfigError, match="has classes temple, flower, bridge"):
        gpucore.predict(run.best, Photos(images, labels, CLASSES[::-1]), device="cpu")


@pytest.mark.usefixtures("figures_skipped")  # checks numbers, rows and files: no figure
def test_a_hugging_face_dataset_evaluates_reports_and_predicts_as_the_same_folder(run, tmp_path):
    datasets = pytest.importorskip("datasets", reason="the datasets package is not installed (pip install datasets)")
    hf = datasets.load_dataset("imagefolder", data_dir=run.holdout, split="train")
    assert hf.features["label"].names == CLASSES
    folder = gpucore.evaluate(run.best, data=run.holdout, device="cpu", out=str(tmp_path / "folder"))
    summary = gpucore.evaluate(run.best, data=hf, device="cpu", out=str(tmp_path / "hf"))
    assert summary["data"] == "40 samples of a Dataset (Hugging Face)"
    _same_evaluation(folder, summary)
    gpucore.write_report(run.run_dir, device="cpu", data=hf)
    assert json.load(open(os.path.join(run.run_dir, "per_class-all.json"))) == folder["per_class"]
    predictions = gpucore.predict(run.best, hf, device="cpu")
    by_file = gpucore.predict(run.best, [os.path.join(run.holdout, path) for path in
                                         (os.path.relpath(p, run.holdout) for p in _hf_files(hf))], device="cpu")
    torch.testing.assert_close(predictions.outputs, by_file.outputs, rtol=1e-5, atol=1e-5)
    assert predictions.labels.tolist() == list(hf["label"])


def _hf_files(hf):
    """The image files of an imagefolder dataset, in its order."""
    return [row["image"].filename for row in hf]


def test_predict_takes_several_paths_into_one_table(run, tmp_path, capsys):
    first, second = (os.path.join(run.holdout, "bridge", "00.png"), os.path.join(run.holdout, "temple", "03.png"))
    folder = os.path.join(run.holdout, "flower")
    together = gpucore.predict(run.best, [first, second, folder], device="cpu")
    apart = [gpucore.predict(run.best, path, device="cpu") for path in (first, second, folder)]
    assert together.names == [first, second] + [os.path.join(folder, f"{i:02d}.png") for i in range(14)]
    # the same outputs (within float rounding: the batches differ)
    torch.testing.assert_close(together.outputs, torch.cat([p.outputs for p in apart]), rtol=1e-5, atol=1e-6)
    assert together.labels is None  # single files and a folder without class subfolders: no true classes
    # class folders given together: the accuracy across all of them
    both = gpucore.predict(run.best, [os.path.join(run.holdout, "..", "holdout"), run.train_folder], device="cpu")
    each = [gpucore.predict(run.best, path, device="cpu") for path in (run.holdout, run.train_folder)]
    assert both.labels.tolist() == each[0].labels.tolist() + each[1].labels.tolist()
    assert both.accuracy() == pytest.approx((each[0].accuracy() * 40 + each[1].accuracy() * 36) / 76, abs=1e-6)
    # the command line: several paths, one CSV
    out = tmp_path / "p.csv"
    assert cli.main(["predict", run.best, first, second, folder, "--out", str(out), "--device", "cpu"]) == 0
    assert json.loads(capsys.readouterr().out)["inputs"] == 16
    with open(out, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["input"] for row in rows] == together.names
    assert [row["class_1"] for row in rows] == [row["class_1"] for row in together.rows]
    with pytest.raises(ConfigError, match="a list of paths or a list of images, not both"):
        gpucore.predict(run.best, [first, np.zeros((32, 32, 3), np.uint8)], device="cpu")
