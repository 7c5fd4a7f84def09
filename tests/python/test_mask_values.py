"""Segmentation masks read as the data sets define them (issue 70, item 1): VOC's palette masks with 255 borders (void,
ignored by loss and metrics), ADE20K's masks with 0 as "other" (data_kwargs reduce_zero_label), black-and-white masks
(0 and 255 only: 255 is class 1), and a mask value the model has no output for refused before the first step naming
its file. The data are 32 x 32 crops of real photos (scikit-image's astronaut, coffee, chelsea, rocket) whose classes
are luminance bands, as palette ("P") or grey PNGs; every number is checked against torchmetrics' MulticlassJaccardIndex
(ignore_index=255) on the predictions of the checkpoint's model for the files read with Pillow."""
import json
import os

import numpy as np
import pytest
import torch
from PIL import Image

import gpucore
from gpucore.data.image_files import mask_table
from gpucore.errors import ConfigError
from conftest import require

SIDE = 32
CLASSES = 3
VOID = 255
# luminance bands (Pillow's convert("L")) of the classes 0, 1, 2
BANDS = (95, 160)
RUN = {"loss": "cross_entropy", "model": "mask_models:pixel_classes", "epochs": 3, "batch_size": 8, "lr": 0.05,
       "device": "cpu", "precision": "32", "progress": False, "report": False, "seed": 0}
MASK_MODELS = '''
from torch import nn


def pixel_classes(num_classes: int = 3):
    """A logit per class per pixel."""
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, num_classes, 1))
'''
# VOC's palette (its devkit's colour map: class c's colour from the bits of c), 255 the border's cream
VOC_PALETTE = [channel for c in range(256) for channel in
               [sum(((c >> (3 * k + shift)) & 1) << (7 - k) for k in range(8)) for shift in (0, 1, 2)]]


@pytest.fixture()
def mask_models(tmp_path, monkeypatch):
    (tmp_path / "mask_models.py").write_text(MASK_MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))


def photo_crops(count):
    """`count` SIDE x SIDE x 3 uint8 crops spread over four real photos."""
    photos = require("skimage.data")
    pictures = [photos.astronaut(), photos.coffee(), photos.chelsea(), photos.rocket()]
    crops = []
    for i in range(count):
        photo = pictures[i % len(pictures)]
        height, width = photo.shape[:2]
        top = (height - SIDE) * (i * 5 % count) // max(1, count - 1)
        left = (width - SIDE) * (i * 3 % count) // max(1, count - 1)
        crops.append(np.ascontiguousarray(photo[top:top + SIDE, left:left + SIDE, :3]))
    return crops


def luminance_classes(crop):
    """The crop's classes 0..2 by luminance band (uint8 SIDE x SIDE)."""
    grey = np.asarray(Image.fromarray(crop).convert("L"))
    return np.digitize(grey, BANDS).astype(np.uint8)


def with_borders(classes):
    """VOC's void: every pixel with a 4-neighbour of another class is 255, as VOC draws object borders."""
    padded = np.pad(classes, 1, mode="edge")
    border = np.zeros(classes.shape, bool)
    for dy, dx in ((0, 1), (2, 1), (1, 0), (1, 2)):
        border |= padded[dy:dy + SIDE, dx:dx + SIDE] != classes
    return np.where(border, VOID, classes).astype(np.uint8)


def write_set(folder, crops, masks, palette=True):
    """images/NN.png and masks/NN.png (mode "P" with VOC's palette, else grey "L") under `folder`."""
    for sub in ("images", "masks"):
        os.makedirs(os.path.join(folder, sub), exist_ok=True)
    for index, (crop, mask) in enumerate(zip(crops, masks)):
        Image.fromarray(crop).save(os.path.join(folder, "images", f"{index:02d}.png"))
        picture = Image.fromarray(mask, mode="L")
        if palette:
            picture = picture.convert("P")  # indices equal to the grey values, then VOC's colours for them
            picture.putpalette(VOC_PALETTE)
        picture.save(os.path.join(folder, "masks", f"{index:02d}.png"))


def voc_layout(root, train=16, val=8):
    """train/ and val/ of VOC-style pairs: palette masks of three classes with 255 borders."""
    crops = photo_crops(train + val)
    masks = [with_borders(luminance_classes(crop)) for crop in crops]
    write_set(os.path.join(root, "train"), crops[:train], masks[:train])
    write_set(os.path.join(root, "val"), crops[train:], masks[train:])
    return masks[train:]


def pillow_pairs(folder):
    """(inputs N x 3 x H x W uint8, masks N x H x W int64 as stored) of `folder`'s pairs, read with Pillow."""
    names = sorted(os.listdir(os.path.join(folder, "images")))
    inputs = torch.stack([torch.from_numpy(np.array(Image.open(os.path.join(folder, "images", n)).convert("RGB")))
                          .permute(2, 0, 1) for n in names])
    masks = torch.stack([torch.from_numpy(np.array(Image.open(os.path.join(folder, "masks", n)))).long()
                         for n in names])
    return inputs, masks


def jaccard(predicted, truth, average="macro"):
    metrics = require("torchmetrics.classification")
    return metrics.MulticlassJaccardIndex(CLASSES, average=average, ignore_index=VOID)(predicted, truth)


def train(tmp_path, **settings):
    settings = {**RUN, "run_dir": str(tmp_path / "runs"), "name": "masks", **settings}
    summary = gpucore.train(settings)
    return summary.run_dir


def best_val_miou(run_dir):
    stats = json.load(open(os.path.join(run_dir, "training_stats.json")))
    assert stats["best"]["monitor"] == "val_miou"
    return stats["best"]["metric"], os.path.join(run_dir, "checkpoints", "best.pt")


def test_the_rule_reads_void_binary_and_reduce_zero_label_masks_by_hand():
    values = torch.zeros(256, dtype=torch.bool)
    values[[0, 255]] = True
    binary = mask_table(values, reduce_zero_label=False)
    assert binary[255] == 1 and torch.equal(binary[:255], torch.arange(255))
    values[7] = True  # one other value anywhere in the set: 255 is void
    assert torch.equal(mask_table(values, reduce_zero_label=False), torch.arange(256))
    ade = mask_table(values, reduce_zero_label=True)
    assert (ade[0], ade[1], ade[150], ade[254], ade[255]) == (VOID, 0, 149, 253, VOID)


@pytest.mark.parametrize("cache", ["none", "device"])
@pytest.mark.usefixtures("figures_skipped")  # checks numbers, rows and files: no figure
def test_voc_palette_masks_ignore_their_255_borders_as_torchmetrics_does(tmp_path, mask_models, cache):
    truth = voc_layout(tmp_path / "voc")
    void_share = np.mean([(mask == VOID).mean() for mask in truth])
    assert void_share > 0.1  # the borders are a real share of the pixels, as in VOC
    run_dir = train(tmp_path, data=str(tmp_path / "voc"), cache=cache)
    assert json.load(open(os.path.join(run_dir, "config.json")))["ignore_index"] == VOID  # recorded as resolved

    val_miou, checkpoint = best_val_miou(run_dir)
    inputs, masks = pillow_pairs(tmp_path / "voc" / "val")
    assert set(masks.unique().tolist()) == {0, 1, 2, VOID}
    predicted = gpucore.load(checkpoint, "cpu")(inputs).argmax(1)
    expected = jaccard(predicted, masks).item()
    assert val_miou == pytest.approx(expected, abs=1e-5)
    # what the void read as class 1 (gpucore before issue 70) would have scored: the comparison can tell them apart
    assert abs(jaccard(predicted, torch.where(masks == VOID, 1, masks)).item() - expected) > 1e-3

    # evaluate on the folder: the mIoU and each class's IoU, as torchmetrics per class
    summary = gpucore.evaluate(checkpoint, data=gpucore.data.read_segmentation(
        str(tmp_path / "voc" / "val" / "images"), str(tmp_path / "voc" / "val" / "masks")), out=str(tmp_path / "ev"))
    assert summary["metrics"]["miou"] == pytest.approx(expected, abs=1e-5)
    per_class = {int(row["class"]) if str(row["class"]).isdigit() else row["class"]: row for row in summary["per_class"]}
    for index, iou in enumerate(jaccard(predicted, masks, average="none").tolist()):
        assert per_class[index]["iou"] == pytest.approx(iou, abs=1e-5), index


def test_a_voc_mask_of_only_background_and_border_stays_void_in_a_set_of_classes(tmp_path):
    crops = photo_crops(4)
    masks = [with_borders(luminance_classes(crop)) for crop in crops]
    masks[0] = np.where(masks[0] == VOID, VOID, 0).astype(np.uint8)  # this one: background and border only
    write_set(tmp_path / "voc", crops, masks)
    data = gpucore.data.read_segmentation(str(tmp_path / "voc" / "images"), str(tmp_path / "voc" / "masks"))
    _, stored = pillow_pairs(tmp_path / "voc")
    assert torch.equal(data.targets, stored)  # 255 stays the void, in the first mask too


@pytest.mark.parametrize("palette", [False, True])
def test_black_and_white_masks_still_train_as_0_and_1(tmp_path, mask_models, palette):
    crops = photo_crops(12)
    masks = [(luminance_classes(crop) == 2).astype(np.uint8) * 255 for crop in crops]
    write_set(tmp_path / "bw", crops, masks, palette=palette)
    data = gpucore.data.read_segmentation(str(tmp_path / "bw" / "images"), str(tmp_path / "bw" / "masks"))
    _, stored = pillow_pairs(tmp_path / "bw")
    assert set(stored.unique().tolist()) == {0, 255}
    assert torch.equal(data.targets, (stored == 255).long())
    # a two-class run on them scores every pixel: nothing is void
    run_dir = train(tmp_path, data=str(tmp_path / "bw"), epochs=1, model_kwargs={"num_classes": 2})
    stats = json.load(open(os.path.join(run_dir, "training_stats.json")))
    held_out = stats["validation"]["val_indices"]
    inputs, _ = pillow_pairs(tmp_path / "bw")
    predicted = gpucore.load(os.path.join(run_dir, "checkpoints", "last.pt"), "cpu")(inputs[held_out]).argmax(1)
    metrics = require("torchmetrics.classification")
    expected = metrics.MulticlassJaccardIndex(2, ignore_index=VOID)(predicted, (stored[held_out] == 255).long())
    last = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))][-1]
    assert last["val_miou"] == pytest.approx(expected.item(), abs=1e-5)


def ade_layout(root, count=16):
    """An ADE20K-style set: grey masks where 0 is "other" and classes 0..2 are stored as 1..3."""
    crops = photo_crops(count)
    masks = []
    for crop in crops:
        stored = luminance_classes(crop) + 1
        stored[::5, :] = 0  # stripes of "other"
        masks.append(stored.astype(np.uint8))
    write_set(root, crops, masks, palette=False)


def test_ade20k_masks_read_with_reduce_zero_label_as_mmsegmentation_does(tmp_path, mask_models):
    ade_layout(tmp_path / "ade")
    data = gpucore.data.read_segmentation(str(tmp_path / "ade" / "images"), str(tmp_path / "ade" / "masks"),
                                          reduce_zero_label=True)
    inputs, stored = pillow_pairs(tmp_path / "ade")
    # mmsegmentation's LoadAnnotations(reduce_zero_label=True): 0 -> 255, the rest minus one, 254 -> 255
    reduced = stored.clone()
    reduced[reduced == 0] = 255
    reduced = reduced - 1
    reduced[reduced == 254] = 255
    assert torch.equal(data.targets, reduced)

    run_dir = train(tmp_path, data=str(tmp_path / "ade"), data_kwargs={"reduce_zero_label": True}, val_fraction=0.25)
    val_miou, checkpoint = best_val_miou(run_dir)
    held_out = json.load(open(os.path.join(run_dir, "training_stats.json")))["validation"]["val_indices"]
    predicted = gpucore.load(checkpoint, "cpu")(inputs[held_out]).argmax(1)
    assert val_miou == pytest.approx(jaccard(predicted, reduced[held_out]).item(), abs=1e-5)


def test_the_same_ade20k_set_without_reduce_zero_label_is_refused_naming_the_file_and_value(tmp_path, mask_models):
    ade_layout(tmp_path / "ade")
    with pytest.raises(ConfigError, match=r"mask '.*ade/masks/\d\d\.png' holds value 3, but model 'mask_models:"
                                          r"pixel_classes' \(3 outputs\) scores classes 0 to 2 and ignore_index is "
                                          r"255: .*reduce_zero_label: true"):
        train(tmp_path, data=str(tmp_path / "ade"))
    assert not os.path.exists(tmp_path / "runs" / "masks")  # before anything was trained or written


def test_a_mask_value_beyond_the_models_classes_is_refused_before_the_first_step(tmp_path, mask_models):
    crops = photo_crops(8)
    masks = [with_borders(luminance_classes(crop)) for crop in crops]
    masks[5][3, 4] = 7  # one pixel of a class the model has no output for
    write_set(tmp_path / "voc", crops, masks)
    for cache in ("none", "device"):
        with pytest.raises(ConfigError, match=r"mask '.*voc/masks/05\.png' holds value 7, but .* \(3 outputs\) "
                                              r"scores classes 0 to 2 and ignore_index is 255: give the model 8 or "
                                              r"more outputs"):
            train(tmp_path, data=str(tmp_path / "voc"), cache=cache)
    # VOC's void with an ignore_index set to something else: named, not trained as a class
    with pytest.raises(ConfigError, match=r"mask '.*voc/masks/00\.png' holds value 255, but .* scores classes 0 to 7 "
                                          r"and ignore_index is -100: 255 is the masks' void: leave ignore_index unset"):
        train(tmp_path, data=str(tmp_path / "voc"), ignore_index=-100, model_kwargs={"num_classes": 8})
    # a loss of one output per pixel takes 0 and 1 only: VOC's classes are refused as such
    with pytest.raises(ConfigError, match=r"mask '.*voc/masks/\d\d\.png' holds value 2, but .*\(loss dice_bce\) "
                                          r"scores classes 0 to 1: .*loss cross_entropy"):
        train(tmp_path, data=str(tmp_path / "voc"), loss="dice_bce", model_kwargs={"num_classes": 1})
    assert not os.path.exists(tmp_path / "runs" / "masks")
