"""The set-up steps of a run on small stand-ins (issue 71, item 1): the data step (training/setup_data.py), the model
step (training/setup_model.py) and the fit checks they call (data/fits.py), each compared with values computed here
by hand, with torch or with scikit-learn; and the order they run in, measured by following the config through a whole
`gpucore.train` (config_trail below)."""
import dataclasses
import os
import sys

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

import gpucore
from gpucore.config import TrainConfig, load_config, with_real_values
from gpucore.data import fits
from gpucore.errors import ConfigError
from gpucore.models.registry import build_model
from gpucore.tasks import task_of
from gpucore.training import distributed
from gpucore.training.setup_data import setup_data
from gpucore.training.setup_model import setup_model
from gpucore.device.select import resolve_precision, select_device
from conftest import require

CPU = {"device": "cpu", "precision": "32", "progress": False, "report": False, "seed": 3}
SIDE = 16


def _config(**keys):
    return with_real_values(load_config(dict(CPU, **keys)))


def _data_step(config, train_data=None, val_data=None):
    return setup_data(config, task_of(config), distributed.environment({}), torch.device("cpu"), train_data, val_data)


def _model_step(config, task, data, model=None):
    choice = select_device("cpu")
    policy = resolve_precision(config.precision, choice.device)
    return setup_model(config, task, data, distributed.environment({}), choice, policy, model)


def _photo_tensors(count, seed=0):
    """`count` 1 x SIDE x SIDE uint8 crops of scikit-image's camera photo and labels 0..2 drawn with `seed`."""
    photo = torch.from_numpy(require("skimage.data").camera())
    generator = torch.Generator().manual_seed(seed)
    tops = torch.randint(0, photo.shape[0] - SIDE, (count,), generator=generator)
    lefts = torch.randint(0, photo.shape[1] - SIDE, (count,), generator=generator)
    images = torch.stack([photo[t:t + SIDE, l:l + SIDE] for t, l in zip(tops.tolist(), lefts.tolist())])[:, None]
    return images, torch.randint(0, 3, (count,), generator=generator)


def _segmentation_folder(root, count=4, bands=(95, 160)):
    """images/ and masks/ of `count` SIDE x SIDE crops of scikit-image's astronaut, the masks its luminance `bands`
    (classes 0, 1, 2; one band: 0 and 1)."""
    photo = require("skimage.data").astronaut()
    for sub in ("images", "masks"):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    for index in range(count):
        crop = np.ascontiguousarray(photo[40 * index:40 * index + SIDE, 100:100 + SIDE])
        grey = np.asarray(Image.fromarray(crop).convert("L"))
        Image.fromarray(crop).save(os.path.join(root, "images", f"{index}.png"))
        Image.fromarray(np.digitize(grey, bands).astype(np.uint8)).save(os.path.join(root, "masks", f"{index}.png"))
    return str(root)


class _Classifier(nn.Module):
    """A tiny classifier of 1 x SIDE x SIDE images (or 3-channel ones) with a Linear head of `outputs`."""

    def __init__(self, outputs=3, channels=1):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(channels, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2))
        self.fc = nn.Linear(16, outputs)

    def forward(self, x):
        return self.fc(self.features(x).flatten(1))


# ---- the data step ------------------------------------------------------------------------------------------------
def test_data_step_reads_what_tensors_say():
    (x, y), (xv, yv) = _photo_tensors(24), _photo_tensors(8, seed=1)
    yv[0] = 4  # a class only the validation data has still needs an output
    config, task, data = _data_step(_config(batch_size=8), (x, y), (xv, yv))
    assert config.ignore_index == task.ignore_index == -100  # torch's default: no masks
    assert data.class_count == 5 and data.classes is None
    assert data.input_shape == [1, SIDE, SIDE]
    assert data.validation == {"source": "val_data"} and data.given
    assert data.labels is None and data.imbalance is None  # no class_weights, no sampler; balanced labels
    train, val = data.samples
    assert torch.equal(train[0], x) and torch.equal(val[1], yv)
    assert data.train_set.total_batches() == 3 and data.val_set.total_batches() == 1
    pixels = x.double() / 255  # the batches' normalisation: the training pixels' mean and std
    mean, std = data.normalization
    assert mean[0] == pytest.approx(pixels.mean().item(), rel=1e-5)
    assert std[0] == pytest.approx(pixels.std().item(), rel=1e-3)
    data.close()


def test_data_step_holds_out_a_seeded_share_and_counts_imbalance():
    x, _ = _photo_tensors(40)
    y = torch.tensor([0] * 30 + [1] * 3 + [2] * 7)
    config, task, data = _data_step(_config(val_fraction=0.25, sampler="balanced"), (x, y))
    assert data.validation["source"] == "val_fraction" and data.validation["of"] == "train_data"
    train, val = data.samples
    assert len(train[1]) == 30 and len(val[1]) == 10
    assert torch.equal(data.labels, train[1])  # the sampler weighs the training labels
    assert data.imbalance == "config key sampler is balanced"
    counts = torch.bincount(train[1], minlength=3).double()  # the balanced sampler: 1 / the class's count
    assert torch.equal(data.train_set._settings["sampling_weights"], 1.0 / counts[train[1]])
    data.close()


def test_data_step_resolves_ignore_index_void_for_masks(tmp_path):
    folder = _segmentation_folder(tmp_path / "seg")
    config, task, data = _data_step(_config(data=folder, loss="cross_entropy", val_fraction=0.0))
    assert config.ignore_index == task.ignore_index == 255  # a mask's void, as VOC marks it
    assert vars(task) == vars(task_of(config))  # the task brought up to the data is the config's
    assert data.class_count is None and not data.given
    assert data.input_shape == [3, 0, 0]  # a folder read without a size: its images at their own sizes
    data.close()


def test_one_class_is_refused_before_any_model():
    x, _ = _photo_tensors(8)
    with pytest.raises(ConfigError, match=r"^train_data has 1 class \(id 0\); classification \(loss cross_entropy\) "
                                          r"needs 2 classes at least"):
        _data_step(_config(), (x, torch.zeros(8, dtype=torch.int64)))


# ---- the model step -----------------------------------------------------------------------------------------------
def test_model_step_takes_num_classes_and_channels_from_the_data_and_seeds_the_weights():
    (x, y), (xv, yv) = _photo_tensors(24), _photo_tensors(8, seed=1)
    config, task, data = _data_step(_config(model="fast_cnn"), (x, y), (xv, yv))
    config, task, model, placement = _model_step(config, task, data)
    assert model.from_data == {"num_classes": 3, "in_channels": 1}
    assert config.model_kwargs == {"num_classes": 3, "in_channels": 1}
    torch.manual_seed(3)  # config key seed, as a plain script builds the same model
    reference = build_model("fast_cnn", {"num_classes": 3, "in_channels": 1})
    for (name, ours), theirs in zip(model.module.state_dict().items(), reference.state_dict().values()):
        assert torch.equal(ours, theirs), name
    assert model.forward is model.module and model.ema is None and model.pretrained is None
    assert placement.device == torch.device("cpu") and placement.policy.precision == "32"
    assert placement.channels_last  # auto: a conv net on the CPU
    data.close()


def test_model_step_refuses_too_few_outputs_and_warns_of_too_many():
    (x, y), (xv, yv) = _photo_tensors(24), _photo_tensors(8, seed=1)
    config, task, data = _data_step(_config(), (x, y), (xv, yv))
    with pytest.raises(ConfigError, match=r"^the model given to train\(\) has 2 outputs, but the data has 3 classes "
                                          r"\(ids 0 to 2\): give it a head of that many outputs$"):
        _model_step(config, task, data, _Classifier(outputs=2))
    with pytest.warns(UserWarning, match=r"has 5 outputs, but the data has 3 classes \(ids 0 to 2\): outputs 3 to 4 "
                                         r"name no class"):
        _model_step(config, task, data, _Classifier(outputs=5))
    data.close()


def test_model_step_weighs_classes_as_scikit_learn_does():
    compute_class_weight = require("sklearn.utils.class_weight").compute_class_weight
    x, _ = _photo_tensors(30)
    y = torch.tensor([0] * 20 + [1] * 6 + [2] * 4)
    config, task, data = _data_step(_config(class_weights="balanced"), (x, y))
    _, task, _, _ = _model_step(config, task, data, _Classifier(outputs=3))
    expected = compute_class_weight("balanced", classes=np.arange(3), y=y.numpy())
    assert task.class_weights == pytest.approx(expected.tolist(), rel=1e-12)
    data.close()


def test_model_step_refuses_a_classifier_for_masks(tmp_path):
    folder = _segmentation_folder(tmp_path / "seg", bands=(128,))
    config, task, data = _data_step(_config(data=folder, model="fast_cnn", loss="bce_with_logits", val_fraction=0.0,
                                      data_kwargs={"size": [SIDE, SIDE]}))
    with pytest.raises(ConfigError, match=r"with model 'fast_cnn', a classifier \(outputs of shape \(1, 1\): one row "
                                          r"per image\)"):
        _model_step(dataclasses.replace(config, model_kwargs={"num_classes": 1}), task, data)
    data.close()
    # read at their own sizes, nothing to probe with: the Linear head tells
    config, task, data = _data_step(_config(data=folder, model="fast_cnn", loss="bce_with_logits", val_fraction=0.0))
    with pytest.raises(ConfigError, match=r"a classifier \(its head [a-z_.0-9]+ is a Linear layer of 1 outputs\)"):
        _model_step(dataclasses.replace(config, model_kwargs={"num_classes": 1}), task, data)
    data.close()


# ---- the fit checks, as training and evaluation call them -----------------------------------------------------------
def test_classifier_evidence_from_the_output_else_the_head():
    model = _Classifier(outputs=4)
    output = fits.probe_output(model, [1, SIDE, SIDE])
    assert torch.equal(output, model.eval()(torch.zeros(1, 1, SIDE, SIDE)).detach())
    assert fits.classifier_evidence(output, model) == "outputs of shape (1, 4): one row per image"
    # images at their own sizes: nothing to probe with, the Linear head tells
    assert fits.probe_output(model, [1, 0, 0]) is None
    assert fits.classifier_evidence(None, model) == "its head fc is a Linear layer of 4 outputs"
    segmenter = nn.Conv2d(1, 3, 1)
    assert fits.classifier_evidence(fits.probe_output(segmenter, [1, SIDE, SIDE]), segmenter) is None


def test_probe_leaves_the_model_in_training_mode_and_its_norms_untouched():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(2 * 14 * 14, 3)).train()
    before = model[1].running_mean.clone()
    assert fits.probe_output(model, [1, SIDE, SIDE]).shape == (1, 3)
    assert model.training and torch.equal(model[1].running_mean, before)
    assert fits.probe_output(model, [1, 8, 8]) is None  # a shape it does not take: no probe, no error


def test_fit_checks_name_the_data_for_a_task_that_does_not_train_on_masks(tmp_path):
    from gpucore.data.readers import read_segmentation

    folder = _segmentation_folder(tmp_path / "seg")
    masks = read_segmentation(os.path.join(folder, "images"), os.path.join(folder, "masks"))
    with pytest.raises(ConfigError, match=r"^data 'seg' holds images and their masks \(segmentation\), but loss "
                                          r"'ctc' \(.*\) does not train on masks: set loss: dice_bce"):
        fits.check_fits_task("seg", task_of(_config(loss="ctc")), masks)
    fits.check_fits_task("seg", task_of(_config(loss="cross_entropy")), masks)  # it does


# ---- what callbacks receive of the parts ---------------------------------------------------------------------------
def test_trainer_gives_callbacks_the_runs_parts(tmp_path):
    (x, y), (xv, yv) = _photo_tensors(16), _photo_tensors(8, seed=1)
    seen = {}

    class Reads(gpucore.Callback):
        def on_epoch_end(self, trainer, epoch, record):
            seen.update(kwargs=dict(trainer.config.model_kwargs), shape=trainer.data.input_shape,
                        val=trainer.data.val_set.data, path=trainer.run_dir.path, model=trainer.model,
                        whole_run=hasattr(trainer, "run"))
            trainer.note_host_read("my_callback")

    result = gpucore.train(dict(CPU, model="fast_cnn", epochs=2, batch_size=8, run_dir=str(tmp_path)),
                           train_data=(x, y), val_data=(xv, yv), callbacks=[Reads()])
    assert seen["kwargs"] == {"num_classes": 3, "in_channels": 1} and seen["shape"] == [1, SIDE, SIDE]
    assert torch.equal(seen["val"][0], xv) and seen["path"] == result.run_dir
    assert seen["model"] is result.model
    assert not seen["whole_run"]  # the documented pieces, not the whole run
    assert result.host_syncs_by_source["my_callback"] == 2  # once per epoch


# ---- the order: the config followed through a whole run -----------------------------------------------------------
def config_trail(run) -> list:
    """The files of gpucore the config passes through while `run()` runs, in order: a call of a gpucore function
    that receives a TrainConfig (an argument, self included) enters its file; the call's return goes back to the file
    of the config-receiving call below it (gpucore.train's own frame, which receives what becomes the config, is
    the first)."""
    package = os.path.dirname(gpucore.__file__)
    train_code = gpucore.train.__code__
    stack, rooms = [], []

    def profile(frame, event, arg):
        code = frame.f_code
        if event == "call" and code.co_filename.startswith(package):
            names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
            if code is train_code or any(isinstance(frame.f_locals.get(name), TrainConfig) for name in names):
                stack.append(frame)
                rooms.append(os.path.relpath(code.co_filename, package))
        elif event == "return" and stack and stack[-1] is frame:
            stack.pop()
            if stack:
                rooms.append(os.path.relpath(stack[-1].f_code.co_filename, package))

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return rooms


def returns_to_rooms_left(rooms: list) -> int:
    """How often the trail goes back into a room (a file) it has left before."""
    seen, previous, count = set(), None, 0
    for room in rooms:
        if room != previous:
            count += room in seen
            seen.add(room)
            previous = room
    return count


def test_following_the_config_through_a_run_returns_to_few_rooms(tmp_path):
    """A run on tensors without report. Before the set-up was in steps (main at 275be96: data, model, data, model),
    this trail went back into a file it had left 49 times (29 counting folders as the rooms: training, data, models,
    ...); set up as steps, each given the parts before it, 36 (25 by folders). The loggers now take the config itself
    where they took the whole run. The loop's parts then took the pieces of the run they read: Checkpointing and
    FitLoop the config itself, so the trail follows it into them (+2); the engine step decides the batching and the
    scaled lr once, which the run's position and training_stats.json read from its part instead of deriving them from
    the config again (-6); make_ema and RunStats take the keys they read (-1: RunStats never entered the trail): 31 (25
    by folders). The Trainer then took the config, data, run directory, model and engine parts where it held the whole
    run, so the trail follows the config into trainer.py and back (+1; +2 by folders): 32 (27 by folders). The data
    step then returned the task brought up to the data (ignore_index, vocabulary), which build_run had derived from
    the config again (-2): 30 (25 by folders); one call planned both data sets, where the data step entered
    epoch_data.py once per set (-2): 28 (23 by folders); the engine step scaled the lr from the batching it decided,
    where scaled_lr derived the batching again (-2): 26 (23 by folders); make_loggers gave each logger what it reads
    (config.json's values flattened once for TensorBoard and MLflow), where each took the config and TensorBoard
    called config.to_dict() (-4; -2 by folders): 22 (21 by folders); device/placement.py took the keys it reads, as
    device/select.py does, where place_model and forward_config each took the config for one key (-3): 19 (18 by
    folders). What is left: train() asks config.py twice (the checked config, then its real values), the process
    and the run directory each read config.to_dict(), and the loop's parts, built by fit_loop(run), return to
    train.py's frame."""
    (x, y), (xv, yv) = _photo_tensors(32), _photo_tensors(8, seed=1)
    rooms = config_trail(lambda: gpucore.train(dict(CPU, model="fast_cnn", epochs=1, batch_size=16,
                                                    run_dir=str(tmp_path)), train_data=(x, y), val_data=(xv, yv)))
    order = [room for index, room in enumerate(rooms) if index == 0 or rooms[index - 1] != room]
    steps = [room for room in order if room.startswith("training/setup_") or room == "training/engine_config.py"]
    assert list(dict.fromkeys(steps)) == ["training/setup_data.py", "training/setup_model.py",
                                          "training/engine_config.py"]
    assert "training/setup_data.py" not in order[order.index("training/setup_model.py"):]  # data done before the model
    assert returns_to_rooms_left(rooms) <= 19, order
    assert returns_to_rooms_left([room.split("/")[0] for room in rooms]) <= 18, order  # by folders


if __name__ == "__main__":  # the trail of one run, file by file
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        images, labels = torch.randint(0, 256, (32, 1, SIDE, SIDE), dtype=torch.uint8), torch.arange(32) % 3
        trail = config_trail(lambda: gpucore.train(dict(CPU, model="fast_cnn", epochs=1, batch_size=16,
                                                        run_dir=directory), train_data=(images, labels)))
    print("\n".join(room for index, room in enumerate(trail) if index == 0 or trail[index - 1] != room))
    print("returns to rooms left:", returns_to_rooms_left(trail))
