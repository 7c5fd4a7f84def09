"""The geometric transforms of config key `transforms`: gpucore's ops and transforms against
torchvision.transforms.v2 on the same uint8 images given the same parameters (within one intensity level,
two for resampling), their parameter distributions against torchvision's make_params, and the pipeline's
plumbing: config errors, validation's deterministic form, masks, streaming, bitwise resume."""
import math
import os

import numpy as np
import pytest
import torch
from torch import nn

import gpucore
from gpucore import _C, data, transforms
from gpucore.evaluation import load
from conftest import assert_resume_matches, require

tv = require("torchvision")
F = require("torchvision.transforms.v2.functional")
v2 = require("torchvision.transforms.v2")
geometry = require("torchvision.transforms.v2.functional._geometry")
stats = require("scipy.stats")

NEAREST, BILINEAR = tv.transforms.InterpolationMode.NEAREST, tv.transforms.InterpolationMode.BILINEAR


def random_images(n=6, channels=3, height=23, width=31, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, channels, height, width), generator=generator, dtype=torch.uint8)


def real_images():
    """Photo-like and drawn images: scikit-learn's sample photo (a crop), captcha images (gpucore's generator),
    Fashion-MNIST (the real set where installed, else gpucore's synthetic one)."""
    sets = {}
    try:
        from sklearn.datasets import load_sample_image

        photo = torch.from_numpy(load_sample_image("china.jpg").copy()).permute(2, 0, 1)[:, 100:160, 200:280]
        sets["photo"] = photo.unsqueeze(0).contiguous()
    except ImportError:
        pass
    captcha = data.synthetic.synthetic_captcha(train_size=3, val_size=1)[0][0]
    sets["captcha"] = gpucore.data.tensor_inputs.as_images(captcha)[:, :, :40, :64].contiguous()
    path = data.builtin.find_fashion_mnist()
    fashion = (data.builtin.fashion_mnist(path, train_size=4, val_size=1)[0][0] if path
               else data.synthetic.synthetic_fashion(train_size=4, val_size=1)[0][0])
    sets["fashion"] = gpucore.data.tensor_inputs.as_images(fashion).contiguous()
    return sets


def image_cases():
    cases = {"random": random_images(), "random_grey": random_images(channels=1, height=17, width=12, seed=1)}
    cases.update(real_images())
    return cases


def within(got, expected, levels, what):
    difference = (got.int() - expected.int()).abs().max().item()
    assert difference <= levels, f"{what}: off by {difference} levels (allowed {levels})"


def drawn(spec_list, images, seed=5, normalize=None):
    """One epoch of `images` (one batch, in order) through the list as training serves it, and the parameters
    it drew per sample (the source's step buffers)."""
    config = _C.AugmentConfig()
    config.enabled = True
    config.transforms = transforms.specs(spec_list)
    if normalize:
        config.mean, config.std = normalize
    n = images.shape[0]
    source = _C.TensorBatches(images, torch.arange(n), n, False, False, seed, torch.device("cpu"), config)
    batch, _ = source.next()
    buffers = source.step_buffers()
    params = [[buffers[f"transforms[{i}][{j}]"] for j in range(4) if f"transforms[{i}][{j}]" in buffers]
              for i in range(len(spec_list))]
    return batch, params


def as_uint8(batch):
    return (batch * 255).round().to(torch.uint8)


# --- the ops against torchvision's functional API --------------------------------------------------------------

@pytest.mark.parametrize("name", list(image_cases()))
def test_crop_op_is_torchvision_pad_crop_and_flips(name):
    images = image_cases()[name]
    n, channels, height, width = images.shape
    generator = torch.Generator().manual_seed(3)
    size, padding = [height - 2, width + 3], [4, 3, 2, 5]  # left, top, right, bottom
    tops = torch.randint(0, height + 3 + 5 - size[0] + 1, (n,), generator=generator)
    lefts = torch.randint(0, width + 4 + 2 - size[1] + 1, (n,), generator=generator)
    flips = torch.randint(0, 2, (n, 2), generator=generator).bool()
    fill = [float(v) for v in range(7, 7 + channels)]
    offsets = torch.stack([tops - padding[1], lefts - padding[0]], 1)
    got = torch.ops.gpucore.crop(images, offsets, flips, size, fill)
    for i in range(n):
        expected = F.crop(F.pad(images[i], padding, fill=fill), int(tops[i]), int(lefts[i]), *size)
        expected = F.vertical_flip(expected) if flips[i, 0] else expected
        expected = F.horizontal_flip(expected) if flips[i, 1] else expected
        assert torch.equal(got[i], expected), f"{name} image {i}"


@pytest.mark.kernel_build
@pytest.mark.parametrize("name", list(image_cases()))
@pytest.mark.parametrize("interpolation,antialias", [("bilinear", True), ("bilinear", False), ("nearest", False)])
def test_resized_crop_op_is_torchvision_resized_crop(name, interpolation, antialias):
    images = image_cases()[name]
    n, _, height, width = images.shape
    generator = torch.Generator().manual_seed(4)
    for size in ([9, 13], [2 * height + 3, width + 7], [height, width]):
        boxes = []
        for _ in range(n):
            box_h = int(torch.randint(1, height + 1, (), generator=generator))
            box_w = int(torch.randint(1, width + 1, (), generator=generator))
            boxes.append([int(torch.randint(0, height - box_h + 1, (), generator=generator)),
                          int(torch.randint(0, width - box_w + 1, (), generator=generator)), box_h, box_w])
        got = torch.ops.gpucore.resized_crop(images, torch.tensor(boxes), size, interpolation, antialias)
        mode = BILINEAR if interpolation == "bilinear" else NEAREST
        for i, box in enumerate(boxes):
            expected = F.resized_crop(images[i], *box, size=size, interpolation=mode, antialias=antialias)
            # exact: the CPU kernel resamples with ATen's own kernels, as torchvision does (the CUDA kernel's own
            # taps are allowed two levels)
            within(got[i], expected, 0 if images.device.type == "cpu" else 2, f"{name} {box} -> {size}")


@pytest.mark.kernel_build
@pytest.mark.parametrize("name", list(image_cases()))
@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
def test_affine_op_is_torchvision_affine(name, interpolation):
    images = image_cases()[name]
    n, channels = images.shape[:2]
    generator = torch.Generator().manual_seed(5)
    fills = [None, 0.0, [float(30 * c + 20) for c in range(channels)]]
    for fill in fills:
        params = []
        for i in range(n):
            u = torch.rand(6, generator=generator).tolist()
            params.append(dict(angle=360 * u[0] - 180, translate=[int(10 * u[1]) - 5, int(8 * u[2]) - 4],
                               scale=0.6 + u[3], shear=[40 * u[4] - 20, 30 * u[5] - 15]))
        matrices = torch.tensor([geometry._get_inverse_affine_matrix([0.0, 0.0], p["angle"], p["translate"],
                                                                      p["scale"], p["shear"]) for p in params],
                                dtype=torch.float32)
        as_list = [] if fill is None else ([fill] if isinstance(fill, float) else fill)
        got = torch.ops.gpucore.affine(images, matrices, interpolation, as_list)
        mode = BILINEAR if interpolation == "bilinear" else NEAREST
        for i, p in enumerate(params):
            expected = F.affine(images[i], **p, interpolation=mode, fill=fill)
            within(got[i], expected, 0 if interpolation == "nearest" else 1, f"{name} {p} fill {fill}")


def random_affine_parameters(kind, generator, h, w):
    """F.affine's arguments for one drawn case of `kind`: a shear (about the centre or, as the auto-augment
    policies shear, about the corner), a rotation, a translation, a scaling, or all at once. Half the draws take
    round values (shear tangents in steps of 0.05, angles in steps of 15 degrees, scales in quarters), which put
    source coordinates exactly halfway between pixels, where nearest-neighbour rounding must agree bit for bit."""
    u = torch.rand(6, generator=generator).tolist()
    tie = u[5] < 0.5
    p = dict(angle=0.0, translate=[0, 0], scale=1.0, shear=[0.0, 0.0])
    if kind == "shear":
        tangent = 0.05 * (int(13 * u[0]) - 6) if tie else 0.6 * u[0] - 0.3
        shear = math.degrees(math.atan(tangent))
        p["shear"] = [shear, 0.0] if u[1] < 0.5 else [0.0, shear]
        if u[2] < 0.5:
            p["center"] = [0, 0]
    elif kind == "rotate":
        p["angle"] = 15.0 * (int(24 * u[0]) - 12) if tie else 360 * u[0] - 180
    elif kind == "translate":
        p["translate"] = [int(w * u[0]) - w // 2, int(h * u[1]) - h // 2]
        p["scale"] = 0.25 * (2 + int(5 * u[2])) if tie else 1.0
    elif kind == "scale":
        p["scale"] = 0.25 * (2 + int(5 * u[0])) if tie else 0.5 + u[0]
    else:
        p.update(angle=90 * u[0] - 45, translate=[int(6 * u[1]) - 3, int(6 * u[2]) - 3], scale=0.7 + 0.6 * u[3],
                 shear=[30 * u[4] - 15, 20 * u[0] - 10])
    return p


# 18 x 22 has the ties a 0.2 shear makes; below 67 pixels (7 x 9, 8 x 8, 6 x 11) torch's bmm builds the grid with
# its plain kernel, above with the BLAS one: both roundings are reproduced.
@pytest.mark.kernel_build
@pytest.mark.parametrize("height, width", [(18, 22), (17, 12), (23, 31), (32, 40), (7, 9), (8, 8), (6, 11)])
def test_nearest_affine_picks_torchvisions_pixel_exactly(height, width):
    generator = torch.Generator().manual_seed(height * 100 + width)
    images = torch.randint(0, 256, (40, 3, height, width), generator=generator, dtype=torch.uint8)
    kinds = ["shear", "rotate", "translate", "scale", "all"]
    params = [random_affine_parameters(kinds[i % len(kinds)], generator, height, width) for i in range(len(images))]
    for fill in (None, [7.0, 80.0, 250.0]):
        matrices = []
        for p in params:
            center = p.get("center", [0.5 * width, 0.5 * height])
            center = [c - s * 0.5 for c, s in zip(center, [width, height])]  # F.affine's centre, relative
            matrices.append(geometry._get_inverse_affine_matrix(center, p["angle"], p["translate"], p["scale"],
                                                                p["shear"]))
        got = torch.ops.gpucore.affine(images, torch.tensor(matrices, dtype=torch.float32), "nearest", fill or [])
        for i, p in enumerate(params):
            expected = F.affine(images[i], **p, interpolation=NEAREST, fill=fill)
            differ = int((got[i] != expected).sum())
            assert differ == 0, f"{height} x {width} {p} fill {fill}: {differ} values differ"


def test_ops_pass_opcheck():
    images = random_images(n=3, height=7, width=9)
    offsets, flips = torch.tensor([[-1, 2], [0, 0], [3, -2]]), torch.tensor([[True, False], [False, True], [1, 1]]).bool()
    torch.library.opcheck(torch.ops.gpucore.crop, (images, offsets, flips, [6, 8], [5.0]))
    torch.library.opcheck(torch.ops.gpucore.crop, (images.float(), offsets, flips, [9, 4], []))
    boxes = torch.tensor([[0, 0, 7, 9], [1, 2, 4, 5], [2, 0, 5, 9]])
    torch.library.opcheck(torch.ops.gpucore.resized_crop, (images, boxes, [5, 11], "bilinear", True))
    torch.library.opcheck(torch.ops.gpucore.resized_crop, (images.float(), boxes, [3, 3], "nearest", False))
    matrices = torch.tensor([[1.0, 0.2, 1.0, -0.1, 0.9, 0.0]] * 3)
    torch.library.opcheck(torch.ops.gpucore.affine, (images, matrices, "bilinear", [1.0, 2.0, 3.0]))
    torch.library.opcheck(torch.ops.gpucore.affine, (images.float(), matrices, "nearest", []))


def test_ops_reject_bad_inputs_by_name():
    images = random_images(n=2, height=5, width=5)
    with pytest.raises(RuntimeError, match="offsets must be"):
        torch.ops.gpucore.crop(images, torch.zeros(3, 2, dtype=torch.long), torch.zeros(2, 2, dtype=torch.bool), [5, 5], [])
    with pytest.raises(RuntimeError, match="box 1 .* is not inside the 5 x 5 image"):
        torch.ops.gpucore.resized_crop(images, torch.tensor([[0, 0, 5, 5], [2, 2, 4, 4]]), [3, 3], "bilinear", True)
    with pytest.raises(RuntimeError, match="interpolation must be 'nearest' or 'bilinear', got 'bicubic'"):
        torch.ops.gpucore.affine(images, torch.zeros(2, 6), "bicubic", [])


# --- each transform, with the parameters it drew, against torchvision ------------------------------------------

@pytest.mark.kernel_build
@pytest.mark.parametrize("name", list(image_cases()))
def test_transforms_with_their_drawn_parameters_equal_torchvision(name):
    images = image_cases()[name]
    n, channels, height, width = images.shape

    batch, (params,) = drawn([{"RandomCrop": {"size": [height - 3, width - 1], "padding": [2, 4], "fill": 9}}], images)
    offsets = params[0]
    for i in range(n):
        expected = F.crop(F.pad(images[i], [2, 4], fill=9), int(offsets[i, 0]) + 4, int(offsets[i, 1]) + 2,
                          height - 3, width - 1)
        assert torch.equal(as_uint8(batch[i]), expected), f"RandomCrop {name} {i}"

    # crop_padding + hflip: run inside the one gpucore::augment pass, the same result
    batch, (crop, flip) = drawn(transforms.training_form([], 3, True, (height, width)), images)
    for i in range(n):
        expected = F.crop(F.pad(images[i], [3]), int(crop[0][i, 0]) + 3, int(crop[0][i, 1]) + 3, height, width)
        expected = F.horizontal_flip(expected) if flip[1][i, 1] else expected
        assert torch.equal(as_uint8(batch[i]), expected), f"crop_padding + hflip {name} {i}"

    for flip, column, reference in (("RandomHorizontalFlip", 1, F.horizontal_flip),
                                    ("RandomVerticalFlip", 0, F.vertical_flip)):
        batch, (params,) = drawn([{flip: {"p": 0.5}}], images)
        for i in range(n):
            expected = reference(images[i]) if params[1][i, column] else images[i]
            assert torch.equal(as_uint8(batch[i]), expected), f"{flip} {name} {i}"

    for interpolation, levels in (("bilinear", 0 if images.device.type == "cpu" else 2), ("nearest", 0)):
        spec = {"RandomResizedCrop": {"size": [19, 24], "scale": [0.2, 1.0], "interpolation": interpolation}}
        batch, (params,) = drawn([spec], images)
        mode = BILINEAR if interpolation == "bilinear" else NEAREST
        for i, box in enumerate(params[0].tolist()):
            expected = F.resized_crop(images[i], *box, size=[19, 24], interpolation=mode, antialias=True)
            within(as_uint8(batch[i]), expected, levels, f"RandomResizedCrop {interpolation} {name} {box}")

    batch, _ = drawn([{"Resize": {"size": 15}}, {"CenterCrop": {"size": [13, 29]}}], images)
    for i in range(n):
        within(as_uint8(batch[i]), F.center_crop(F.resize(images[i], 15, antialias=True), [13, 29]),
               0 if images.device.type == "cpu" else 2, f"Resize {name}")

    fill = [float(40 + c) for c in range(channels)]
    batch, (params,) = drawn([{"RandomRotation": {"degrees": 170, "interpolation": "bilinear", "fill": fill,
                                                  "center": [3, 5]}}], images)
    for i, matrix in enumerate(params[0].double()):
        angle = -math.degrees(math.atan2(matrix[1], matrix[0]))  # rotate's matrix is the affine one of -angle
        expected = F.rotate(images[i], angle, interpolation=BILINEAR, center=[3, 5], fill=fill)
        within(as_uint8(batch[i]), expected, 1, f"RandomRotation {name} {angle}")

    spec = {"RandomAffine": {"degrees": [-30, 60], "translate": [0.2, 0.1], "scale": [0.7, 1.3], "shear": [-10, 25],
                             "interpolation": "bilinear", "fill": 3}}
    batch, (params,) = drawn([spec], images)
    for i, matrix in enumerate(params[0]):
        # the float32 matrix through torchvision's own grid and grid_sample
        grid = geometry._affine_grid(matrix.reshape(1, 2, 3), w=width, h=height, ow=width, oh=height)
        expected = geometry._apply_grid_transform(images[i], grid, "bilinear", fill=3.0)
        within(as_uint8(batch[i]), expected, 1, f"RandomAffine {name} {i}")


def test_center_crop_larger_than_the_image_pads_like_torchvision():
    images = random_images(n=2, height=6, width=9)
    batch, _ = drawn([{"CenterCrop": {"size": [11, 8]}}], images)
    for i in range(2):
        assert torch.equal(as_uint8(batch[i]), F.center_crop(images[i], [11, 8]))


# --- parameter distributions against torchvision's make_params ---------------------------------------------------

def torchvision_params(transform, size, draws, seed=0):
    torch.manual_seed(seed)
    image = torch.zeros(1, *size, dtype=torch.uint8)
    return [transform.make_params([image]) for _ in range(draws)]


def same_distribution(ours, theirs, what):
    p = stats.ks_2samp(np.asarray(ours, dtype=float), np.asarray(theirs, dtype=float)).pvalue
    assert p > 1e-4, f"{what}: KS p = {p:.2g}"


DRAWS = 3000


def test_random_resized_crop_draws_like_torchvision():
    size = (30, 45)
    images = torch.zeros(DRAWS, 1, *size, dtype=torch.uint8)
    _, (params,) = drawn([{"RandomResizedCrop": {"size": 8, "scale": [0.1, 0.9], "ratio": [0.5, 1.5]}}], images)
    theirs = torchvision_params(v2.RandomResizedCrop(8, scale=(0.1, 0.9), ratio=(0.5, 1.5)), size, DRAWS)
    ours = params[0].double()
    for column, key in enumerate(("top", "left", "height", "width")):
        same_distribution(ours[:, column], [p[key] for p in theirs], f"RandomResizedCrop {key}")


def test_random_crop_and_flips_draw_like_torchvision():
    size = (12, 17)
    images = torch.zeros(DRAWS, 1, *size, dtype=torch.uint8)
    _, (crop, flip) = drawn([{"RandomCrop": {"size": [10, 11], "padding": [1, 2, 3, 4]}},
                             {"RandomHorizontalFlip": {"p": 0.3}}], images)
    theirs = torchvision_params(v2.RandomCrop([10, 11], padding=[1, 2, 3, 4]), size, DRAWS)
    # torchvision's top/left are in the padded image; gpucore's offsets are source rows/columns (padding off)
    same_distribution(crop[0][:, 0] + 2, [p["top"] for p in theirs], "RandomCrop top")
    same_distribution(crop[0][:, 1] + 1, [p["left"] for p in theirs], "RandomCrop left")
    flipped = int(flip[1][:, 1].sum())
    assert stats.binomtest(flipped, DRAWS, 0.3).pvalue > 1e-4, flipped


def decode_affine(matrix):
    """(angle, tx, ty, scale, shear_x) of an inverse affine matrix (centre 0, no y shear)."""
    m = [float(v) for v in matrix]
    scale = 1 / math.sqrt(m[0] * m[4] - m[1] * m[3])
    a, c, d = m[4] * scale, -m[3] * scale, m[0] * scale
    rotation = math.atan2(c, a)
    tan_sx = (math.cos(rotation) - d) / c if abs(c) > 1e-3 else (-(-m[1] * scale) - math.sin(rotation)) / a
    tx, ty = np.linalg.solve(np.array([[m[0], m[1]], [m[3], m[4]]]), -np.array([m[2], m[5]]))
    return math.degrees(rotation), round(tx), round(ty), scale, math.degrees(math.atan(tan_sx))


def test_random_affine_and_rotation_draw_like_torchvision():
    size = (20, 30)
    images = torch.zeros(DRAWS, 1, *size, dtype=torch.uint8)
    spec = {"RandomAffine": {"degrees": [-40, 70], "translate": [0.3, 0.2], "scale": [0.5, 1.5], "shear": [-20, 30]}}
    _, (params,) = drawn([spec], images)
    ours = [decode_affine(m) for m in params[0]]
    theirs = torchvision_params(v2.RandomAffine([-40, 70], translate=(0.3, 0.2), scale=(0.5, 1.5), shear=[-20, 30]),
                                size, DRAWS)
    same_distribution([o[0] for o in ours], [p["angle"] for p in theirs], "RandomAffine angle")
    same_distribution([o[1] for o in ours], [p["translate"][0] for p in theirs], "RandomAffine tx")
    same_distribution([o[2] for o in ours], [p["translate"][1] for p in theirs], "RandomAffine ty")
    same_distribution([o[3] for o in ours], [p["scale"] for p in theirs], "RandomAffine scale")
    same_distribution([o[4] for o in ours], [p["shear"][0] for p in theirs], "RandomAffine shear")

    _, (params,) = drawn([{"RandomRotation": {"degrees": 50}}], images)
    angles = [-math.degrees(math.atan2(float(m[1]), float(m[0]))) for m in params[0]]
    theirs = torchvision_params(v2.RandomRotation(50), size, DRAWS)
    same_distribution(angles, [p["angle"] for p in theirs], "RandomRotation angle")


def test_draws_depend_on_seed_and_epoch_only():
    images = random_images(n=10, height=12, width=12)
    spec = [{"RandomResizedCrop": {"size": 6}}, {"RandomAffine": {"degrees": 30}}]
    first, _ = drawn(spec, images, seed=1)
    again, _ = drawn(spec, images, seed=1)
    other, _ = drawn(spec, images, seed=2)
    assert torch.equal(first, again) and not torch.equal(first, other)


# --- the pipeline: config, validation form, masks, streaming, resume ---------------------------------------------

@pytest.mark.parametrize("value,message", [
    (["RandomHorizontalFlip", "RandomCorp"], r"transforms\[1\] RandomCorp: unknown transform; supported: .*RandomCrop"),
    ([{"RandomCrop": {"sise": 3}}], r"transforms\[0\] RandomCrop: unknown argument 'sise'; valid arguments: size, padding"),
    ([{"RandomRotation": {"degrees": -5}}], r"transforms\[0\] RandomRotation: argument 'degrees' as a single number must be >= 0"),
    ([{"RandomResizedCrop": {"size": 8, "interpolation": "bicubic"}}],
     r"transforms\[0\] RandomResizedCrop: argument 'interpolation' is 'bicubic'; valid: nearest, bilinear"),
    ([{"RandomCrop": {"size": 8, "padding": 2, "padding_mode": "reflect"}}],
     r"'padding_mode' 'reflect' is not supported by gpucore; valid: constant"),
    ([{"Normalize": {"mean": [0.5], "std": [0.2]}}, "RandomHorizontalFlip"],
     r"transforms\[1\] RandomHorizontalFlip: works on uint8 images, so it must come before Normalize"),
    ([{"RandomAffine": {"degrees": 3, "translate": [0.5, 2]}}], r"transforms\[0\] RandomAffine: argument 'translate'"),
    ([{"Resize": {"size": "big"}}], r"transforms\[0\] Resize: argument 'size' must be a number"),
    ([{"RandomCrop": 5}], r"transforms\[0\] RandomCrop: arguments must be a mapping"),
])
def test_config_errors_name_the_entry(value, message):
    with pytest.raises(gpucore.ConfigError, match=message):
        gpucore.config.load_config({"transforms": value})


def test_config_takes_yaml_and_set_text(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("transforms:\n  - RandomResizedCrop: {size: 24, scale: [0.5, 1.0]}\n  - RandomHorizontalFlip\n")
    assert gpucore.config.load_config(str(path)).transforms == [
        {"RandomResizedCrop": {"size": 24, "scale": [0.5, 1.0]}}, "RandomHorizontalFlip"]
    config = gpucore.config.load_config({}, {"transforms": "[{RandomRotation: {degrees: 10}}]"})
    assert config.transforms == [{"RandomRotation": {"degrees": 10}}]


def test_validation_form_is_deterministic():
    value = [{"RandomResizedCrop": {"size": 20, "interpolation": "nearest"}}, "RandomHorizontalFlip",
             {"RandomCrop": {"size": [18, 16], "padding": 2}}, {"RandomAffine": {"degrees": 10}},
             {"CenterCrop": {"size": 12}}, {"Normalize": {"mean": [0.5], "std": [0.25]}}]
    assert transforms.validation_form(value) == [
        {"Resize": {"size": 20, "interpolation": "nearest"}}, {"CenterCrop": {"size": 20}},
        {"CenterCrop": {"size": [18, 16]}}, {"CenterCrop": {"size": 12}},
        {"Normalize": {"mean": [0.5], "std": [0.25]}}]


def test_training_sees_the_output_size_and_validation_the_deterministic_form(tmp_path):
    (train_x, train_y), (val_x, val_y) = data.synthetic.synthetic_fashion(train_size=64, val_size=32)
    config = dict(run_dir=str(tmp_path), progress=False, epochs=1, batch_size=16, device="cpu", seed=0,
                  transforms=[{"RandomResizedCrop": {"size": 12}}, "RandomHorizontalFlip"])
    model = nn.Sequential(nn.Flatten(), nn.Linear(12 * 12, 10))  # only 12 x 12 inputs fit
    result = gpucore.train(config, model=model, train_data=(train_x, train_y), val_data=(val_x, val_y))
    assert result.status == "completed"
    path = os.path.join(result.checkpoint_dir, "last.pt")
    loaded = load.from_payload(gpucore.checkpoint.load_checkpoint(path), path, torch.device("cpu"), module=model)
    assert loaded.input_shape == [1, 28, 28] and loaded.model_input_shape == [1, 12, 12]  # what export feeds it
    mean, std = loaded.normalization
    got = loaded.preprocess(val_x[:5])
    for i in range(5):
        image = F.center_crop(F.resize(val_x[i:i + 1], 12, antialias=True), 12).float() / 255
        within(((got[i].cpu() * std[0] + mean[0]) * 255).round(), (image * 255).round(), 2, f"validation image {i}")


def test_segmentation_masks_follow_every_geometric_transform():
    generator = torch.Generator().manual_seed(0)
    masks = torch.randint(0, 3, (16, 13, 15), generator=generator)
    images = (masks * 100).to(torch.uint8)[:, None].expand(16, 3, 13, 15).contiguous()
    config = _C.AugmentConfig()
    config.enabled = True
    config.transforms = transforms.specs([
        {"RandomResizedCrop": {"size": [11, 14], "interpolation": "nearest"}},
        {"RandomAffine": {"degrees": 40, "translate": [0.1, 0.1], "shear": 10}},
        {"RandomCrop": {"size": [12, 12], "padding": 2}}, "RandomHorizontalFlip", "RandomVerticalFlip"])
    source = _C.TensorBatches(images, masks, 8, True, False, 7, torch.device("cpu"), config)
    while (batch := source.next()) is not None:
        x, y = batch
        assert y.dtype == masks.dtype and y.shape == (8, 12, 12)
        assert torch.equal((x[:, 0] * 255 / 100).round().long(), y)


@pytest.mark.kernel_build
def test_streamed_batches_get_the_same_transforms_as_resident_ones(tmp_path):
    from test_streaming import image_folder

    root = str(image_folder(tmp_path / "train", per_class=6, size=(14, 16)))
    options = dict(batch_size=5, seed=2, device="cpu", hflip=True,
                   transforms=[{"RandomResizedCrop": {"size": [10, 12]}}, {"RandomRotation": {"degrees": 20}}])
    streamed = gpucore.DataLoader(data.read_image_folder(root, threads=2), cache="none", **options)
    resident = gpucore.DataLoader(data.read_image_folder(root), cache="device", **options)
    for _ in range(2):
        for (x, y), (ex, ey) in zip(streamed, resident):
            assert x.shape[2:] == (10, 12)
            assert torch.equal(y, ey) and torch.equal(x, ex)


def test_training_with_transforms_resumes_bitwise_mid_epoch(tmp_path):
    class StopAtStep3:
        def on_log(self, trainer, step, metrics):
            if step == 3:
                raise KeyboardInterrupt

    config = dict(data="synthetic_fashion", data_kwargs={"train_size": 192, "val_size": 32}, epochs=2,
                  progress=False, batch_size=32, device="cpu", log_every_n_steps=1, crop_padding=2,
                  transforms=[{"RandomResizedCrop": {"size": 28, "scale": [0.5, 1.0]}},
                              {"RandomAffine": {"degrees": 15, "translate": [0.1, 0.1]}}, "RandomVerticalFlip"])
    assert_resume_matches(tmp_path, config, StopAtStep3())
