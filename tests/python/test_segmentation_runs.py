"""Segmentation runs after training (issue 54, item 5): a folder of images/ and masks/ (or train/ and val/ each holding
them) trains from config key data, and `gpucore evaluate` and `gpucore report` work on such runs, on the folder or on
a gpucore data set (a classifier's evaluate takes tensors and data sets alike); `monitor: auto` follows the validation
IoU. The data are crops of real photos (scikit-image's astronaut, coffee and chelsea) whose masks are their bright
pixels; every metric is checked against one recomputed with torch from the checkpoint's model on the same files."""
import json
import os
import re

import numpy as np
import pytest
import torch
from PIL import Image

import gpucore
from gpucore.data.identity import held_out_by_name
from gpucore import cli
from conftest import require

SIDE = 48  # pixels of a crop
CROPS_PER_PHOTO = 8
BRIGHT = 140  # luminance (Pillow's convert("L")) above which a pixel is the foreground
RUN = {"loss": "dice_bce", "model": "seg_models:tiny_segmenter", "epochs": 3, "batch_size": 8, "lr": 0.01,
       "device": "cpu", "precision": "32", "progress": False, "report": False, "seed": 0}
SEG_MODELS = '''
from torch import nn


def tiny_segmenter(in_channels: int = 3):
    """One logit per pixel: the foreground where it is positive."""
    return nn.Sequential(nn.Conv2d(in_channels, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 1, 1))
'''


@pytest.fixture()
def seg_models(tmp_path, monkeypatch):
    """The run's model by name (config key model: seg_models:tiny_segmenter), importable as a user's module is."""
    (tmp_path / "seg_models.py").write_text(SEG_MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))


def photo_crops():
    """SIDE x SIDE x 3 uint8 crops of three real photos, spread over each photo."""
    photos = require("skimage.data")
    crops = []
    for photo in (photos.astronaut(), photos.coffee(), photos.chelsea()):
        height, width = photo.shape[:2]
        for i in range(CROPS_PER_PHOTO):
            top = (height - SIDE) * i // (CROPS_PER_PHOTO - 1)
            left = (width - SIDE) * (i * 3 % CROPS_PER_PHOTO) // (CROPS_PER_PHOTO - 1)
            crops.append(np.ascontiguousarray(photo[top:top + SIDE, left:left + SIDE, :3]))
    return crops


def write_pairs(folder, crops, first=0):
    """images/NN.png and masks/NN.png (grey, 0 or 255: the crop's pixels brighter than BRIGHT) under `folder`."""
    for sub in ("images", "masks"):
        os.makedirs(os.path.join(folder, sub), exist_ok=True)
    for index, crop in enumerate(crops, first):
        picture = Image.fromarray(crop)
        picture.save(os.path.join(folder, "images", f"{index:02d}.png"))
        mask = (np.asarray(picture.convert("L")) > BRIGHT).astype(np.uint8) * 255
        Image.fromarray(mask).save(os.path.join(folder, "masks", f"{index:02d}.png"))


def pair_files(folder, names=None):
    """(image files, mask files) of `folder`'s pairs, by sorted name or the names given."""
    names = names if names is not None else sorted(os.listdir(os.path.join(folder, "images")))
    return ([os.path.join(folder, "images", name) for name in names],
            [os.path.join(folder, "masks", name) for name in names])


def recomputed(checkpoint, images, masks):
    """IoU, Dice and pixel accuracy of the foreground over all pixels, from gpucore.load's model on the files read
    with Pillow: the engine's definitions, computed here without it."""
    loaded = gpucore.load(checkpoint, "cpu")
    inputs = torch.stack([torch.from_numpy(np.array(Image.open(f).convert("RGB"))).permute(2, 0, 1) for f in images])
    truth = torch.stack([torch.from_numpy(np.array(Image.open(f))) for f in masks]) > 127
    predicted = loaded(inputs)[:, 0] > 0
    overlap, union = (predicted & truth).sum().item(), (predicted | truth).sum().item()
    assert 0 < overlap < union  # neither trivial nor perfect: the numbers below say something
    return {"iou": overlap / union, "dice": 2 * overlap / (predicted.sum() + truth.sum()).item(),
            "accuracy": (predicted == truth).float().mean().item()}


def assert_metrics(metrics, expected):
    for name, value in expected.items():
        assert metrics[name] == pytest.approx(value, abs=1e-6), name


def report_metrics(run_dir, report="report.html"):
    """The metrics table of the run's report.html (or another page), {name: text as shown}."""
    page = open(os.path.join(run_dir, report), encoding="utf-8").read()
    assert "Validation masks" in page and "Not drawn" not in page
    return dict(re.findall(r"<tr><td>(iou|dice|accuracy)</td><td>([^<]*)</td></tr>", page))


def test_a_folder_of_images_and_masks_trains_evaluates_and_reports_from_the_command_line(tmp_path, seg_models,
                                                                                        capsys):
    folder = tmp_path / "photos"
    write_pairs(folder, photo_crops())
    settings = {**RUN, "data": str(folder), "val_fraction": 0.25, "run_dir": str(tmp_path / "runs"), "name": "seg"}
    assert cli.main(["train", *[arg for key, value in settings.items() for arg in ("--set", f"{key}={value}")]]) == 0
    run_dir = json.loads(capsys.readouterr().out)["run_dir"]

    # monitor: auto followed the validation IoU: best.pt is of the epoch of the highest val_iou
    stats = json.load(open(os.path.join(run_dir, "training_stats.json")))
    history = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    ious = [record["val_iou"] for record in history]
    best_epoch = history[ious.index(max(ious))]["epoch"]
    assert stats["best"]["monitor"] == "val_iou"
    assert (stats["best"]["epoch"], stats["best"]["metric"]) == (best_epoch, max(ious))
    checkpoint = os.path.join(run_dir, "checkpoints", "best.pt")
    assert torch.load(checkpoint, weights_only=False)["epoch"] == best_epoch

    # the val_fraction split: the pairs whose names the seeded hash holds out, which training_stats.json names
    validation = stats["validation"]
    names = sorted(os.listdir(folder / "images"))
    held_out = held_out_by_name(names, 0.25, RUN["seed"])[1]
    assert (validation["source"], validation["val_indices"]) == ("val_fraction", held_out)
    expected = recomputed(checkpoint, *pair_files(folder, [names[i] for i in validation["val_indices"]]))
    assert max(ious) == pytest.approx(expected["iou"], abs=1e-6)

    assert cli.main(["evaluate", checkpoint, "--device", "cpu", "--out", str(tmp_path / "evaluation")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["split"], summary["samples"]) == ("val", len(held_out))
    assert_metrics(summary["metrics"], expected)

    assert cli.main(["report", run_dir, "--device", "cpu"]) == 0
    assert report_metrics(run_dir) == {name: f"{value:.4g}" for name, value in expected.items()}


def test_a_run_trained_in_python_on_read_segmentation_evaluates_on_the_folder_or_a_data_set(tmp_path, seg_models,
                                                                                           capsys):
    crops = photo_crops()
    folder = tmp_path / "photos"
    write_pairs(folder / "train", [crop for index, crop in enumerate(crops) if index % 4 != 3])
    write_pairs(folder / "val", crops[3::4], first=18)  # two of each photo
    read = gpucore.data.read_segmentation
    val = read(str(folder / "val" / "images"), str(folder / "val" / "masks"))
    result = gpucore.train(dict(RUN, run_dir=str(tmp_path / "runs")),
                           train_data=read(str(folder / "train" / "images"), str(folder / "train" / "masks")),
                           val_data=val)
    checkpoint = os.path.join(result.checkpoint_dir, "best.pt")
    expected = recomputed(checkpoint, *pair_files(folder / "val"))
    assert result.monitor == "val_iou" and result.best_metric == pytest.approx(expected["iou"], abs=1e-6)

    # the folder's val/: the run's validation data (split val, checked against its checkpoint) and its held-out
    # split (test), from Python and from the command line; all of it (train/ and val/) by default
    summary = gpucore.evaluate(checkpoint, data=str(folder), split="val", device="cpu")
    assert (summary["split"], summary["samples"]) == ("val", 6)
    assert_metrics(summary["metrics"], expected)
    assert cli.main(["evaluate", checkpoint, "--data", str(folder), "--split", "test", "--device", "cpu",
                     "--out", str(tmp_path / "evaluation")]) == 0
    assert_metrics(json.loads(capsys.readouterr().out)["metrics"], expected)
    assert gpucore.evaluate(checkpoint, data=str(folder), device="cpu")["samples"] == len(crops)
    # a data set: all of it; it has no test split of its own
    summary = gpucore.evaluate(checkpoint, data=val, device="cpu")
    assert (summary["split"], summary["samples"]) == ("all", 6)
    assert_metrics(summary["metrics"], expected)
    with pytest.raises(gpucore.ConfigError, match=r"split 'test' does not apply to data 6 images and masks "
                                                  r"\([^)]*uint8\) from .*: it has no held-out split of its own .*; "
                                                  r"splits that do: all, val$"):
        gpucore.evaluate(checkpoint, data=val, split="test", device="cpu")

    assert cli.main(["report", result.run_dir, "--data", str(folder), "--split", "val", "--device", "cpu"]) == 0
    assert report_metrics(result.run_dir, "report-photos-val.html") == {name: f"{value:.4g}"
                                                                         for name, value in expected.items()}
    gpucore.write_report(result.run_dir, device="cpu", data=val)
    assert report_metrics(result.run_dir, "report-all.html") == {name: f"{value:.4g}"
                                                                  for name, value in expected.items()}
    with pytest.raises(gpucore.ConfigError, match=r"write_report's data: got a value of type dict; expected a data "
                                                  r"set name or path .* or a gpucore data set \(gpucore.data.read_seg"):
        gpucore.write_report(result.run_dir, device="cpu", data={"images": str(folder)})


def test_a_loss_that_does_not_fit_the_folder_is_refused_before_the_first_step(tmp_path, seg_models):
    crops = photo_crops()[:6]
    write_pairs(tmp_path / "masks_folder", crops)
    for index, crop in enumerate(crops):  # the same photos as two classes
        classes = tmp_path / "classes_folder" / ("bright" if crop.mean() > BRIGHT else "dark")
        classes.mkdir(parents=True, exist_ok=True)
        Image.fromarray(crop).save(classes / f"{index}.png")
    runs = tmp_path / "runs"
    with pytest.raises(gpucore.ConfigError, match=r"data '.*masks_folder' holds images and their masks "
                                                  r"\(segmentation\), but loss 'multilabel_soft_margin' \(multi-label "
                                                  r"classification\) does not train on masks: set loss: dice_bce \(or "
                                                  r"bce_with_logits\) for foreground masks, cross_entropy for masks of "
                                                  r"class ids"):
        gpucore.train(dict(RUN, loss="multilabel_soft_margin", model="fast_cnn", data=str(tmp_path / "masks_folder"),
                           run_dir=str(runs)))
    with pytest.raises(gpucore.ConfigError, match=r"data '.*classes_folder' holds images of classes \(bright, dark\), "
                                                  r"but loss 'dice_bce' \(segmentation\) trains on masks: give a "
                                                  r"segmentation folder \(images/ and masks/"):
        gpucore.train(dict(RUN, data=str(tmp_path / "classes_folder"), run_dir=str(runs)))
    with pytest.raises(gpucore.ConfigError, match=r"data_kwargs' does not fit the segmentation reader \(channels, "
                                                  r"size, threads, on_error, exif_orientation, reduce_zero_label\) of folder '.*masks_folder'.*max_resol"):
        gpucore.train(dict(RUN, data=str(tmp_path / "masks_folder"), data_kwargs={"max_resolution": 64},
                           run_dir=str(runs)))
    assert not runs.exists()  # refused before the run began


@pytest.mark.usefixtures("figures_skipped")  # checks numbers, rows and files: no figure
def test_a_classifier_is_evaluated_on_a_data_set_object_whole_as_on_its_validation_split(tmp_path):
    kwargs = {"train_size": 64, "val_size": 32, "seed": 1}
    result = gpucore.train(dict(data="synthetic_fashion", data_kwargs=kwargs, epochs=1, batch_size=16, device="cpu",
                                precision="32", progress=False, report=False, run_dir=str(tmp_path / "runs")))
    checkpoint = os.path.join(result.checkpoint_dir, "last.pt")
    _, (x_val, y_val) = gpucore.data.synthetic.synthetic_fashion(**kwargs)  # the run's validation split
    accuracy = (gpucore.load(checkpoint, "cpu")(x_val).argmax(1) == y_val).float().mean().item()
    own = gpucore.evaluate(checkpoint, device="cpu")["metrics"]
    assert own["accuracy"] == pytest.approx(accuracy)
    for data in ((x_val, y_val), gpucore.data.from_tensors(x_val, y_val)):
        summary = gpucore.evaluate(checkpoint, data=data, device="cpu")
        assert (summary["split"], summary["samples"]) == ("all", 32)
        assert summary["metrics"] == pytest.approx(own)
    write_pairs(tmp_path / "photos", photo_crops()[:2])
    masks = gpucore.data.read_segmentation(str(tmp_path / "photos" / "images"), str(tmp_path / "photos" / "masks"))
    with pytest.raises(gpucore.ConfigError, match=r"data '2 images and masks \(3-channel uint8\) from '.*images'' holds images and "
                                                  r"their masks \(segmentation\), but loss 'cross_entropy'"):
        gpucore.evaluate(checkpoint, data=masks, device="cpu")
