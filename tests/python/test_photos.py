"""Photos as people have them, on checkpoints made here (no training): gpucore.predict on lists of PIL images and
tensors of mixed sizes, and on folders with files it cannot read (on_error skip); Grad-CAM overlays on the whole
photo."""
import json
import os
import sys

import numpy as np
import pytest
import torch
from PIL import Image

import gpucore
from gpucore.checkpoint import FORMAT
from conftest import gpucore_command

CHINA = os.path.join(os.path.dirname(__import__("sklearn").__file__), "datasets", "images", "china.jpg")

MODELS = '''
import torch
from torch import nn


def classifier():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                         nn.Linear(16, 3))


class Spot(nn.Module):
    """A model whose Grad-CAM is known: its layer `features` outputs a fixed square (the input only keeps the graph)
    and class 0, its top class, is that square's mean, so the map of class 0 is the square."""

    def __init__(self, height=40, width=40, rows=(5, 10), columns=(25, 32)):
        super().__init__()
        mask = torch.zeros(1, 1, height, width)
        mask[..., rows[0]:rows[1], columns[0]:columns[1]] = 1
        self.register_buffer("mask", mask)
        self.features = nn.Identity()
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1, 3))
        with torch.no_grad():
            self.head[2].weight.copy_(torch.tensor([[1.0], [-1.0], [0.0]]))
            self.head[2].bias.zero_()

    def forward(self, x):
        return self.head(self.features(x[:, :1] * 0 + self.mask))
'''


def checkpoint(folder, model_name, config, input_shape, state):
    """A gpucore checkpoint of `state` for the model `model_name` builds, as a run would have written it."""
    path = os.path.join(folder, "model.pt")
    torch.save({"format": FORMAT, "config": {"model": model_name, **config}, "model": state,
                "classes": ["a", "b", "c"], "input_stats": {"mean": [0.4, 0.5, 0.6], "std": [0.2, 0.25, 0.3]},
                "input_shape": input_shape}, path)
    return path


@pytest.fixture
def models(tmp_path, monkeypatch):
    """The folder of models.py, importable here and by the gpucore commands run from it."""
    (tmp_path / "models.py").write_text(MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("models", None)
    torch.manual_seed(0)
    return tmp_path


def _photos():
    """Real photos of three sizes (china.jpg and two crops of it, one of them grey as a tensor holds it)."""
    china = np.asarray(Image.open(CHINA).convert("RGB"))
    return [Image.fromarray(china), torch.from_numpy(china[40:300, 100:251].copy()).permute(2, 0, 1),
            china[200:, :333].copy()]


@pytest.mark.kernel_build
@pytest.mark.parametrize("input_shape, transforms", [([3, 0, 0], [{"RandomResizedCrop": {"size": 40}}]),
                                                     ([3, 48, 64], [])])
def test_predict_on_a_list_of_images_equals_predicting_them_as_files(models, input_shape, transforms):
    """Each image of a list goes through what reading it from a PNG file does (resized to a fixed-size run's size,
    or at its own size through the run's Resize + CenterCrop), results in the list's order."""
    import models as built

    path = checkpoint(models, "models:classifier", {"transforms": transforms}, input_shape,
                      built.classifier().state_dict())
    photos = _photos()
    files = []
    for index, photo in enumerate(photos):
        array = np.asarray(photo) if not isinstance(photo, torch.Tensor) else photo.permute(1, 2, 0).numpy()
        files.append(models / "png" / f"{index}.png")
        files[-1].parent.mkdir(exist_ok=True)
        Image.fromarray(array).save(files[-1])
    from_list = gpucore.predict(path, photos, device="cpu", top_k=2)
    from_files = [gpucore.predict(path, file, device="cpu").outputs[0] for file in files]
    torch.testing.assert_close(from_list.outputs, torch.stack(from_files), rtol=0, atol=1e-5)
    assert [row["input"] for row in from_list.rows] == ["0", "1", "2"]
    # in reverse order, the same rows reversed: each image on its own, whatever its neighbours
    torch.testing.assert_close(gpucore.predict(path, photos[::-1], device="cpu").outputs, from_list.outputs.flip(0),
                               rtol=0, atol=1e-5)


def test_a_bad_element_of_a_list_is_named_by_its_index(models):
    import models as built

    path = checkpoint(models, "models:classifier", {"transforms": [{"RandomResizedCrop": {"size": 40}}]},
                      [3, 0, 0], built.classifier().state_dict())
    photos = _photos()
    with pytest.raises(gpucore.ConfigError, match=r"inputs\[1\] is tensor torch.float32 \(3, 20, 20\); a list of "
                                                  r"images holds PIL images, uint8 tensors"):
        gpucore.predict(path, [photos[0], torch.rand(3, 20, 20)], device="cpu")
    with pytest.raises(gpucore.ConfigError, match=r"inputs\[2\] is str 'cat.png'; a list of images holds PIL"):
        gpucore.predict(path, [photos[0], photos[2], "cat.png"], device="cpu")
    with pytest.raises(gpucore.ConfigError, match=r"inputs\[0\] is tensor torch.uint8 \(4, 9, 9\): 4 channels where "
                                                  r"the model takes 3"):
        gpucore.predict(path, [torch.zeros(4, 9, 9, dtype=torch.uint8)], device="cpu")


def test_predict_skips_unreadable_files_when_asked_and_names_them(models, capsys):
    import models as built

    path = checkpoint(models, "models:classifier", {}, [3, 48, 64], built.classifier().state_dict())
    folder = models / "photos"
    folder.mkdir()
    good = _photos()
    Image.fromarray(np.asarray(good[0])).save(folder / "china.png")
    Image.fromarray(good[2]).save(folder / "corner.jpg", quality=90)
    whole = (folder / "corner.jpg").read_bytes()
    (folder / "truncated.jpg").write_bytes(whole[:len(whole) // 3])
    (folder / "notes.png").write_text("these are notes, not a picture\n")

    refused = gpucore_command(capsys, "predict", path, str(folder), "--out", "p.csv", "--device", "cpu")
    assert refused.returncode == 2 and "notes.png" in refused.stderr and "on_error: skip" in refused.stderr

    result = gpucore_command(capsys, "predict", path, str(folder), "--out", "p.csv", "--device", "cpu", "--on-error",
                             "skip")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["inputs"] == 2
    skipped = {os.path.basename(entry.split(":")[0]): entry for entry in summary["skipped"]}
    assert sorted(skipped) == ["notes.png", "truncated.jpg"]
    for name, entry in skipped.items():  # each with its reason, on stderr too
        assert len(entry.split(": ", 1)[1]) > 5 and f"gpucore: skipped {entry}" in result.stderr
    rows = (models / "p.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in rows[1:]] == ["china.png", "corner.jpg"]
    # the rows kept are the predictions of those files on their own
    kept = gpucore.predict(path, folder, device="cpu", on_error="skip")
    assert kept.names == ["china.png", "corner.jpg"] and len(kept.skipped) == 2
    alone = gpucore.predict(path, folder / "corner.jpg", device="cpu")
    torch.testing.assert_close(kept.outputs[1:], alone.outputs, rtol=0, atol=1e-6)


# china.jpg is 427 x 640. A run that read its photos at their own sizes with RandomResizedCrop(40) sees it through
# Resize(40) + CenterCrop(40): 40 x int(40 * 640 / 427) = 40 x 59, then columns 10 to 49 (torchvision's
# round((59 - 40) / 2) = round(9.5) = 10). Its model column c is photo column (c + 10) * 640 / 59; photo columns whose
# centres land inside: 108 to 541. Spot's square (rows 5-9, columns 25-31 of the model's input) lies on photo rows
# 5 * 427 / 40 = 53.4 to 10 * 427 / 40 = 106.75 and columns 35 * 640 / 59 = 379.7 to 42 * 640 / 59 = 455.6.
OWN_SIZES = {"input_shape": [3, 0, 0], "config": {"transforms": [{"RandomResizedCrop": {"size": 40}}]},
             "seen": (slice(0, 427), slice(108, 542)), "square": ((53.4, 106.75), (379.7, 455.6)), "model_px": (10.7, 10.8)}
# A run that read 48 x 64 images and centre-cropped them to 48 x 40: the photo squashed to 48 x 64 (scales 48 / 427,
# 64 / 640), columns 12 to 51 kept: photo columns 120 to 519. The square (rows 5-9, columns 25-31 of the input) lies
# on photo rows 5 * 427 / 48 = 44.5 to 10 * 427 / 48 = 88.96 and columns 37 * 10 = 370 to 44 * 10 = 440.
FIXED_SIZE = {"input_shape": [3, 48, 64], "config": {"transforms": [{"CenterCrop": {"size": [48, 40]}}],
                                                     "model_kwargs": {"height": 48}},
              "seen": (slice(0, 427), slice(120, 520)), "square": ((44.5, 88.96), (370, 440)), "model_px": (8.9, 10)}


# A run that kept its photos with their shorter side at most 200: 200 x int(200 * 640 / 427) = 200 x 299, then
# Resize(40) to 40 x int(40 * 299 / 200) = 40 x 59 and the same crop: the same pixels land on the same places.
DOWNSIZED = {**OWN_SIZES, "config": {**OWN_SIZES["config"], "data_kwargs": {"max_resolution": 200}}}


@pytest.mark.kernel_build
@pytest.mark.parametrize("case", [OWN_SIZES, FIXED_SIZE, DOWNSIZED], ids=["own-sizes", "fixed-size", "downsized"])
def test_gradcam_draws_the_map_on_the_whole_photo_where_the_model_saw_it(models, case, capsys):
    import models as built

    path = checkpoint(models, "models:Spot", case["config"], case["input_shape"],
                      built.Spot(**case["config"].get("model_kwargs", {})).state_dict())
    photo = np.asarray(Image.open(CHINA).convert("RGB"))   # Pillow's decoding, the reference
    rows, columns = case["seen"]
    loaded = gpucore.load(path, "cpu")
    result = gpucore.cam.photo_gradcam(loaded, [Image.open(CHINA)])
    assert loaded.photo_geometry(427, 640).covered(427, 640) == (rows, columns)

    heat = result.heat(0)
    (top, bottom), (left, right) = case["square"]
    row_px, column_px = case["model_px"]  # one pixel of the model's input, in photo pixels: bilinear's reach
    ys, xs = torch.meshgrid(torch.arange(427) + 0.5, torch.arange(640) + 0.5, indexing="ij")
    inside = (ys > top + row_px) & (ys < bottom - row_px) & (xs > left + column_px) & (xs < right - column_px)
    outside = (ys < top - row_px) | (ys > bottom + row_px) | (xs < left - column_px) | (xs > right + column_px)
    assert inside.sum() > 100 and torch.all(heat[inside] > 0.999)  # the maps are min-max normalised with eps 1e-7
    assert torch.all(heat[outside] == 0.0)

    # The command line: one overlay per photo, at the photo's own size (decoded here with Pillow); the files decoded
    # one at a time (--batch-size 1) give the maps of all of them at once
    (models / "photos").mkdir()
    (models / "photos" / "china.jpg").write_bytes(open(CHINA, "rb").read())
    Image.fromarray(photo[100:300, 50:500]).save(models / "photos" / "part.png")
    run = gpucore_command(capsys, "gradcam", "--checkpoint", path, "--images", str(models / "photos"), "--out",
                          str(models / "cams"), "--device", "cpu", "--batch-size", "1")
    assert run.returncode == 0, run.stderr
    both = gpucore.cam.photo_gradcam(loaded, [photo, photo[100:300, 50:500]])
    torch.testing.assert_close(torch.load(models / "cams" / "cams_gradcam.pt"), both.cams.cams, rtol=0, atol=1e-6)
    part = np.asarray(Image.open(models / "cams" / "part_gradcam.png"))
    assert np.array_equal(part, both.overlay(1).numpy())
    overlay = np.asarray(Image.open(models / "cams" / "china_gradcam.png"))
    assert overlay.shape == photo.shape
    seen = np.zeros(photo.shape[:2], bool)
    seen[rows, columns] = True
    assert np.array_equal(overlay[~seen], photo[~seen])            # the cut-off edges: the photo as it is
    assert np.all(np.any(overlay[seen] != photo[seen], axis=1))    # the part the model saw: blended with the heat
    expected = torch.ops.gpucore.cam_overlay(torch.from_numpy(photo[rows, columns].copy())[None],
                                             heat[rows, columns][None].contiguous(), 0.5)[0]
    # show_cam_on_image's blend (the op, held to pytorch-grad-cam in test_cam.py) of the map placed above
    assert np.array_equal(overlay[rows, columns], expected.numpy())
