"""A torch Dataset as people write them, on crops of real photos: uint8 tensors (PILToTensor, decode_image) train as the
same images given as (x, y) tensors do; PIL images and uint8 images of mixed sizes go through config key transforms one
by one, as a folder's do, and resume exactly; dict samples (Hugging Face rows) are read by their keys; a Dataset's
classes give the model its outputs and the first sample its input channels; every error about the samples says what
they were."""
import json

import numpy as np
import pytest
import torch
from PIL import Image

import gpucore
from gpucore.data.epoch_data import training_set
from gpucore.config import load_config
from gpucore.models.registry import output_count
from conftest import assert_resume_matches
from test_photo_folders import _more_photos, _photos

RUN = dict(epochs=1, device="cpu", precision="32", progress=False, batch_size=8, model="fast_cnn", report=False,
           val_fraction=0.0)
CLASSES = ["china", "flower", "coffee", "chelsea"]


def _crops(count=32, size=32, mixed=False, seed=0):
    """`count` RGB crops (H x W x 3 uint8) of real photos and their labels, a class per photo (CLASSES; two where
    scikit-image is missing): `size` a side, or 24 to 64 pixels a side each when `mixed`."""
    photos = (_photos() + _more_photos()[:2])
    generator = np.random.default_rng(seed)
    images, labels = [], []
    for i in range(count):
        label = i % len(photos)
        photo = photos[label]
        height, width = (int(v) for v in generator.integers(24, 65, 2)) if mixed else (size, size)
        top = int(generator.integers(0, photo.shape[0] - height + 1))
        left = int(generator.integers(0, photo.shape[1] - width + 1))
        images.append(np.ascontiguousarray(photo[top:top + height, left:left + width]))
        labels.append(label)
    return images, labels


class Photos(torch.utils.data.Dataset):
    """A Dataset as scripts write one: `form` "tensor" (uint8 C x H x W, as torchvision's PILToTensor and
    decode_image give), "pil" (PIL images) or "dict" ({"image": PIL image, "label": int}); `classes` as ImageFolder
    has them."""

    def __init__(self, images, labels, form="tensor", classes=None):
        self.images, self.labels, self.form = images, labels, form
        if classes is not None:
            self.classes = classes

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        image, label = self.images[index], self.labels[index]
        if self.form == "tensor":
            return torch.from_numpy(image).permute(2, 0, 1).contiguous(), label
        if self.form == "dict":
            return {"image": Image.fromarray(image), "label": label}
        return Image.fromarray(image), label


def _train(tmp_path, name, data, **config):
    return gpucore.train(dict(RUN, run_dir=str(tmp_path / name), **config), train_data=data)


def test_uint8_dataset_trains_as_the_same_images_given_as_tensors(tmp_path):
    """The same images, scaled to [0, 1] and normalised with the data's statistics, in the same order: the first
    epoch's losses are those of the (x, y) tensors' run."""
    images, labels = _crops(48)
    x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous()
    y = torch.tensor(labels)
    config = dict(model_kwargs={"num_classes": 4, "in_channels": 3}, epochs=2, log_every_n_steps=1)
    as_tensors = _train(tmp_path, "tensors", (x, y), **config)
    from_dataset = _train(tmp_path, "dataset", Photos(images, labels), **config)
    for ours, theirs in zip(from_dataset.history, as_tensors.history):
        assert ours["train_loss"] == pytest.approx(theirs["train_loss"], rel=1e-5)
    for pil in (Photos(images, labels, "pil"), Photos(images, labels, "dict")):  # the same images as PIL, in dicts
        assert _train(tmp_path, pil.form, pil, **config).history[0]["train_loss"] == pytest.approx(
            as_tensors.history[0]["train_loss"], rel=1e-5)


def test_dataset_samples_scale_and_normalise_as_torchvision_does(tmp_path):
    """A batch as the engine gets it: the images scaled by 1/255 and standardised with the per-channel mean and std
    of all the data set's pixels, as torchvision's ToTensor and Normalize with those statistics give them."""
    from torchvision.transforms import v2

    images, labels = _crops(16)
    plan_set = training_set(Photos(images, labels, "pil"), load_config(dict(RUN, shuffle=False)), torch.device("cpu"))
    pixels = torch.from_numpy(np.stack(images)).double().div(255).reshape(-1, 3)
    mean, std = pixels.mean(0), pixels.std(0)
    assert plan_set.plan.normalization[0] == pytest.approx(mean.tolist(), abs=1e-7)
    assert plan_set.plan.normalization[1] == pytest.approx(std.tolist(), abs=1e-7)
    expected = v2.Compose([v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True),
                           v2.Normalize(*plan_set.plan.normalization)])
    inputs, targets = next(plan_set.batches())
    assert torch.allclose(inputs, torch.stack([expected(Image.fromarray(i)) for i in images[:8]]), atol=1e-5)
    assert targets.tolist() == labels[:8]


@pytest.mark.parametrize("form", ["pil", "tensor"])
def test_images_of_mixed_sizes_go_through_transforms_one_by_one_and_resume_exactly(tmp_path, form):
    """PIL images, or uint8 ones of mixed sizes: config key transforms brings each to 32 x 32 as it does a folder's
    images; each sample's draws are its own (seed, epoch, sample), so a run stopped after its first epoch and resumed
    ends with the uninterrupted run's model, bitwise."""
    images, labels = _crops(24, mixed=True)
    config = dict(RUN, epochs=2, transforms=[{"RandomResizedCrop": {"size": 32, "scale": [0.5, 1.0]}},
                                             "RandomHorizontalFlip"])

    class Stop:
        def on_epoch_end(self, trainer, epoch, record):
            if epoch == 1:
                raise KeyboardInterrupt

    straight, _, resumed = assert_resume_matches(tmp_path, config, Stop(),
                                                 given=lambda: dict(train_data=Photos(images, labels, form)))
    assert resumed.history[-1]["train_loss"] == straight.history[-1]["train_loss"]


def test_classes_give_a_built_in_model_its_outputs_and_the_first_sample_its_channels(tmp_path, recwarn):
    """ImageFolder's `classes`: fast_cnn by name gets 4 outputs and 3 input channels without model_kwargs, no warning
    of unused outputs, and no top-5 accuracy on a 4-class problem; dict samples (Hugging Face's rows) likewise."""
    images, labels = _crops(16)
    grey = [np.asarray(Image.fromarray(image).convert("L")) for image in images]
    for name, data, channels in (("pil", Photos(images, labels, "pil", classes=CLASSES), 3),
                                 ("dict", Photos(images, labels, "dict", classes=CLASSES), 3),
                                 ("grey", Photos(grey, labels, "pil", classes=CLASSES), 1)):
        result = _train(tmp_path, name, data, val_fraction=0.25)
        assert output_count(result.model) == 4
        stats = json.loads(open(result.stats_path).read())
        assert stats["model_kwargs_from_data"] == {"num_classes": 4, "in_channels": channels}
        assert stats["classes"] == CLASSES
        assert "val_accuracy" in result.history[0] and not any("top5" in key for key in result.history[0])
    assert not [w for w in recwarn if "outputs" in str(w.message)]


def test_labels_of_a_dataset_without_class_names_give_num_classes(tmp_path):
    """A Dataset with `targets` (torchvision's data sets have them) but no `classes`: one output per label up to the
    largest."""
    images, labels = _crops(8)
    data = Photos(images, labels)
    data.targets = labels
    result = _train(tmp_path, "targets", data)
    assert output_count(result.model) == max(labels) + 1
