"""A folder of one's own photos of mixed sizes (crops of real photos, JPEG and PNG, grey and RGBA among RGB): the list's
per-image transforms (RandomResizedCrop, Resize + CenterCrop) crop each image at its own size exactly as torchvision
does with the same draws (torch.manual_seed of the sample's seed, then torchvision's make_params), streamed and cached
(the cache keeps images at a bounded shorter side); the error when nothing brings the sizes to one; and the commands on
a run of such a folder (predict, evaluate, gradcam, export)."""
import json
import os

import pytest
import torch
from torch import nn

import gpucore
from gpucore import _C, data, transforms
from gpucore.evaluation.export import AdaptiveMaxPool2dByBins, exportable
from conftest import gpucore_command, require
from test_photo_folders import make_mixed_folder

F = require("torchvision.transforms.v2.functional")
v2 = require("torchvision.transforms.v2")

SEED = 3


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_mixed_folder(tmp_path_factory.mktemp("mixed") / "photos")


def _images(files):
    """Each file as gpucore decodes it (uint8 C x H x W at its own size), in the reader's order."""
    return [_C.decode_image(path, 3).permute(2, 0, 1) for path in files.paths]


def _epochs(folder, cache, value, epochs=2, **reader):
    """Every batch (unshuffled, not normalised, float in [0, 1]) of `epochs` epochs of the folder through `value`,
    each JPEG decoded at full scale (decode: exact), as torchvision's path decodes it."""
    files = data.read_image_folder(folder, threads=2, decode="exact", **reader)
    loader = gpucore.DataLoader(files, batch_size=5, shuffle=False, device="cpu", seed=SEED, cache=cache,
                                normalize=False, transforms=value)
    return files, [torch.cat([x for x, _ in loader]) for _ in range(epochs)]


def _as_uint8(batch):
    return (batch * 255).round().to(torch.uint8)


def test_the_folder_holds_mixed_sizes(folder):
    sizes = {tuple(image.shape[1:]) for image in _images(data.read_image_folder(folder))}
    assert len(sizes) == 12 and all(60 <= side <= 200 for size in sizes for side in size)


@pytest.mark.kernel_build
@pytest.mark.parametrize("cache", ["none", "host"])
def test_random_resized_crop_is_torchvisions_on_each_image_with_the_same_draws(folder, cache):
    value = [{"RandomResizedCrop": {"size": [20, 24], "scale": [0.2, 1.0], "ratio": [0.6, 1.6]}}]
    files, epochs = _epochs(folder, cache, value)
    reference = v2.RandomResizedCrop([20, 24], scale=(0.2, 1.0), ratio=(0.6, 1.6), antialias=True)
    for epoch, batch in enumerate(epochs):
        assert batch.shape == (12, 3, 20, 24)
        for i, image in enumerate(_images(files)):
            torch.manual_seed(_C.per_image_sample_seed(transforms.specs(value), SEED, epoch, i))
            box = reference.make_params([image])
            expected = F.resized_crop(image, box["top"], box["left"], box["height"], box["width"], [20, 24],
                                      antialias=True)
            assert torch.equal(_as_uint8(batch[i]), expected), (cache, epoch, i, box)
    assert not torch.equal(epochs[0], epochs[1])  # new draws every epoch


@pytest.mark.kernel_build
@pytest.mark.parametrize("cache", ["none", "host"])
def test_resize_and_center_crop_are_torchvisions_eval_recipe_on_each_image(folder, cache):
    files, (batch,) = _epochs(folder, cache, [{"Resize": {"size": 28}}, {"CenterCrop": {"size": 24}}], epochs=1)
    for i, image in enumerate(_images(files)):
        assert torch.equal(_as_uint8(batch[i]), F.center_crop(F.resize(image, 28, antialias=True), 24)), i


@pytest.mark.kernel_build
def test_the_cache_keeps_each_image_at_a_bounded_shorter_side(folder):
    value = [{"RandomResizedCrop": {"size": 16}}, "RandomHorizontalFlip"]
    with pytest.warns(UserWarning, match=r"photos: \d+ of 12 images have a shorter side longer than max_resolution 80 "
                                         r"and are kept in memory resized down to it"):
        files, epochs = _epochs(folder, "host", value, max_resolution=80)
    kept = files.images_at_own_size()
    flips = _C.sample_transforms(transforms.specs(value), 12, 0, 0, SEED, 0)[1][1][:, 1]
    for i, (image, cached) in enumerate(zip(_images(files), kept)):
        bounded = F.resize(image, 80, antialias=True) if min(image.shape[1:]) > 80 else image
        assert torch.equal(cached.permute(2, 0, 1), bounded), i  # torchvision's Resize(80) where longer
        torch.manual_seed(_C.per_image_sample_seed(transforms.specs(value), SEED, 0, i))
        box = v2.RandomResizedCrop(16).make_params([bounded])
        expected = F.resized_crop(bounded, box["top"], box["left"], box["height"], box["width"], [16, 16],
                                  antialias=True)
        expected = F.horizontal_flip(expected) if flips[i] else expected
        assert torch.equal(_as_uint8(epochs[0][i]), expected), i
    # streamed, nothing is bounded: the images wider than the bound give other crops
    _, streamed = _epochs(folder, "none", value, max_resolution=80)
    assert not torch.equal(streamed[0], epochs[0])


@pytest.mark.kernel_build
def test_streamed_and_cached_batches_agree_shuffled_and_normalised(folder):
    options = dict(batch_size=4, device="cpu", seed=1, transforms=[{"RandomResizedCrop": {"size": 20}},
                                                                   "RandomHorizontalFlip", {"ColorJitter": {"brightness": 0.3}}])
    # decode: exact, the pixels the cache holds (decode: fast would crop JPEGs from a smaller decode when streamed)
    streamed = gpucore.DataLoader(data.read_image_folder(folder, threads=3, decode="exact"), cache="none", **options)
    cached = gpucore.DataLoader(data.read_image_folder(folder, decode="exact"), cache="device", **options)
    for _ in range(2):
        for (x, y), (ex, ey) in zip(streamed, cached):
            assert torch.equal(y, ey) and torch.equal(x, ex)


def test_mixed_sizes_with_nothing_to_bring_them_to_one_name_the_keys(folder):
    keys = (r"data_kwargs: \{size: \[H, W\]\}.*transforms with RandomResizedCrop: \{size: S\} \(training\) or "
            r"Resize: \{size: S\} \+ CenterCrop: \{size: S\}")
    for cache in ("none", "host"):
        with pytest.raises(gpucore.ConfigError, match=keys):
            list(gpucore.DataLoader(data.read_image_folder(folder), batch_size=12, device="cpu", cache=cache,
                                    transforms=["RandomHorizontalFlip", {"ColorJitter": {"contrast": 0.2}}]))


def test_the_default_model_on_photos_names_the_size_transforms_give_and_a_model_for_photos(folder, tmp_path):
    # A new user's first try: their photo folder, RandomResizedCrop, the default model (made for 28 x 28).
    with pytest.raises(gpucore.TrainingError) as caught:
        gpucore.train(data=str(folder), epochs=1, batch_size=6, progress=False, run_dir=str(tmp_path), val_fraction=0,
                      transforms=[{"RandomResizedCrop": {"size": 40}}])
    message = str(caught.value)
    assert "images (3-channel uint8, each at its own size) from " in message
    assert "config key transforms brings each image to 40 x 40, the size the model gets" in message
    assert "Config key model is fashion_mnist_cnn, made for 28 x 28 images" in message
    assert "model: fast_cnn (any size)" in message and "(config keys model, model_kwargs, data, data_kwargs, " \
        "transforms)" in message
    # Named where a module goes, it is pointed to the config key; named there, it trains on the folder.
    with pytest.raises(gpucore.ConfigError, match=r"model argument must be a torch.nn.Module, got str; to name a "
                                                  r"model, set config key model: gpucore.train\(\{'model': 'fast_cnn'\}"):
        gpucore.train(data=str(folder), model="fast_cnn")
    result = gpucore.train({"model": "fast_cnn"}, data=str(folder), epochs=1, batch_size=6, progress=False,
                           run_dir=str(tmp_path), val_fraction=0, transforms=[{"RandomResizedCrop": {"size": 40}}])
    assert result.status == "completed" and result.steps > 0


def test_max_resolution_is_checked(folder):
    with pytest.raises(gpucore.ConfigError, match="max_resolution must be an integer >= 0"):
        data.read_image_folder(folder, max_resolution=-1)


@pytest.mark.parametrize("output_size", [3, (2, 5), (None, 4), 1, (7, 6)])
def test_export_computes_adaptive_max_pooling_by_its_bins(output_size):
    generator = torch.Generator().manual_seed(0)
    pool = nn.AdaptiveMaxPool2d(output_size)
    for shape in ((2, 3, 4, 4), (1, 2, 28, 17), (3, 1, 7, 9)):
        x = torch.randn(*shape, generator=generator)
        assert torch.equal(AdaptiveMaxPool2dByBins(output_size)(x), pool(x)), shape
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.AdaptiveMaxPool2d(output_size), nn.Flatten())
    copy = exportable(model)
    assert isinstance(copy[1], AdaptiveMaxPool2dByBins) and isinstance(model[1], nn.AdaptiveMaxPool2d)
    x = torch.randn(2, 1, 13, 11, generator=generator)
    assert torch.equal(copy(x), model(x))


@pytest.mark.slow
# kernel_build for one cache only: what depends on the kernel build is predict's resize, which reads the folder alike
# after a streamed and a cached training run
@pytest.mark.parametrize("cache", [pytest.param("none", marks=pytest.mark.kernel_build), "auto"])
@pytest.mark.usefixtures("figures_skipped")  # checks numbers, rows and files: no figure
def test_a_mixed_size_folder_trains_and_every_command_works_on_its_checkpoint(folder, tmp_path, cache, capsys,
                                                                             monkeypatch):
    require("onnxruntime")
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text(f"data: {folder}\nepochs: 2\nbatch_size: 4\nmodel: fast_cnn\ndevice: cpu\nprecision: '32'\n"
                      f"progress: false\ncache: {cache}\nrun_dir: {tmp_path / 'runs'}\nname: photos\n"
                      "transforms: [RandomResizedCrop: {size: 32}, RandomHorizontalFlip]\n")
    trained = gpucore_command(capsys, "train", str(config))
    assert trained.returncode == 0, trained.stderr
    run = tmp_path / "runs" / "photos"
    stats = json.loads((run / "training_stats.json").read_text())
    assert stats["status"] == "completed"
    assert stats["model_kwargs_from_data"] == {"num_classes": 2, "in_channels": 3}
    checkpoint = str(run / "checkpoints" / "last.pt")

    # predict: each image through Resize(32) + CenterCrop(32) at its own size, standardised by the run's statistics
    predicted = gpucore_command(capsys, "predict", checkpoint, folder, "--out", str(tmp_path / "predictions.csv"))
    assert predicted.returncode == 0, predicted.stderr
    loaded = gpucore.load(checkpoint, "cpu")
    assert loaded.input_shape == [3, 0, 0] and loaded.model_input_shape == [3, 32, 32]
    files = data.read_image_folder(folder)
    mean, std = (torch.tensor(v).reshape(1, 3, 1, 1) for v in loaded.normalization)
    inputs = torch.stack([F.center_crop(F.resize(image, 32, antialias=True), 32) for image in _images(files)])
    with torch.no_grad():
        expected = loaded.module((inputs.float() / 255 - mean) / std)
    ours = gpucore.predict(loaded, folder)
    assert torch.allclose(ours.outputs, expected, atol=1e-5)
    rows = (tmp_path / "predictions.csv").read_text().splitlines()
    assert len(rows) == 13 and rows[0].startswith("input,label,")

    evaluated = gpucore_command(capsys, "evaluate", checkpoint, "--data", folder, "--out",
                                str(tmp_path / "evaluation"))  # the whole folder (split all)
    assert evaluated.returncode == 0, evaluated.stderr
    summary = json.loads(evaluated.stdout)
    assert (summary["split"], summary["samples"]) == ("all", 12)
    assert summary["metrics"]["accuracy"] == pytest.approx((expected.argmax(1) == files.targets).float().mean().item())

    cams = gpucore_command(capsys, "gradcam", "--checkpoint", checkpoint, "--images", os.path.join(folder, "china"),
                           "--out", str(tmp_path / "cams"))
    assert cams.returncode == 0, cams.stderr
    assert torch.load(tmp_path / "cams" / "cams_gradcam.pt").shape == (6, 32, 32)
    assert len([f for f in os.listdir(tmp_path / "cams") if f.endswith("_gradcam.png")]) == 6

    exported = gpucore_command(capsys, "export", checkpoint, "--format", "onnx", "--out", str(tmp_path / "model.onnx"))
    assert exported.returncode == 0, exported.stderr
    result = json.loads(exported.stdout)
    assert result["max_abs_diff"] <= 1e-4 and result["checked_inputs"][1:] == [3, 32, 32]
    import onnxruntime

    session = onnxruntime.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    onnx_outputs = session.run(None, {"inputs": ((inputs.float() / 255 - mean) / std).numpy()})[0]
    assert torch.allclose(torch.from_numpy(onnx_outputs), expected, atol=1e-4)
