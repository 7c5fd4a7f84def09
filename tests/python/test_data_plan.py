"""One plan per data set (gpucore/data/plan.py): the cache, the own-sizes decision, the normalisation statistics, the
transforms' forms and the input shape are each decided once per set for a whole run, validation and the run's report
included, and an out-of-memory rebuild keeps the plan and changes only the batch size; a loaded model plans its inputs
once (evaluation/load.py's InferencePlan) for evaluate, predict, export and Grad-CAM."""
import glob
import json
import os

import pytest
import torch
from torch import nn

import gpucore
from gpucore import _C
from gpucore.checkpoint import load_checkpoint
from gpucore.data import plan as plan_module
from gpucore.data.epoch_data import training_set
from PIL import Image
from test_photo_folders import make_mixed_folder
from test_torch_datasets import Photos, _crops

TRANSFORMS = [{"RandomResizedCrop": {"size": 24, "scale": [0.5, 1.0]}}, "RandomHorizontalFlip"]


class Counted:
    """Wraps a function and counts its calls."""

    def __init__(self, function):
        self.function, self.calls = function, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.function(*args, **kwargs)


def count_calls(monkeypatch):
    """The C++ calls that derive a transforms list's facts and plan.py's decisions, each wrapped to count its calls."""
    calls = {}
    for owner, names in ((_C, ("transform_plan", "per_image_count", "validation_form", "check_transforms")),
                         (plan_module, ("choose_cache", "data_stats", "identity_of"))):
        for name in names:
            calls[name] = Counted(getattr(owner, name))
            monkeypatch.setattr(owner, name, calls[name])
    return calls


@pytest.fixture
def counted(monkeypatch):
    return count_calls(monkeypatch)


def cnn():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))


def test_each_fact_of_a_data_set_is_decided_once_per_run(tmp_path, counted):
    folder = make_mixed_folder(tmp_path / "photos", per_class=6)
    result = gpucore.train(dict(data=folder, transforms=TRANSFORMS, epochs=2, batch_size=4, device="cpu",
                                precision="32", progress=False, report=False, val_fraction=0.25,
                                run_dir=str(tmp_path / "runs")), model=cnn())
    assert result.history[-1]["epoch"] == 2
    # two sets (training, validation), one call each; config.py's check of the list is its own
    assert counted["transform_plan"].calls == 2
    assert counted["choose_cache"].calls == 2 and counted["identity_of"].calls == 2
    assert counted["data_stats"].calls == 1  # the training set's statistics; validation takes them
    assert counted["per_image_count"].calls == counted["validation_form"].calls == 0


def test_a_rebuild_at_another_batch_size_keeps_the_plan(tmp_path, counted):
    folder = make_mixed_folder(tmp_path / "photos", per_class=4)
    crop = TRANSFORMS[:1]  # per-image draws only: a sample's crop is the same in any batch
    config = gpucore.config.load_config(dict(data=folder, transforms=crop, batch_size=4, device="cpu"))
    files = gpucore.data.read_image_folder(folder)
    full = training_set(files, config, torch.device("cpu"))
    half = full.with_batch_size(2)
    assert half.plan is full.plan and half.total_batches() == 2 * full.total_batches() == 4
    assert counted["transform_plan"].calls == 1 and counted["data_stats"].calls == 1
    assert full.plan.own_sizes and full.plan.cache == "device" and full.plan.transforms == crop
    first, second = (next(iter(s.batches())) for s in (full, half))
    assert torch.equal(first[0][:2], second[0]) and torch.equal(first[1][:2], second[1])  # same order and draws
    assert os.path.basename(full.plan.description.split("'")[1]) == "photos"


@pytest.fixture(scope="module")
def reported_run(tmp_path_factory):
    """A run with its report on a folder of photos of mixed sizes (RandomResizedCrop brings each to 24 x 24), the
    plans' calls counted while it trains and reports."""
    root = tmp_path_factory.mktemp("reported")
    folder = make_mixed_folder(root / "photos", per_class=6)
    with pytest.MonkeyPatch.context() as monkeypatch:
        calls = count_calls(monkeypatch)
        result = gpucore.train(dict(data=folder, transforms=TRANSFORMS, epochs=1, batch_size=4, device="cpu",
                                    precision="32", progress=False, report=True, val_fraction=0.25,
                                    run_dir=str(tmp_path_factory.mktemp("runs"))), model=cnn())
    return result, folder, calls


@pytest.mark.draws_report
def test_a_run_and_its_report_plan_each_set_once(reported_run):
    result, _, calls = reported_run
    with open(os.path.join(result.run_dir, "training_stats.json")) as handle:
        report = json.load(handle)["report"]
    assert os.path.isfile(report) and "val_predictions.png" in open(report).read()  # drawn from the run's own sets
    # two sets (training, validation), one list plan and one cache decision each, the report's pages included
    assert calls["transform_plan"].calls == 2 and calls["choose_cache"].calls == 2
    assert calls["data_stats"].calls == 1 and calls["identity_of"].calls == 2
    assert calls["per_image_count"].calls == calls["validation_form"].calls == 0


@pytest.mark.draws_report
def test_a_torch_dataset_run_takes_its_input_shape_from_its_plan(tmp_path, counted):
    """Images of mixed sizes each brought to 24 x 24: the run's input shape is [3, 0, 0] (read at their own sizes),
    decided by the training set's plan, not by another look at the transforms list before it."""
    images, labels = _crops(8, mixed=True)
    labels = [label % 2 for label in labels]
    result = gpucore.train(dict(transforms=[{"RandomResizedCrop": {"size": 24}}], epochs=1, batch_size=4,
                                device="cpu", precision="32", progress=False, report=True, run_dir=str(tmp_path)),
                           model=cnn(), train_data=Photos(images, labels, "pil"),
                           val_data=Photos(images[:4], labels[:4], "pil"))
    assert load_checkpoint(os.path.join(result.checkpoint_dir, "last.pt"))["input_shape"] == [3, 0, 0]
    with open(os.path.join(result.run_dir, "training_stats.json")) as handle:
        assert os.path.isfile(json.load(handle)["report"])
    assert counted["transform_plan"].calls == 2  # training and validation sets, the report included
    assert counted["choose_cache"].calls == 0  # torch's loader serves a torch Dataset: no cache to choose


def test_the_plan_records_one_input_and_the_size_its_transforms_give(tmp_path):
    """Each kind of data's input shape as training reads it, and the size the model gets after the set's list (by
    hand: torchvision's Resize(20) takes 16 x 20 to 20 x 25; RandomResizedCrop(24) any image to 24 x 24)."""
    cpu = torch.device("cpu")
    images = torch.randint(0, 256, (5, 12, 10), dtype=torch.uint8)  # N x H x W: one channel
    gray = plan_module.plan_data((images, torch.zeros(5)), device=cpu, training=True, crop_padding=2)
    assert gray.input_shape == [1, 12, 10] and gray.output_size == (12, 10)  # RandomCrop of the images' own size
    features = plan_module.plan_data((torch.randn(5, 7), torch.zeros(5)), device=cpu, training=False)
    assert features.input_shape == [7] and features.output_size is None
    folder = make_mixed_folder(tmp_path / "photos", per_class=2)
    sized = plan_module.plan_data(gpucore.data.read_image_folder(folder, size=(16, 20)), device=cpu, training=False,
                                  transforms=[{"Resize": {"size": 20}}])
    assert sized.input_shape == [3, 16, 20] and sized.output_size == (20, 25)
    own = plan_module.plan_data(gpucore.data.read_image_folder(folder), device=cpu, training=True,
                                transforms=TRANSFORMS)
    assert own.own_sizes and own.input_shape == [3, 0, 0] and own.output_size == (24, 24)
    untransformed = plan_module.plan_data(gpucore.data.read_image_folder(folder), device=cpu, training=False,
                                          normalize=False)
    assert untransformed.input_shape == [3, 0, 0] and untransformed.output_size is None  # no one size


def test_a_loaded_model_plans_its_inputs_once(reported_run, counted, tmp_path):
    result, folder, _ = reported_run
    checkpoint = os.path.join(result.checkpoint_dir, "last.pt")
    summary = gpucore.evaluate(checkpoint, device="cpu", model=cnn(), out=str(tmp_path / "evaluate"))
    assert summary["samples"] == 3  # the run's validation quarter of 12 photos
    assert counted["transform_plan"].calls == 1  # the model's plan, which the evaluated set's plan takes its form from
    assert counted["choose_cache"].calls == 1
    for calls in counted.values():
        calls.calls = 0

    model = gpucore.load(checkpoint, "cpu", model=cnn())
    photos = [Image.open(path) for path in sorted(glob.glob(os.path.join(folder, "china", "*")))[:2]]
    predictions = gpucore.predict(model, folder, device="cpu")
    exported = gpucore.export(model, "safetensors", str(tmp_path / "model.safetensors"))
    cams = gpucore.cam.photo_gradcam(model, photos)
    assert counted["transform_plan"].calls == 1
    assert counted["validation_form"].calls == counted["per_image_count"].calls == 0
    # what the plan holds: the deterministic form of the run's list (torchvision's RandomResizedCrop(24) evaluates as
    # Resize(24) + CenterCrop(24)), read by each of them
    form = [{"Resize": {"size": 24}}, {"CenterCrop": {"size": 24}}]
    assert model.plan.transforms == gpucore.transforms.validation_form(TRANSFORMS) == form
    assert model.reads_own_sizes and model.model_input_shape == [3, 24, 24]
    with open(exported["preprocessing"]) as handle:
        sidecar = json.load(handle)
    assert sidecar["transforms"] == form and sidecar["input_shape"] == [3, 24, 24]
    assert len(predictions.rows) == 12 and len(cams) == 2


def test_a_data_set_in_words_says_how_many_what_one_is_and_where_from(tmp_path):
    """describe_data: one format for messages, evaluation.json and report titles, before and after planning."""
    make_mixed_folder(str(tmp_path / "photos"))
    folder = gpucore.data.read_image_folder(str(tmp_path / "photos"))
    assert plan_module.describe_data(folder) == f"12 images (3-channel uint8) from '{tmp_path / 'photos'}'"
    planned = training_set(folder, gpucore.load_config({"transforms": [{"RandomResizedCrop": {"size": 16}}]}),
                           torch.device("cpu"))
    assert planned.plan.description == f"12 images (3-channel uint8, each at its own size) from '{tmp_path / 'photos'}'"
    sized = gpucore.data.read_image_folder(str(tmp_path / "photos"), size=(20, 30))
    assert plan_module.describe_data(sized, False) == f"12 images (3 x 20 x 30 uint8) from '{tmp_path / 'photos'}'"
    tensors = (torch.zeros(64, 1, 28, 28), torch.zeros(64, dtype=torch.long))
    assert plan_module.describe_data(tensors) == "64 samples of tensors (1, 28, 28) torch.float32, targets ()"
    images, labels = _crops(5, 24)
    samples = gpucore.data.torch_samples.dataset_samples(Photos(images, labels), {})
    assert plan_module.describe_data(samples) == "5 samples of a Photos"
    assert plan_module.describe_data(samples, False) == "5 samples of a Photos (3-channel images of 24 x 24)"
