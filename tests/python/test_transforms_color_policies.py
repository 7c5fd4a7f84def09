"""The photometric transforms of the `transforms` list (ColorJitter, RandomGrayscale, the single-op random ones,
TrivialAugmentWide, RandAugment, AutoAugment, RandomErasing): their parameter distributions against torchvision's
(chi-square / Kolmogorov-Smirnov on many draws with fixed seeds), their results against torchvision's own code given
the same parameters, and their configuration errors."""
import itertools
import math

import pytest
import torch

from gpucore import _C, transforms
from gpucore.errors import ConfigError

from conftest import assert_resume_matches, require
from test_transforms_color import REFERENCE, assert_within_one_level, captcha_images, random_images

v2 = require("torchvision.transforms.v2")
F = v2.functional
stats = require("scipy.stats")
geometry = require("torchvision.transforms.v2.functional._geometry")

IDENTITY_MATRIX = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0)
P_FLOOR = 1e-4  # the p-value below which a distribution test fails (fixed seeds: a pass is reproducible)


def sample(entry, n, h, w, seed=0):
    """The parameters the transform draws for n samples of h x w images from the generator seeded `seed`."""
    return _C.sample_transforms(transforms.specs([entry]), n, h, w, seed)[0]


def run(images, entry, seed=0):
    """uint8 images through the one-entry list as a training batch (parameters from `seed`), as uint8."""
    return transforms.Compose([entry])(images, seed=seed)


def chi_square(observed_keys, expected):
    """p-value of observed keys' counts against `expected` (key -> probability)."""
    counts = {}
    for key in observed_keys:
        assert key in expected, f"a drawn parameter set torchvision never draws: {key}"
        counts[key] = counts.get(key, 0) + 1
    keys = sorted(expected, key=repr)
    n = len(observed_keys)
    return stats.chisquare([counts.get(k, 0) for k in keys], [expected[k] * n for k in keys]).pvalue


# ---- ColorJitter ------------------------------------------------------------------------------------------------

def test_color_jitter_draws_torchvisions_order_and_factors():
    arguments = {"brightness": 0.4, "contrast": [0.5, 1.2], "saturation": 0.3, "hue": 0.1}
    codes, magnitudes = sample({"ColorJitter": arguments}, 24000, 8, 8, seed=1)
    reference = v2.ColorJitter(**arguments)
    orders = [tuple(row) for row in codes.tolist()]
    permutations = {p: 1 / 24 for p in itertools.permutations((1, 2, 3, 4))}
    assert chi_square(orders, permutations) > P_FLOOR
    ranges = {1: reference.brightness, 2: reference.contrast, 3: reference.saturation, 4: reference.hue}
    for code, (low, high) in ranges.items():
        values = magnitudes[codes == code].double()
        assert values.numel() == 24000
        assert stats.kstest(values.numpy(), "uniform", args=(low, high - low)).pvalue > P_FLOOR


def test_color_jitter_skips_what_it_does_not_jitter():
    codes, magnitudes = sample({"ColorJitter": {"brightness": 0.5, "hue": 0.0, "saturation": [1.0, 1.0]}}, 50, 4, 4)
    assert sorted(set(codes.flatten().tolist())) == [0, 1]  # only brightness; hue=0 and saturation=(1, 1) are None
    assert ((codes == 1).sum(1) == 1).all()
    assert magnitudes[codes == 1].min() >= 0.5 and magnitudes[codes == 1].max() <= 1.5


@pytest.mark.kernel_build
def test_color_jitter_batch_equals_torchvision_with_its_parameters():
    images = torch.cat([random_images(6, 3, 14, 12, 4), captcha_images()[:, :, :14, :12]])
    entry = {"ColorJitter": {"brightness": 0.5, "contrast": 0.5, "saturation": 0.5, "hue": 0.2}}
    codes, magnitudes = sample(entry, images.shape[0], 14, 12, seed=9)
    expected = []
    for image, order, factors in zip(images, codes.tolist(), magnitudes.tolist()):
        for code, factor in zip(order, factors):
            image = REFERENCE[code](image, factor)
        expected.append(image)
    assert_within_one_level(run(images, entry, seed=9), torch.stack(expected))


# ---- the single-op random transforms --------------------------------------------------------------------------

@pytest.mark.kernel_build
@pytest.mark.parametrize("entry, function", [
    ({"RandomGrayscale": {"p": 0.3}}, lambda image: F.rgb_to_grayscale(image, num_output_channels=3)),
    ({"RandomPosterize": {"bits": 3, "p": 0.6}}, lambda image: F.posterize(image, 3)),
    ({"RandomSolarize": {"threshold": 100, "p": 0.5}}, lambda image: F.solarize(image, 100)),
    ({"RandomAdjustSharpness": {"sharpness_factor": 2, "p": 0.5}}, lambda image: F.adjust_sharpness(image, 2)),
    ({"RandomAutocontrast": {"p": 0.5}}, F.autocontrast),
    ({"RandomEqualize": {"p": 0.5}}, F.equalize),
    ({"RandomInvert": {"p": 0.5}}, F.invert),
])
def test_random_apply_transforms_follow_p_and_torchvision(entry, function):
    p = next(iter(entry.values()))["p"]
    codes, _ = sample(entry, 20000, 8, 8, seed=2)
    applied = int((codes != 0).sum())
    assert stats.binomtest(applied, 20000, p).pvalue > P_FLOOR
    images = random_images(12, 3, 10, 9, 6)
    codes, _ = sample(entry, 12, 10, 9, seed=3)
    expected = torch.stack([function(image) if code else image for image, code in zip(images, codes[:, 0].tolist())])
    assert_within_one_level(run(images, entry, seed=3), expected)


# ---- the auto-augment policies -----------------------------------------------------------------------------------

def color_step(name, magnitude):
    """gpucore's (code, magnitude) of torchvision's photometric operation `name` with `magnitude`."""
    codes = {"Brightness": 1, "Contrast": 2, "Color": 3, "Sharpness": 5}
    if name in codes:
        return codes[name], 1.0 + magnitude
    return {"Posterize": (6, float(int(magnitude))), "Solarize": (7, 255.0 * magnitude), "AutoContrast": (8, 0.0),
            "Equalize": (9, 0.0), "Invert": (10, 0.0)}.get(name, (0, 0.0))


def affine_matrix(name, magnitude, h, w):
    """torchvision's inverse affine matrix of the geometric operation `name` (identity for the others)."""
    get = geometry._get_inverse_affine_matrix
    if name in ("ShearX", "ShearY"):
        shear = math.degrees(math.atan(magnitude))
        return get([-0.5 * w, -0.5 * h], 0.0, [0.0, 0.0], 1.0, [shear, 0.0] if name == "ShearX" else [0.0, shear])
    if name in ("TranslateX", "TranslateY"):
        shift = [int(magnitude), 0] if name == "TranslateX" else [0, int(magnitude)]
        return get([0.0, 0.0], 0.0, [float(t) for t in shift], 1.0, [0.0, 0.0])
    if name == "Rotate":
        return get([0.0, 0.0], -magnitude, [0.0, 0.0], 1.0, [0.0, 0.0])
    return list(IDENTITY_MATRIX)


def step_key(code, magnitude, matrix):
    """A step's parameters as a hashable key, rounded as float32 parameters allow."""
    return (int(code), round(float(magnitude), 3), tuple(round(float(v), 3) + 0.0 for v in matrix))


def outcome_key(name, magnitude, h, w):
    code, value = color_step(name, magnitude)
    return step_key(code, value, affine_matrix(name, magnitude, h, w))


def space_outcomes(policy, bins, h, w, bin_index=None):
    """key -> (probability, torchvision's (name, magnitude)) of one step of TrivialAugmentWide (bin drawn) or
    RandAugment (bin fixed)."""
    outcomes = {}
    space = policy._AUGMENTATION_SPACE
    for name, (magnitudes_of, signed) in space.items():
        magnitudes = magnitudes_of(bins, h, w)
        choices = [(0.0, 1.0)] if magnitudes is None else [
            (float(magnitudes[b]), 1.0 / (1 if bin_index is not None else bins))
            for b in ([bin_index] if bin_index is not None else range(bins))]
        for magnitude, p in choices:
            for sign, p_sign in (((1, 0.5), (-1, 0.5)) if signed and magnitudes is not None else ((1, 1.0),)):
                key = outcome_key(name, sign * magnitude, h, w)
                previous = outcomes.get(key, (0.0, (name, sign * magnitude)))
                outcomes[key] = (previous[0] + p * p_sign / len(space), previous[1])
    return outcomes


def drawn_keys(params, step):
    codes, magnitudes, matrices = params
    return [step_key(c, m, row) for c, m, row in zip(codes[:, step].tolist(), magnitudes[:, step].tolist(),
                                                       matrices[:, step].tolist())]


def test_trivial_augment_wide_draws_torchvisions_operations_and_magnitudes():
    h, w, bins = 20, 24, 31
    params = sample({"TrivialAugmentWide": {}}, 60000, h, w, seed=4)
    outcomes = space_outcomes(v2.TrivialAugmentWide(num_magnitude_bins=bins), bins, h, w)
    assert chi_square(drawn_keys(params, 0), {k: p for k, (p, _) in outcomes.items()}) > P_FLOOR


def test_rand_augment_draws_torchvisions_operations_per_step():
    h, w = 16, 20
    params = sample({"RandAugment": {"num_ops": 3, "magnitude": 7, "num_magnitude_bins": 11}}, 20000, h, w, seed=5)
    assert params[0].shape == (20000, 3)
    outcomes = space_outcomes(v2.RandAugment(num_ops=3, magnitude=7, num_magnitude_bins=11), 11, h, w, bin_index=7)
    for step in range(3):
        assert chi_square(drawn_keys(params, step), {k: p for k, (p, _) in outcomes.items()}) > P_FLOOR


@pytest.mark.parametrize("policy", ["imagenet", "cifar10", "svhn"])
def test_auto_augment_draws_torchvisions_sub_policies(policy):
    h, w = 16, 16
    reference = v2.AutoAugment(policy=v2.AutoAugmentPolicy(policy))
    pairs = {}
    for first, second in reference._policies:
        branches = [[]]
        for name, p, bin_index in (first, second):
            magnitudes_of, signed = reference._AUGMENTATION_SPACE[name]
            magnitudes = magnitudes_of(10, h, w)
            magnitude = 0.0 if magnitudes is None else float(magnitudes[bin_index])
            options = [((name, magnitude), p * (0.5 if signed and magnitudes is not None else 1.0))]
            if signed and magnitudes is not None:
                options.append(((name, -magnitude), p * 0.5))
            options.append((("Identity", 0.0), 1.0 - p))
            branches = [b + [o] for b in branches for o in options]
        for branch in branches:
            key = tuple(outcome_key(name, m, h, w) for (name, m), _ in branch)
            pairs[key] = pairs.get(key, 0.0) + math.prod(q for _, q in branch) / len(reference._policies)
    params = sample({"AutoAugment": {"policy": policy}}, 30000, h, w, seed=6)
    drawn = list(zip(drawn_keys(params, 0), drawn_keys(params, 1)))
    expected = {k: p for k, p in pairs.items() if p > 0}
    assert chi_square(drawn, expected) > P_FLOOR


def policy_reference(policy, images, params, interpolation, fill):
    """torchvision's own _apply_image_or_video_transform, step after step, with the drawn operations (the geometric
    ones too: gpucore::affine rounds its grid as torchvision's does, nearest-neighbour ties included)."""
    h, w = images.shape[-2:]
    bins = {"TrivialAugmentWide": 31, "RandAugment": 31}
    outcomes = space_outcomes(policy, bins.get(type(policy).__name__, 10), h, w,
                              bin_index=getattr(policy, "magnitude", None))
    outcomes[step_key(10, 0.0, IDENTITY_MATRIX)] = (0.0, ("Invert", 0.0))
    out = []
    for n, image in enumerate(images):
        for step in range(params[0].shape[1]):
            key = drawn_keys([p[n:n + 1] for p in params], step)[0]
            name, magnitude = outcomes[key][1]
            image = policy._apply_image_or_video_transform(image, name, magnitude, interpolation=v2.InterpolationMode(interpolation),
                                                           fill=policy._fill)
        out.append(image)
    return torch.stack(out)


@pytest.mark.kernel_build
@pytest.mark.parametrize("entry, policy", [
    ({"TrivialAugmentWide": {}}, lambda: v2.TrivialAugmentWide()),
    ({"RandAugment": {"num_ops": 2, "magnitude": 9}}, lambda: v2.RandAugment(num_ops=2, magnitude=9)),
    ({"RandAugment": {"num_ops": 3, "magnitude": 20}}, lambda: v2.RandAugment(num_ops=3, magnitude=20)),
    ({"RandAugment": {"num_ops": 3, "magnitude": 20, "interpolation": "bilinear", "fill": [10, 200, 30]}},
     lambda: v2.RandAugment(num_ops=3, magnitude=20, interpolation=v2.InterpolationMode.BILINEAR, fill=[10, 200, 30])),
])
def test_policies_equal_torchvision_with_their_drawn_operations(entry, policy):
    images = torch.cat([random_images(10, 3, 18, 22, 8), captcha_images()[:, :, :18, :22]])
    reference_policy = policy()
    arguments = next(iter(entry.values()))
    params = sample(entry, images.shape[0], 18, 22, seed=12)
    expected = policy_reference(reference_policy, images, params, arguments.get("interpolation", "nearest"),
                                arguments.get("fill"))
    actual = run(images, entry, seed=12)
    assert_within_one_level(actual, expected)


# ---- RandomErasing -----------------------------------------------------------------------------------------------

def torchvision_boxes(reference, n, h, w):
    torch.manual_seed(0)
    boxes = []
    image = torch.zeros(3, h, w)
    for _ in range(n):
        if torch.rand(1) >= reference.p:
            boxes.append((0, 0, 0, 0))
            continue
        params = reference.make_params([image])
        boxes.append((params["i"], params["j"], params["h"], params["w"]) if params["v"] is not None else (0, 0, 0, 0))
    return torch.tensor(boxes)


def test_random_erasing_draws_torchvisions_boxes():
    arguments = {"p": 0.7, "scale": [0.05, 0.4], "ratio": [0.5, 2.0]}
    h, w = 30, 40
    boxes, _ = sample({"RandomErasing": arguments}, 20000, h, w, seed=7)
    expected = torchvision_boxes(v2.RandomErasing(**arguments), 20000, h, w)
    erased, expected_erased = boxes[:, 2] > 0, expected[:, 2] > 0
    table = [[int(erased.sum()), int((~erased).sum())], [int(expected_erased.sum()), int((~expected_erased).sum())]]
    assert stats.chi2_contingency(table).pvalue > P_FLOOR
    for column in range(4):
        assert stats.ks_2samp(boxes[erased, column].numpy(), expected[expected_erased, column].numpy()).pvalue > P_FLOOR


@pytest.mark.kernel_build
@pytest.mark.parametrize("value", [0, 1.5, [0.5, -1.0, 2.0]])
def test_random_erasing_after_normalize_equals_torchvision_erase(value):
    images = random_images(8, 3, 12, 16, 10)
    entry = {"RandomErasing": {"p": 0.8, "value": value}}
    mean, std = [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]
    specs = transforms.specs([{"Normalize": {"mean": mean, "std": std}}, entry])
    out = _C.apply_transforms(images, specs, [], [], 13)[0]
    boxes, fill = _C.sample_transforms(specs, 8, 12, 16, 13)[0]
    normalized = F.normalize(images.float() / 255, mean, std)
    values = torch.tensor(value if isinstance(value, list) else [value], dtype=torch.float32)
    expected = torch.stack([F.erase(image, *box, v=values[:, None, None]) if box[2] else image
                            for image, box in zip(normalized, boxes.tolist())])
    assert torch.allclose(out, expected, atol=1e-5)
    assert (boxes[:, 2] > 0).any()


def test_random_erasing_random_value_is_standard_normal_in_the_box():
    images = torch.full((16, 3, 32, 32), 128, dtype=torch.uint8)
    entry = {"RandomErasing": {"p": 1.0, "value": "random", "scale": [0.2, 0.3]}}
    out = _C.apply_transforms(images, transforms.specs([entry]), [], [], 21)[0]
    boxes, seeds = sample(entry, 16, 32, 32, seed=21)
    assert len(set(seeds.tolist())) == 16
    inside = torch.cat([out[n, :, i:i + h, j:j + w].flatten() for n, (i, j, h, w) in enumerate(boxes.tolist())])
    assert stats.kstest(inside.double().numpy(), "norm").pvalue > P_FLOOR
    outside = out.clone()
    for n, (i, j, h, w) in enumerate(boxes.tolist()):
        outside[n, :, i:i + h, j:j + w] = 128 / 255
    assert torch.allclose(outside, torch.full_like(out, 128 / 255))


# ---- configuration -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("entry, message", [
    ({"ColorJitter": {"brigthness": 0.4}}, "ColorJitter: unknown argument 'brigthness'"),
    ({"ColorJitter": {"hue": 0.7}}, "argument 'hue' values must be increasing and inside \\[-0.5, 0.5\\]"),
    ({"ColorJitter": {"contrast": -0.1}}, "argument 'contrast' as a single number must be >= 0"),
    ({"RandomGrayscale": {"p": 1.5}}, "argument 'p' must be in \\[0, 1\\]"),
    ({"RandomPosterize": {"bits": 9}}, "argument 'bits' must be an integer in \\[0, 8\\]"),
    ({"RandAugment": {"magnitude": 31}}, "argument 'magnitude' must be an integer in \\[0, num_magnitude_bins - 1\\]"),
    ({"TrivialAugmentWide": {"interpolation": "bicubic"}}, "argument 'interpolation' is 'bicubic'; valid: nearest"),
    ({"AutoAugment": {"policy": "imagenette"}}, "argument 'policy' is 'imagenette'; valid: imagenet, cifar10, svhn"),
    ({"RandomErasing": {"value": "noise"}}, "argument 'value' is 'noise'; valid: random"),
    ({"RandomErasing": {"scale": [0.5, 0.1]}}, "argument 'scale' must be \\[low, high\\]"),
])
def test_bad_arguments_are_config_errors_naming_the_entry(entry, message):
    with pytest.raises(ConfigError, match=message):
        transforms.check([{"RandomHorizontalFlip": {}}, entry])
    with pytest.raises(ConfigError, match="transforms\\[1\\]"):
        transforms.check([{"RandomHorizontalFlip": {}}, entry])


def test_color_transforms_come_before_normalize_and_erasing_after():
    with pytest.raises(ConfigError, match="ColorJitter: works on uint8 images"):
        transforms.check([{"Normalize": {"mean": [0.5], "std": [0.5]}}, {"ColorJitter": {"brightness": 0.2}}])
    transforms.check([{"ColorJitter": {"brightness": 0.2}}, {"Normalize": {"mean": [0.5], "std": [0.5]}},
                      {"RandomErasing": {}}])


# ---- training ----------------------------------------------------------------------------------------------------

def test_training_with_color_transforms_resumes_bitwise(tmp_path):
    import gpucore

    class Stop:
        def on_epoch_end(self, trainer, epoch, record):
            if epoch == 1:
                raise KeyboardInterrupt

    listed = [{"ColorJitter": {"brightness": 0.4, "contrast": 0.4}}, "TrivialAugmentWide",
              {"RandomErasing": {"p": 0.5}}]
    config = dict(data="synthetic_fashion", data_kwargs={"train_size": 256, "val_size": 64}, epochs=2,
                  progress=False, batch_size=64, seed=3, transforms=listed)
    straight, _, _ = assert_resume_matches(tmp_path, config, Stop())
    plain = gpucore.train(dict(config, run_dir=str(tmp_path / "c"), transforms=[]))
    assert any(not torch.equal(tensor, plain.model.state_dict()[name])
               for name, tensor in straight.model.state_dict().items())
