"""gpucore.transforms.Compose, the public batch API of the `transforms` list: every transform with fixed
(degenerate) ranges equals torchvision.transforms.v2 on real photographs and Fashion-MNIST, parameters drawn as
torchvision draws them (float32), the output dtype rules, the parameters it returns, and its errors."""
import math

import pytest
import torch

import gpucore
from gpucore import transforms
from gpucore.errors import ConfigError

from conftest import require

T = require("torchvision.transforms.v2")
F = require("torchvision.transforms.v2.functional")


def photos():
    datasets = require("sklearn.datasets")
    crops = []
    for name, (top, left) in (("china.jpg", (100, 200)), ("flower.jpg", (150, 300))):
        try:
            photo = torch.from_numpy(datasets.load_sample_image(name).copy()).permute(2, 0, 1)
        except (OSError, ValueError) as exc:
            pytest.skip(f"scikit-learn's sample photo {name} is not available: {exc}")
        crops += [photo[:, top:top + 40, left:left + 48], photo[:, top + 60:top + 100, left + 20:left + 68]]
    return torch.stack(crops).contiguous()


def fashion():
    builtin = pytest.importorskip("gpucore.data.builtin")
    if builtin.find_fashion_mnist() is None:
        pytest.skip("Fashion-MNIST's files are not installed")
    (images, _), _ = builtin.fashion_mnist(train_size=4, val_size=1)
    return images.contiguous()


SHEAR = math.degrees(math.atan(0.2))  # a shear of 0.2: many source coordinates fall exactly between pixels
# (gpucore entry, torchvision transform): fixed ranges or p=1, so torchvision's result does not depend on its draws.
FIXED = [
    ({"ColorJitter": {"brightness": [1.3, 1.3]}}, lambda: T.ColorJitter(brightness=(1.3, 1.3))),
    ({"ColorJitter": {"contrast": [0.6, 0.6]}}, lambda: T.ColorJitter(contrast=(0.6, 0.6))),
    ({"ColorJitter": {"saturation": [1.3, 1.3]}}, lambda: T.ColorJitter(saturation=(1.3, 1.3))),
    ({"ColorJitter": {"hue": [0.1, 0.1]}}, lambda: T.ColorJitter(hue=(0.1, 0.1))),
    ({"RandomRotation": {"degrees": [33.1, 33.1]}}, lambda: T.RandomRotation((33.1, 33.1))),
    ({"RandomRotation": {"degrees": [-12.5, -12.5], "interpolation": "bilinear", "fill": [10, 200, 30]}},
     lambda: T.RandomRotation((-12.5, -12.5), interpolation=T.InterpolationMode.BILINEAR, fill=[10, 200, 30])),
    ({"RandomAffine": {"degrees": 0, "shear": [SHEAR, SHEAR]}}, lambda: T.RandomAffine(0, shear=(SHEAR, SHEAR))),
    ({"RandomAffine": {"degrees": [7.3, 7.3], "scale": [1.2, 1.2], "shear": [SHEAR, SHEAR, -3.0, -3.0]}},
     lambda: T.RandomAffine((7.3, 7.3), scale=(1.2, 1.2), shear=(SHEAR, SHEAR, -3.0, -3.0))),
    ({"RandomAffine": {"degrees": [20, 20], "scale": [0.8, 0.8], "interpolation": "bilinear", "center": [5, 7]}},
     lambda: T.RandomAffine((20, 20), scale=(0.8, 0.8), interpolation=T.InterpolationMode.BILINEAR, center=[5, 7])),
    ({"RandomHorizontalFlip": {"p": 1.0}}, lambda: T.RandomHorizontalFlip(1.0)),
    ({"RandomVerticalFlip": {"p": 1.0}}, lambda: T.RandomVerticalFlip(1.0)),
    ({"RandomGrayscale": {"p": 1.0}}, lambda: T.RandomGrayscale(1.0)),
    ({"RandomInvert": {"p": 1.0}}, lambda: T.RandomInvert(1.0)),
    ({"RandomPosterize": {"bits": 3, "p": 1.0}}, lambda: T.RandomPosterize(3, 1.0)),
    ({"RandomSolarize": {"threshold": 100, "p": 1.0}}, lambda: T.RandomSolarize(100, 1.0)),
    ({"RandomAutocontrast": {"p": 1.0}}, lambda: T.RandomAutocontrast(1.0)),
    ({"RandomEqualize": {"p": 1.0}}, lambda: T.RandomEqualize(1.0)),
    ({"RandomAdjustSharpness": {"sharpness_factor": 2.5, "p": 1.0}}, lambda: T.RandomAdjustSharpness(2.5, 1.0)),
    ({"Resize": {"size": [23, 29]}}, lambda: T.Resize([23, 29])),
    ({"Resize": {"size": [50, 61], "interpolation": "nearest"}},
     lambda: T.Resize([50, 61], interpolation=T.InterpolationMode.NEAREST)),
    ({"CenterCrop": {"size": [21, 17]}}, lambda: T.CenterCrop([21, 17])),
]
COLOR_ONLY = ("saturation", "hue", "RandomGrayscale", "fill")  # need three channels


@pytest.mark.kernel_build
@pytest.mark.parametrize("source", ["photos", "fashion"])
@pytest.mark.parametrize("entry, reference", FIXED, ids=[repr(e) for e, _ in FIXED])
def test_fixed_ranges_equal_torchvision_on_real_images(source, entry, reference):
    if source == "fashion" and any(word in repr(entry) for word in COLOR_ONLY):
        pytest.skip("a colour transform of three-channel images")
    images = photos() if source == "photos" else fashion()
    compose = transforms.Compose([entry])
    got = compose(images, seed=3)
    assert got.dtype == torch.uint8
    transform = reference()
    expected = torch.stack([transform(image) for image in images])
    differ = got.int() - expected.int()
    assert int(differ.abs().sum()) == 0, f"{int((differ != 0).sum())} values differ, by up to {differ.abs().max()}"


def test_a_fixed_range_draws_torchvisions_float32_value():
    # torchvision draws torch.empty(1).uniform_(1.3, 1.3): the float32 1.2999999523, not the double 1.3.
    _, ((_, (codes, magnitudes)),) = transforms.Compose([{"ColorJitter": {"saturation": [1.3, 1.3]}}])(
        torch.zeros(2, 3, 4, 4, dtype=torch.uint8), return_params=True)
    assert magnitudes[magnitudes != 0].tolist() == [torch.tensor(1.3).item()] * 2 != [1.3] * 2


@pytest.mark.kernel_build
@pytest.mark.parametrize("scale, ratio", [((0.3, 0.3), (0.75, 0.75)), ((0.55, 0.55), (1.7, 1.7)),
                                          ((0.2, 0.2), (1.0, 1.0))])
def test_random_resized_crop_with_fixed_ranges_takes_torchvisions_box_size(scale, ratio):
    images = photos()
    compose = transforms.Compose([{"RandomResizedCrop": {"size": [24, 20], "scale": list(scale), "ratio": list(ratio),
                                                         "antialias": True}}])
    got, ((name, (boxes,)),) = compose(images, seed=5, return_params=True)
    assert name == "RandomResizedCrop"
    reference = T.RandomResizedCrop([24, 20], scale=scale, ratio=ratio, antialias=True)
    for image, out, (top, left, height, width) in zip(images, got, boxes.tolist()):
        drawn = reference.make_params([image])
        assert (height, width) == (drawn["height"], drawn["width"])
        assert torch.equal(out, F.resized_crop(image, top, left, height, width, [24, 20], antialias=True))


def test_random_erasing_with_fixed_ranges_takes_torchvisions_box_size():
    images = photos()
    entry = {"RandomErasing": {"p": 1.0, "scale": [0.1, 0.1], "ratio": [0.5, 0.5], "value": [0.2, 0.5, 0.9]}}
    got, ((_, (boxes, _)),) = transforms.Compose([entry])(images, seed=2, return_params=True)
    assert got.dtype == torch.float32  # erasing works on floats: the uint8 batch comes back as float32 in [0, 1]
    reference = T.RandomErasing(1.0, scale=(0.1, 0.1), ratio=(0.5, 0.5), value=[0.2, 0.5, 0.9])
    fill = torch.tensor([0.2, 0.5, 0.9])[:, None, None]
    for image, out, (top, left, height, width) in zip(images, got, boxes.tolist()):
        drawn = reference.make_params([image])
        assert (height, width) == (drawn["h"], drawn["w"])
        expected = F.erase(F.to_dtype(image, torch.float32, scale=True), top, left, height, width, fill)
        assert torch.allclose(out, expected, atol=1e-7, rtol=0)


def test_dtypes_normalize_single_images_and_devices_of_the_batch():
    images = photos()
    flip = transforms.Compose([{"RandomHorizontalFlip": {"p": 1.0}}, {"CenterCrop": {"size": 30}}])
    expected = F.center_crop(F.horizontal_flip(images), [30, 30])
    assert torch.equal(flip(images), expected)
    assert torch.equal(flip(images[1]), expected[1])  # one C x H x W image
    # Floating-point images (values in [0, 1]) keep their dtype through the transforms that move pixels.
    as_float = images.float() / 255
    assert torch.equal(flip(as_float), expected.float() / 255)
    assert flip(as_float.half()).dtype == torch.float16
    # A list that normalises gives float32 from uint8: torchvision's to_dtype(scale=True) then normalize.
    mean, std = [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]
    normalized = transforms.Compose([{"RandomHorizontalFlip": {"p": 1.0}}, {"Normalize": {"mean": mean, "std": std}}])
    want = F.normalize(F.to_dtype(F.horizontal_flip(images), torch.float32, scale=True), mean, std)
    assert torch.allclose(normalized(images), want, atol=1e-5, rtol=0)
    assert torch.allclose(transforms.Compose(["RandomVerticalFlip"], mean=mean, std=std)(images, seed=1),
                          transforms.Compose(["RandomVerticalFlip", {"Normalize": {"mean": mean, "std": std}}])(
                              images, seed=1))


@pytest.mark.kernel_build
def test_the_validation_form_and_the_output_size():
    compose = transforms.Compose([{"RandomResizedCrop": {"size": 24}}, "RandomHorizontalFlip",
                                  {"ColorJitter": {"brightness": 0.4}}])
    assert compose.output_size(40, 48) == (24, 24)
    validation = compose.validation_form()
    assert validation.transforms == [{"Resize": {"size": 24}}, {"CenterCrop": {"size": 24}}]
    images = photos()
    assert torch.equal(validation(images, seed=1), validation(images, seed=2))  # nothing random left
    assert torch.equal(validation(images), F.center_crop(F.resize(images, 24), [24, 24]))


@pytest.mark.kernel_build
def test_seed_and_epoch_draw_what_training_draws():
    # gpucore.DataLoader (no shuffle, no normalisation) serves epoch e's first batch with the parameters Compose
    # draws for seed and epoch e.
    images = photos()
    entry = [{"RandomRotation": {"degrees": 40}}, {"ColorJitter": {"brightness": 0.5, "hue": 0.2}}]
    targets = torch.arange(len(images))
    loader = gpucore.DataLoader((images, targets), batch_size=len(images), shuffle=False, device="cpu", seed=9,
                                transforms=entry, normalize=False)
    compose = transforms.Compose(entry)
    for epoch in range(2):
        loader.load_state_dict({"epoch": epoch, "position": 0})
        batch, _ = next(iter(loader))
        assert torch.equal((batch * 255).round().to(torch.uint8), compose(images, seed=9, epoch=epoch))
    assert not torch.equal(compose(images, seed=9, epoch=0), compose(images, seed=9, epoch=1))


@pytest.mark.parametrize("call, message", [
    (lambda c: c([[1, 2]]), "must be a torch.Tensor"),
    (lambda c: c(torch.zeros(1, 1, 3, 4, 4, dtype=torch.uint8)), "N x C x H x W or C x H x W"),
    (lambda c: c(torch.zeros(1, 3, 4, 4, dtype=torch.int32)), "uint8 .* or floating point"),
    (lambda c: c(torch.zeros(1, 3, 4, 4), seed=-1), "seed and epoch must be >= 0"),
    (lambda c: c(torch.zeros(1, 3, 4, 4)), "ColorJitter: works on uint8 images"),
])
def test_bad_calls_are_config_errors_naming_what_is_wrong(call, message):
    compose = transforms.Compose(["RandomHorizontalFlip", {"ColorJitter": {"brightness": 0.4}}])
    with pytest.raises(ConfigError, match=message):
        call(compose)


def test_bad_lists_name_the_entry():
    with pytest.raises(ConfigError, match=r"transforms\[1\] RandomRotation: argument 'degrees' is required"):
        transforms.Compose(["RandomHorizontalFlip", "RandomRotation"])
    with pytest.raises(ConfigError, match="mean and std together"):
        transforms.Compose(["RandomHorizontalFlip"], mean=[0.5])
