"""Photos as people have them, on checkpoints made here (no training): gpucore.predict on lists of PIL images and
tensors of mixed sizes, and on folders with files it cannot read (on_error skip); Grad-CAM overlays on the whole
photo."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

import gpucore
from gpucore.checkpoint import FORMAT

CHINA = os.path.join(os.path.dirname(__import__("sklearn").__file__), "datasets", "images", "china.jpg")

MODELS = '''
import torch
from torch import nn


def classifier():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                         nn.Linear(16, 3))
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
    """The folder of models.py, importable here and by the gpucore command run in it."""
    (tmp_path / "models.py").write_text(MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("models", None)
    torch.manual_seed(0)
    return tmp_path


def _gpucore(*args, cwd):
    return subprocess.run([sys.executable, "-m", "gpucore", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def _photos():
    """Real photos of three sizes (china.jpg and two crops of it, one of them grey as a tensor holds it)."""
    china = np.asarray(Image.open(CHINA).convert("RGB"))
    return [Image.fromarray(china), torch.from_numpy(china[40:300, 100:251].copy()).permute(2, 0, 1),
            china[200:, :333].copy()]


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


def test_predict_skips_unreadable_files_when_asked_and_names_them(models):
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

    refused = _gpucore("predict", path, str(folder), "--out", "p.csv", "--device", "cpu", cwd=models)
    assert refused.returncode == 2 and "notes.png" in refused.stderr and "on_error: skip" in refused.stderr

    result = _gpucore("predict", path, str(folder), "--out", "p.csv", "--device", "cpu", "--on-error", "skip",
                      cwd=models)
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
