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
from gpucore.data.epoch_data import training_set, validation_set
from gpucore.config import load_config
from gpucore.models.surgery import output_count
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
    """The same images, scaled to [0, 1] and normalised with the data's statistics (exact integer sums: the same
    whether the pixels come as one tensor or image by image), in the same order: the first epoch's loss is the (x, y)
    tensors' run's, exactly."""
    images, labels = _crops(32)
    x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous()
    y = torch.tensor(labels)
    config = dict(model_kwargs={"num_classes": 4, "in_channels": 3})
    as_tensors = _train(tmp_path, "tensors", (x, y), **config).history[0]["train_loss"]
    # the same images as uint8 tensors (PILToTensor's), as PIL images, in dicts
    for data in (Photos(images, labels), Photos(images, labels, "pil"), Photos(images, labels, "dict")):
        assert _train(tmp_path, data.form, data, **config).history[0]["train_loss"] == as_tensors


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


def test_validation_images_of_mixed_sizes_are_resized_and_cropped_as_torchvision_does():
    """The validation set of PIL images of mixed sizes, with RandomResizedCrop in config key transforms: each image
    through its deterministic form, Resize + CenterCrop, as torchvision's v2 transforms give it (within one intensity
    level: gpucore resizes uint8 images with ATen's antialiased bilinear kernel and rounds)."""
    from torchvision.transforms import v2

    images, labels = _crops(8, mixed=True)
    config = load_config(dict(RUN, transforms=[{"RandomResizedCrop": {"size": 32}}]))
    served = validation_set(Photos(images, labels, "pil"), config, torch.device("cpu"), ([0.0] * 3, [1.0] * 3))
    inputs, targets = next(served.batches())
    expected = v2.Compose([v2.PILToTensor(), v2.Resize(32), v2.CenterCrop(32), v2.ToDtype(torch.float32, scale=True)])
    reference = torch.stack([expected(Image.fromarray(image)) for image in images])
    assert inputs.shape == (8, 3, 32, 32) and targets.tolist() == labels
    assert (inputs - reference).abs().max().item() <= 1 / 255 + 1e-6


def test_each_sample_draws_its_own_augmentation_of_seed_epoch_and_sample():
    """The images an epoch serves do not depend on the batch size; another epoch or seed draws anew."""
    images, labels = _crops(12, mixed=True)
    transforms = [{"RandomResizedCrop": {"size": 24}}, "RandomHorizontalFlip", {"ColorJitter": {"brightness": 0.4}}]

    def served(batch_size, epoch=0, seed=0):
        config = load_config(dict(RUN, shuffle=False, batch_size=batch_size, seed=seed, transforms=transforms))
        return torch.cat([x for x, _ in training_set(Photos(images, labels, "pil"), config,
                                                      torch.device("cpu")).batches(epoch)])

    first = served(4)
    assert torch.equal(first, served(12)) and torch.equal(first, served(5))
    assert not torch.equal(first, served(4, epoch=1)) and not torch.equal(first, served(4, seed=1))


@pytest.mark.parametrize("form", ["pil", "tensor"])
def test_images_of_mixed_sizes_go_through_transforms_one_by_one_and_resume_exactly(tmp_path, form):
    """PIL images, or uint8 ones of mixed sizes: config key transforms brings each to 32 x 32 as it does a folder's
    images; each sample's draws are its own (seed, epoch, sample), so a run stopped in the middle of its second epoch
    and resumed ends with the uninterrupted run's model, bitwise."""
    images, labels = _crops(24, mixed=True)
    config = dict(RUN, epochs=2, log_every_n_steps=1, transforms=[
        {"RandomResizedCrop": {"size": 32, "scale": [0.5, 1.0]}}, "RandomHorizontalFlip"])

    class Stop:
        def on_log(self, trainer, step, metrics):
            if metrics["epoch"] == 2 and step == 5:  # 3 steps an epoch: mid-epoch 2
                raise KeyboardInterrupt

    _, _, resumed = assert_resume_matches(tmp_path, config, Stop(),
                                          given=lambda: dict(train_data=Photos(images, labels, form)))
    assert resumed.status == "completed" and resumed.steps == 6


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


def test_a_hugging_face_dataset_trains_by_its_columns_and_class_names(tmp_path):
    """A datasets.Dataset of PIL images and a ClassLabel, passed as it is: rows read by their keys ("image",
    "label"), the ClassLabel's names as the run's classes, split by val_fraction; other column names by data_kwargs."""
    datasets = pytest.importorskip("datasets")
    images, labels = _crops(16)
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=CLASSES)})
    rows = datasets.Dataset.from_dict({"image": [Image.fromarray(i) for i in images], "label": labels},
                                      features=features)
    result = _train(tmp_path, "hf", rows, val_fraction=0.25)
    stats = json.loads(open(result.stats_path).read())
    assert stats["classes"] == CLASSES and output_count(result.model) == 4
    assert stats["validation"]["source"] == "val_fraction"
    for form in ("torch", "numpy"):  # images as uint8 C x H x W tensors, or H x W x C arrays: the same losses
        formatted = _train(tmp_path, f"hf-{form}", rows.with_format(form), val_fraction=0.25)
        assert formatted.history[0]["train_loss"] == pytest.approx(result.history[0]["train_loss"], rel=1e-5)
    renamed = rows.rename_columns({"image": "photo", "label": "kind"})
    with pytest.raises(gpucore.ConfigError, match=r"keys \['photo', 'kind'\].*data_kwargs image_key"):
        _train(tmp_path, "hf-renamed", renamed)
    result = _train(tmp_path, "hf-keys", renamed, data_kwargs={"image_key": "photo", "label_key": "kind"})
    assert json.loads(open(result.stats_path).read())["classes"] == CLASSES


class Returning(torch.utils.data.Dataset):
    """16 samples, each what `sample(i)` returns."""

    def __init__(self, sample):
        self.sample = sample

    def __len__(self):
        return 16

    def __getitem__(self, index):
        return self.sample(index)


def test_every_error_about_the_samples_says_what_they_were_and_what_gpucore_takes(tmp_path):
    """Samples of a form gpucore does not take, images of mixed sizes without a transform that brings them to one, a
    dict without the keys: a ConfigError naming the first two samples (type, dtype, shape) and what is accepted, never
    the model's first-batch diagnosis."""
    images, labels = _crops(16, mixed=True)
    photo = lambda i: torch.from_numpy(images[i]).permute(2, 0, 1)  # noqa: E731
    one_size = lambda i: photo(i)[:, :24, :24]  # noqa: E731
    cases = [
        (lambda i: (photo(i).long(), labels[i]), r"inputs are tensor torch.int64 \(3, \d+, \d+\) \(the first two "
         r"samples: a tuple \(tensor torch.int64.*; a tuple \(tensor torch.int64.*PIL image, a uint8 tensor"),
        (lambda i: (photo(i), f"class {labels[i]}"), r"target is str 'class 0'.*class index \(int\)"),
        (lambda i: (photo(i), labels[i]), r"images are of mixed sizes \(the first two samples: a tuple \(tensor "
         rf"torch.uint8 \(3, {images[0].shape[0]}, {images[0].shape[1]}\).*RandomResizedCrop"),
        (lambda i: (one_size(i) if i != 9 else photo(i), labels[i]),
         r"a batch of the torch Dataset holds inputs of shapes .*\(3, 24, 24\).*the first two samples.*"
         "RandomResizedCrop"),
        (lambda i: {"pixels": photo(i), "y": labels[i]}, r"dicts with keys \['pixels', 'y'\].*data_kwargs image_key"),
        (lambda i: Image.fromarray(images[i]), r"a sample of the torch Dataset is PIL image RGB \d+ x \d+ .*pair"),
        (lambda i: (torch.rand(3, 24, 24), labels[i]), r"inputs are float tensors \(the first two samples: a tuple "
         r"\(tensor torch.float32 \(3, 24, 24\).*return uint8 images"),
    ]
    for number, (sample, message) in enumerate(cases):
        transforms = ["RandomHorizontalFlip"] if "float" in message else []
        with pytest.raises(gpucore.ConfigError, match=message) as caught:
            _train(tmp_path, f"error{number}", Returning(sample), transforms=transforms,
                   model_kwargs={"num_classes": 4})
        assert "Check that the model" not in str(caught.value)

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(Returning(lambda i: (photo(i), labels[i])))

    with pytest.raises(gpucore.ConfigError, match=r"a torch IterableDataset \(Stream\): wrap it in a DataLoader"):
        _train(tmp_path, "stream", Stream())
    rows = torch.utils.data.DataLoader(Returning(lambda i: {"image": one_size(i), "label": labels[i]}), batch_size=4)
    with pytest.raises(gpucore.ConfigError, match=r"a batch of the DataLoader is \{'image': tensor torch.uint8 "
                                                  r"\(4, 3, 24, 24\), 'label': tensor torch.int64 \(4,\)\}, not "
                                                  r"\(inputs, targets\) tensors; pass its Dataset as train_data"):
        _train(tmp_path, "dict-loader", rows)
