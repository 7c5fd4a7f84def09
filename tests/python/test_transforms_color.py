"""The photometric transforms: gpucore's color ops (gpucore::color_ops, gpucore::erase) against
torchvision.transforms.v2.functional on the same uint8 images with the same parameters, on fresh random images
and real ones (Fashion-MNIST, captcha images, scikit-learn's sample photo)."""
import pytest
import torch

import gpucore  # noqa: F401  (registers the ops' fake kernels)

from conftest import require

F = require("torchvision.transforms.v2.functional")

# gpucore::color_ops's codes (csrc/ops/color_math.h) and torchvision's function for each, with a sampler of its
# argument (the magnitude the op receives).
IDENTITY, BRIGHTNESS, CONTRAST, SATURATION, HUE, SHARPNESS, POSTERIZE, SOLARIZE, AUTOCONTRAST, EQUALIZE, INVERT, \
    GRAYSCALE = range(12)
REFERENCE = {
    IDENTITY: lambda image, m: image,
    BRIGHTNESS: lambda image, m: F.adjust_brightness(image, m),
    CONTRAST: lambda image, m: F.adjust_contrast(image, m),
    SATURATION: lambda image, m: F.adjust_saturation(image, m),
    HUE: lambda image, m: F.adjust_hue(image, m),
    SHARPNESS: lambda image, m: F.adjust_sharpness(image, m),
    POSTERIZE: lambda image, m: F.posterize(image, int(m)),
    SOLARIZE: lambda image, m: F.solarize(image, m),
    AUTOCONTRAST: lambda image, m: F.autocontrast(image),
    EQUALIZE: lambda image, m: F.equalize(image),
    INVERT: lambda image, m: F.invert(image),
    GRAYSCALE: lambda image, m: F.rgb_to_grayscale(image, num_output_channels=image.shape[-3]),
}


def draw_magnitudes(code, n, generator):
    u = torch.rand(n, generator=generator, dtype=torch.float64)
    if code == HUE:
        return u - 0.5
    if code == POSTERIZE:
        return torch.randint(0, 9, (n,), generator=generator).double()
    if code == SOLARIZE:
        return u * 255.0
    return u * 2.0  # factors in [0, 2): darker/brighter, less/more contrast, saturation, sharpness


def random_images(n, channels, h, w, seed):
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, channels, h, w), dtype=torch.uint8, generator=generator)
    images[0] = images[0] // 4 + 100  # a low-contrast image: autocontrast and equalize stretch it
    if n > 1:
        images[1, :, : h // 2] = 37  # a flat area
    return images


def fashion_images():
    builtin = pytest.importorskip("gpucore.data.builtin")
    if builtin.find_fashion_mnist() is None:
        pytest.skip("Fashion-MNIST's files are not installed")
    (images, _), _ = builtin.fashion_mnist(train_size=6, val_size=1)
    return images


def captcha_images():
    captcha_image = require("captcha.image")
    import numpy as np

    import random

    random.seed(0)  # the captcha package draws its noise and warping from Python's random
    maker = captcha_image.ImageCaptcha(width=72, height=32)
    pictures = [np.asarray(maker.generate_image(text).convert("RGB")) for text in ("g7Kp", "41xz", "QmZ2", "aaaa")]
    return torch.from_numpy(np.stack(pictures)).permute(0, 3, 1, 2).contiguous()


def photo_images():
    datasets = require("sklearn.datasets")
    try:
        photo = torch.from_numpy(datasets.load_sample_image("china.jpg").copy()).permute(2, 0, 1)
    except (OSError, ValueError) as exc:
        pytest.skip(f"scikit-learn's sample photo is not available: {exc}")
    return torch.stack([photo[:, 100:148, 200:264], photo[:, 300:348, 40:104], photo[:, ::9, ::10][:, :48, :64]])


IMAGES = {
    "random_rgb": lambda: random_images(6, 3, 13, 17, 0),
    "random_gray": lambda: random_images(4, 1, 9, 11, 1),
    "fashion_mnist": fashion_images,
    "captcha": captcha_images,
    "photo": photo_images,
}


def reference(images, codes, magnitudes):
    """torchvision's functions applied per sample, one step after the other, on uint8 images."""
    out = []
    for image, sample_codes, sample_magnitudes in zip(images, codes.tolist(), magnitudes.tolist()):
        for code, magnitude in zip(sample_codes, sample_magnitudes):
            image = REFERENCE[code](image, magnitude)
        out.append(image)
    return torch.stack(out)


def assert_within_one_level(actual, expected):
    assert actual.dtype == torch.uint8 and actual.shape == expected.shape
    difference = (actual.int() - expected.int()).abs()
    assert difference.max() <= 1, f"{(difference > 1).sum()} values differ by more than one level"
    # Off by one only where a float32 sum rounds differently: a rare pixel, never a systematic shift.
    assert (difference > 0).float().mean() < 2e-3


@pytest.mark.kernel_build
@pytest.mark.parametrize("source", sorted(IMAGES))
@pytest.mark.parametrize("code", range(12))
def test_each_color_op_matches_torchvision(source, code):
    images = IMAGES[source]()
    original = images.clone()
    generator = torch.Generator().manual_seed(100 + code)
    n = images.shape[0]
    codes = torch.full((n, 1), code, dtype=torch.int64)
    magnitudes = draw_magnitudes(code, n, generator).unsqueeze(1)
    out = torch.ops.gpucore.color_ops(images, codes, magnitudes)
    assert_within_one_level(out, reference(images, codes, magnitudes))
    assert torch.equal(images, original)  # the input is left alone


@pytest.mark.kernel_build
def test_color_ops_chains_each_sample_in_its_own_order():
    """ColorJitter's form: per sample the four adjustments in its own order, some skipped (identity)."""
    images = torch.cat([random_images(8, 3, 12, 10, 3), captcha_images()[:, :, :12, :10]])
    generator = torch.Generator().manual_seed(7)
    n = images.shape[0]
    codes = torch.stack([torch.randperm(4, generator=generator) + 1 for _ in range(n)])
    codes[2, 1] = IDENTITY
    factors = {BRIGHTNESS: (0.6, 1.4), CONTRAST: (0.6, 1.4), SATURATION: (0.6, 1.4), HUE: (-0.1, 0.1)}
    magnitudes = torch.zeros(n, 4, dtype=torch.float64)
    for (i, k), code in zip(torch.cartesian_prod(torch.arange(n), torch.arange(4)).tolist(), codes.flatten().tolist()):
        if code != IDENTITY:
            low, high = factors[code]
            magnitudes[i, k] = low + (high - low) * torch.rand((), generator=generator)
    out = torch.ops.gpucore.color_ops(images, codes, magnitudes)
    assert_within_one_level(out, reference(images, codes, magnitudes))


@pytest.mark.kernel_build
def test_color_ops_policy_steps_on_real_images():
    """The auto-augment policies' form: K steps, each sample any photometric op with any magnitude."""
    images = photo_images()
    generator = torch.Generator().manual_seed(11)
    n, steps = images.shape[0], 3
    codes = torch.randint(0, 12, (n, steps), generator=generator)
    magnitudes = torch.stack([torch.stack([draw_magnitudes(code, 1, generator)[0] for code in row])
                              for row in codes.tolist()])
    out = torch.ops.gpucore.color_ops(images, codes, magnitudes)
    assert_within_one_level(out, reference(images, codes, magnitudes))


def test_color_ops_rejects_bad_inputs():
    images = random_images(2, 3, 8, 8, 0)
    codes, magnitudes = torch.ones(2, 1, dtype=torch.int64), torch.ones(2, 1, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="1 or 3 channels"):
        torch.ops.gpucore.color_ops(torch.zeros(2, 2, 8, 8, dtype=torch.uint8), codes, magnitudes)
    with pytest.raises(RuntimeError, match="uint8"):
        torch.ops.gpucore.color_ops(images.float(), codes, magnitudes)
    with pytest.raises(RuntimeError, match="code 12 is not one of 0..11"):
        torch.ops.gpucore.color_ops(images, codes * 12, magnitudes)
    with pytest.raises(RuntimeError, match="hue factor must be in"):
        torch.ops.gpucore.color_ops(images, codes * HUE, magnitudes)
    with pytest.raises(RuntimeError, match="bits must be an integer in 0..8"):
        torch.ops.gpucore.color_ops(images, codes * POSTERIZE, magnitudes * 2.5)
    with pytest.raises(RuntimeError, match="magnitudes must be float64 of the codes' shape"):
        torch.ops.gpucore.color_ops(images, codes, torch.ones(2, 2, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="magnitudes must be float64"):
        torch.ops.gpucore.color_ops(images, codes, magnitudes.float())


def test_erase_matches_torchvision_erase():
    generator = torch.Generator().manual_seed(5)
    images = torch.randn(3, 3, 10, 12, generator=generator)
    boxes = torch.tensor([[2, 3, 4, 5], [0, 0, 0, 0], [0, 7, 10, 5]])
    fill = torch.randn(3, 3, generator=generator)
    out = torch.ops.gpucore.erase(images, boxes, fill, None)
    expected = torch.stack([F.erase(image, *box, v=value[:, None, None]) if box[2] and box[3] else image
                            for image, box, value in zip(images, boxes.tolist(), fill)])
    assert torch.equal(out, expected)
    half = torch.ops.gpucore.erase(images.half(), boxes, fill, None)
    assert torch.equal(half, torch.stack([F.erase(image, *box, v=value[:, None, None].half()) if box[2] else image
                                          for image, box, value in zip(images.half(), boxes.tolist(), fill)]))


def test_erase_random_values_are_standard_normal_and_from_the_seed():
    images = torch.zeros(2, 3, 64, 64)
    boxes = torch.tensor([[4, 5, 50, 40], [0, 0, 64, 64]])
    seeds = torch.tensor([3, 3])
    out = torch.ops.gpucore.erase(images, boxes, None, seeds)
    assert torch.equal(out, torch.ops.gpucore.erase(images, boxes, None, seeds))
    first = out[0, :, 4:54, 5:45]
    mask = torch.zeros(64, 64, dtype=torch.bool)
    mask[4:54, 5:45] = True
    assert torch.equal(out[0][:, ~mask], torch.zeros(3, int((~mask).sum())))  # outside the box: untouched
    # The box's values as torchvision's erase with v of the box's shape writes them: the values run over the box.
    assert torch.equal(out[0], F.erase(images[0], 4, 5, 50, 40, v=first))
    stats = require("scipy.stats")
    for values in (first.flatten(), out[1].flatten()):
        assert stats.kstest(values.double().numpy(), "norm").pvalue > 1e-3
    other = torch.ops.gpucore.erase(images, boxes, None, torch.tensor([4, 4]))
    assert not torch.equal(other[0], out[0])


def test_erase_rejects_bad_inputs():
    images = torch.zeros(2, 3, 8, 8)
    boxes = torch.tensor([[0, 0, 4, 4], [6, 6, 4, 4]])
    with pytest.raises(RuntimeError, match="box 1 .* does not lie inside the 8 x 8 image"):
        torch.ops.gpucore.erase(images, boxes, torch.zeros(2, 3), None)
    with pytest.raises(RuntimeError, match="exactly one of fill and noise_seeds"):
        torch.ops.gpucore.erase(images, boxes, None, None)
    with pytest.raises(RuntimeError, match="fill must be float32 N x C"):
        torch.ops.gpucore.erase(images, boxes[:1].expand(2, 4), torch.zeros(2, 1), None)


def test_color_ops_pass_opcheck():
    images = random_images(3, 3, 9, 8, 2)
    codes = torch.tensor([[HUE, EQUALIZE], [SHARPNESS, CONTRAST], [IDENTITY, SOLARIZE]])
    magnitudes = torch.tensor([[0.2, 0.0], [1.5, 0.7], [0.0, 100.0]], dtype=torch.float64)
    torch.library.opcheck(torch.ops.gpucore.color_ops, (images, codes, magnitudes))
    boxes = torch.tensor([[1, 1, 3, 4], [0, 0, 0, 0], [2, 2, 5, 5]])
    floats = torch.randn(3, 3, 9, 8)
    torch.library.opcheck(torch.ops.gpucore.erase, (floats, boxes, torch.randn(3, 3), None))
    torch.library.opcheck(torch.ops.gpucore.erase, (floats, boxes, None, torch.tensor([1, 2, 3])))
