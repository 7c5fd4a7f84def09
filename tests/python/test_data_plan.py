"""One plan per data set (gpucore/data/plan.py): the cache, the own-sizes decision, the normalisation statistics and
the transforms' forms are each decided once per set for a whole run, validation included, and an out-of-memory
rebuild keeps the plan and changes only the batch size."""
import os

import pytest
import torch
from torch import nn

import gpucore
from gpucore import _C
from gpucore.data import plan as plan_module
from gpucore.data.epoch_data import training_set
from test_photo_folders import make_mixed_folder

TRANSFORMS = [{"RandomResizedCrop": {"size": 24, "scale": [0.5, 1.0]}}, "RandomHorizontalFlip"]


class Counted:
    """Wraps a function and counts its calls."""

    def __init__(self, function):
        self.function, self.calls = function, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.function(*args, **kwargs)


@pytest.fixture
def counted(monkeypatch):
    calls = {}
    for owner, names in ((_C, ("transform_plan", "per_image_count", "validation_form", "check_transforms")),
                         (plan_module, ("choose_cache", "data_stats", "identity_of"))):
        for name in names:
            calls[name] = Counted(getattr(owner, name))
            monkeypatch.setattr(owner, name, calls[name])
    return calls


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
