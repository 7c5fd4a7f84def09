"""Folders of class subfolders as people have them, read as torchvision's ImageFolder reads them and checked against
it: nested subfolders read, empty class folders refused, hidden system files ignored with a count, formats gpucore
does not decode named; validation and test folders labelled by the training set's class names, never by position;
the val_fraction split drawn by file name; a run's data identity recorded and a resume on changed data refused; the
data path recorded absolute. The folders hold crops of real photos (scikit-learn's china.jpg and flower.jpg)."""
import json
import os
import shutil

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

import gpucore
from gpucore.data import builtin, read_image_folder
from gpucore.data.split import split
from gpucore.data.identity import changes, held_out_by_name, identity_of, relative_names
from gpucore.errors import ConfigError
from test_photo_folders import _photos

RUN = dict(epochs=1, device="cpu", precision="32", progress=False, batch_size=8, report=False, normalize=False,
           data_kwargs={"size": [16, 16]}, schedule="constant", lr=0.05)


def crop(index: int, size: int = 16) -> Image.Image:
    """A crop of a real photo, different for every index."""
    photo = _photos()[index % 2]
    top, left = (7 * index) % (photo.shape[0] - size), (13 * index) % (photo.shape[1] - size)
    return Image.fromarray(photo[top:top + size, left:left + size])


def write_class(root, name, count, start=0, subfolder=""):
    folder = os.path.join(root, name, subfolder)
    os.makedirs(folder, exist_ok=True)
    for i in range(start, start + count):
        crop(i + 100 * len(name)).save(os.path.join(folder, f"{i:03d}.{'png' if i % 3 == 0 else 'jpg'}"))


def solid(root, colours, per_class=6):
    """Class folders of one colour each (with a little noise): a linear model tells them apart in a few steps."""
    generator = np.random.default_rng(0)
    for name, colour in colours.items():
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i in range(per_class):
            pixels = np.clip(np.array(colour)[None, None] + generator.integers(-8, 9, (16, 16, 3)), 0, 255)
            Image.fromarray(pixels.astype(np.uint8)).save(os.path.join(root, name, f"{i}.png"))
    return str(root)


def linear(classes=3):
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, classes))


def test_a_messy_folder_is_read_as_imagefolder_reads_it(tmp_path):
    torchvision = pytest.importorskip("torchvision")
    root = str(tmp_path / "photos")
    write_class(root, "cat", 3)
    write_class(root, "cat", 2, start=3, subfolder="2024/summer")  # nested: read, as ImageFolder reads it
    write_class(root, "dog", 4)
    write_class(str(tmp_path / "elsewhere"), "more", 2)
    os.symlink(str(tmp_path / "elsewhere" / "more"), os.path.join(root, "cat", "linked"))  # links followed
    crop(1).save(os.path.join(root, "dog", "extra.jxl"), format="WEBP")  # JPEG XL and JPEG 2000: Pillow's, not ours
    crop(2).save(os.path.join(root, "dog", "old.jp2"), format="BMP")
    for junk in ("._000.jpg", ".DS_Store", "Thumbs.db"):
        open(os.path.join(root, "dog", junk), "wb").write(b"\0\5\22junk")
    open(os.path.join(root, "cat", "notes.txt"), "w").write("not an image")

    def gpucore_reads(path):
        name = os.path.basename(path)
        return name.lower().endswith((".png", ".jpg", ".jpeg")) and not name.startswith(".")
    reference = torchvision.datasets.ImageFolder(root, is_valid_file=gpucore_reads)
    os.makedirs(os.path.join(root, "__MACOSX", "cat"))  # macOS's zip leftovers: a class to ImageFolder, not here
    with pytest.warns(UserWarning) as caught:
        files = read_image_folder(root)
    said = " ".join(str(w.message) for w in caught)
    assert "2 image files in formats gpucore cannot decode here" in said and "dog/extra.jxl" in said
    assert "1 .jp2, 1 .jxl" in said and "3 hidden or system files" in said and "cat/notes.txt" in said
    assert files.classes == reference.classes == ["cat", "dog"]
    assert [(p, int(y)) for p, y in zip(files.paths, files.targets)] == reference.samples
    assert len(files) == 3 + 2 + 2 + 4  # cat's own, its nested ones, the linked folder's, dog's
    not_read = "images are not decoded by gpucore (PNG, JPEG, WebP, BMP, GIF, TIFF, PPM/PGM/PBM, HEIC/HEIF, AVIF are)"
    assert sorted(files.unread) == [f"{root}/dog/extra.jxl: .jxl {not_read}", f"{root}/dog/old.jp2: .jp2 {not_read}"]
    # the pixels of a nested file are those of Pillow
    nested = files.paths.index(f"{root}/cat/2024/summer/003.png")
    assert torch.equal(files.inputs[nested].permute(1, 2, 0), torch.from_numpy(np.array(Image.open(
        files.paths[nested]).convert("RGB"))))


def test_the_left_out_warning_points_to_where_each_reader_lists_the_files(tmp_path):
    from gpucore.data.input_files import photo_chunks, read_input_images
    root = tmp_path / "data"
    solid(root, {"blue": (0, 0, 200), "red": (200, 0, 0)})
    crop(1).save(str(root / "red" / "later.jxl"), format="WEBP")  # a JPEG XL file: not decoded, named
    config = dict(RUN, data=str(root), run_dir=str(tmp_path / "runs"), val_fraction=0, epochs=1)
    with pytest.warns(UserWarning, match=r"later\.jxl.*a run lists them in training_stats\.json's skipped_files"):
        result = gpucore.train(config, model=linear(2))
    skipped = json.load(open(result.stats_path))["skipped_files"]  # where the warning said
    assert [entry.split(": ")[0] for entry in skipped] == [str(root / "red" / "later.jxl")]
    # predict's and gradcam's readers of a folder: nothing of theirs lists the file, and the warning says so
    for read in (lambda: read_input_images(str(root), 3), lambda: list(photo_chunks(str(root), 3, 4))):
        with pytest.warns(UserWarning) as caught:
            read()
        said = " ".join(str(w.message) for w in caught)
        assert "red/later.jxl" in said and "no prediction and no Grad-CAM map" in said
        assert "training_stats.json" not in said


def test_an_empty_class_folder_is_refused_unless_allowed(tmp_path):
    root = str(tmp_path / "photos")
    write_class(root, "cat", 3)
    write_class(root, "dog", 3)
    os.makedirs(os.path.join(root, "emu", "nested"))
    open(os.path.join(root, "emu", ".DS_Store"), "w").write("")
    with pytest.raises(ConfigError, match=r"class folder emu holds no images gpucore reads \(PNG, JPEG, WebP.*"
                                          r"allow_empty: true"):
        read_image_folder(root)
    files = read_image_folder(root, allow_empty=True)
    assert files.classes == ["cat", "dog", "emu"] and sorted(set(files.targets.tolist())) == [0, 1]


def test_validation_classes_are_matched_by_name(tmp_path):
    root = tmp_path / "data"
    solid(root / "train", {"blue": (0, 0, 200), "green": (0, 200, 0), "red": (200, 0, 0)})
    solid(root / "val", {"blue": (0, 0, 200), "red": (200, 0, 0)})  # no green: red is class 2, not 1
    with pytest.warns(UserWarning, match=r"no folder for class green of training folder '.*train'"):
        train, val = builtin.read_data(str(root), {})
    assert val.classes == train.classes == ["blue", "green", "red"]
    assert [(os.path.basename(os.path.dirname(p)), int(y)) for p, y in zip(val.paths, val.targets)] == \
        [("blue", 0)] * 6 + [("red", 2)] * 6
    with pytest.warns(UserWarning, match="support is 0"):
        result = gpucore.train(dict(RUN, data=str(root), run_dir=str(tmp_path / "runs"), epochs=6), model=linear())
    assert result.history[-1]["val_accuracy"] == 1.0  # by position, every red image was scored as green: 0.5


@pytest.mark.parametrize("held_out", ["validation", "valid", "test"])
def test_a_held_out_folder_by_any_usual_name_is_the_validation_split(tmp_path, held_out):
    root = tmp_path / "data"
    solid(root / "train", {"blue": (0, 0, 200), "red": (200, 0, 0)})
    solid(root / held_out, {"blue": (0, 0, 200), "red": (200, 0, 0)}, per_class=2)
    train, val = builtin.read_data(str(root), {})
    assert len(train) == 12 and val.classes == train.classes == ["blue", "red"]
    assert [os.path.relpath(p, root).split(os.sep)[:2] for p in val.paths] == \
        [[held_out, "blue"]] * 2 + [[held_out, "red"]] * 2


def test_validation_is_the_first_usual_held_out_folder_and_test_the_last(tmp_path):
    root = tmp_path / "data"
    for folder in ("train", "test", "val"):
        solid(root / folder, {"blue": (0, 0, 200), "red": (200, 0, 0)}, per_class={"train": 4, "val": 3}.get(folder, 2))
    _, val = builtin.read_data(str(root), {})
    assert len(val) == 6 and all(os.sep + "val" + os.sep in p for p in val.paths)
    _, test = builtin.read_data(str(root), {}, held_out=("test",))
    assert len(test) == 4 and all(os.sep + "test" + os.sep in p for p in test.paths)


@pytest.mark.parametrize("extra, message", [
    ("white", r"has class folder white that training folder '.*train' does not have \(its classes: blue, red\)"),
    ("Red", r"class folder Red that .* differ only in case: 'Red' \(the training set has 'red'\)")])
def test_a_validation_class_training_lacks_is_refused_before_the_first_step(tmp_path, extra, message):
    root = tmp_path / "data"
    solid(root / "train", {"blue": (0, 0, 200), "red": (200, 0, 0)})
    solid(root / "val", {"blue": (0, 0, 200), extra: (250, 250, 250)})
    with pytest.raises(ConfigError, match=message):
        gpucore.train(dict(RUN, data=str(root), run_dir=str(tmp_path / "runs")), model=linear(2))
    assert not os.path.exists(tmp_path / "runs")


def test_the_split_is_drawn_by_file_name_and_adding_files_moves_none(tmp_path):
    root = str(tmp_path / "photos")
    write_class(root, "cat", 40)
    write_class(root, "dog", 40)
    before = read_image_folder(root)
    train, val, record = split(before, 0.25, seed=3)
    assert record.val_index == held_out_by_name(relative_names(before), 0.25, 3)[1]
    assert 10 <= len(val) <= 30 and len(train) + len(val) == 80  # a quarter on average
    write_class(root, "cat", 15, start=40)
    after_train, after_val, _ = split(read_image_folder(root), 0.25, seed=3)
    assert set(train.paths) <= set(after_train.paths) and set(val.paths) <= set(after_val.paths)
    assert set(after_val.paths) - set(val.paths) <= {p for p in after_val.paths if int(p[-7:-4]) >= 40}
    other_seed = split(before, 0.25, seed=4)[1]
    assert other_seed.paths != val.paths


def test_a_resume_on_changed_data_is_refused_naming_what_changed(tmp_path):
    root = str(tmp_path / "photos")
    write_class(root, "cat", 10)
    write_class(root, "dog", 10)
    config = dict(RUN, data=root, run_dir=str(tmp_path / "runs"), name="run", val_fraction=0.2)
    first = gpucore.train(config, model=linear(2))
    last = os.path.join(first.checkpoint_dir, "last.pt")
    recorded = torch.load(last, weights_only=True)["data"]
    assert recorded == json.load(open(first.stats_path))["data"]
    assert recorded["train"]["classes"] == ["cat", "dog"] and recorded["train"]["root"] == root
    assert recorded["train"]["samples"] + recorded["val"]["samples"] == 20
    write_class(root, "cat", 3, start=10)
    resume = dict(config, epochs=2, resume=last)
    with pytest.raises(ConfigError, match=r"training data: class 'cat': \d+ files added .*accept_changed_data: true"):
        gpucore.train(resume, model=linear(2))
    with pytest.warns(UserWarning, match=r"accept_changed_data: resuming .* class 'cat': \d+ files added"):
        resumed = gpucore.train(dict(resume, accept_changed_data=True), model=linear(2))
    assert resumed.history[-1]["epoch"] == 2
    os.remove(os.path.join(root, "dog", "001.jpg"))
    crop(99).save(os.path.join(root, "dog", "001b.jpg"))
    identity = identity_of(read_image_folder(root))
    old = identity_of(read_image_folder(root))
    old["groups"]["dog"]["fingerprint"] = "0"
    assert changes(old, identity) == ["class 'dog': as many files (10), but files renamed, replaced or changed in size"]


@pytest.mark.usefixtures("figures_skipped")  # checks numbers, rows and files: no figure
def test_the_data_path_is_recorded_absolute_and_evaluate_runs_from_anywhere(tmp_path, monkeypatch):
    solid(tmp_path / "work" / "photos" / "train", {"blue": (0, 0, 200), "red": (200, 0, 0)})
    solid(tmp_path / "work" / "photos" / "val", {"blue": (0, 0, 200), "red": (200, 0, 0)}, per_class=3)
    monkeypatch.chdir(tmp_path / "work")
    result = gpucore.train(dict(RUN, data="photos", run_dir="runs", name="rel", model="fast_cnn",
                                model_kwargs={"num_classes": 2, "in_channels": 3}))
    config = json.load(open(os.path.join(result.run_dir, "config.json")))
    assert config["data"] == str(tmp_path / "work" / "photos")
    monkeypatch.chdir(tmp_path)
    summary = gpucore.evaluate(os.path.join(result.checkpoint_dir, "best.pt"), device="cpu",
                               out=str(tmp_path / "ev"))
    assert summary["samples"] == 6 and summary["metrics"]["accuracy"] == result.history[-1]["val_accuracy"]
    os.rename(tmp_path / "work" / "photos", tmp_path / "work" / "moved")
    with pytest.raises(ConfigError, match=r"data '.*/work/photos' recorded by checkpoint '.*best.pt' \(its config "
                                          r"key data\) is not a folder or file here: pass the data, --data FOLDER"):
        gpucore.evaluate(os.path.join(result.checkpoint_dir, "best.pt"), device="cpu", out=str(tmp_path / "ev2"))
    moved = gpucore.evaluate(os.path.join(result.checkpoint_dir, "best.pt"), data=str(tmp_path / "work" / "moved"),
                             split="val", device="cpu", out=str(tmp_path / "ev3"))  # the run's val/, moved
    assert moved["metrics"] == summary["metrics"]


@pytest.mark.usefixtures("figures_skipped")  # checks numbers, rows and files: no figure
def test_evaluate_labels_a_folder_by_the_checkpoints_classes(tmp_path):
    root = tmp_path / "data"
    solid(root / "train", {"blue": (0, 0, 200), "green": (0, 200, 0), "red": (200, 0, 0)})
    solid(root / "val", {"blue": (0, 0, 200), "green": (0, 200, 0), "red": (200, 0, 0)}, per_class=2)
    result = gpucore.train(dict(RUN, data=str(root), run_dir=str(tmp_path / "runs"), epochs=6,
                                model="fast_cnn", model_kwargs={"num_classes": 3, "in_channels": 3}))
    checkpoint = os.path.join(result.checkpoint_dir, "best.pt")
    other = tmp_path / "other"
    solid(other / "test", {"red": (200, 0, 0), "blue": (0, 0, 200)}, per_class=3)
    solid(other / "train", {"red": (200, 0, 0), "blue": (0, 0, 200)}, per_class=1)
    with pytest.warns(UserWarning, match="no folder for class green of the model"):
        summary = gpucore.evaluate(checkpoint, data=str(other), split="test", device="cpu", out=str(tmp_path / "ev"))
    support = {row["class"]: row["support"] for row in summary["per_class"] if "class" in row}
    assert support.get("red") == 3 and support.get("blue") == 3 and support.get("green", 0) == 0
    shutil.copytree(other / "test" / "red", other / "test" / "white")
    with pytest.raises(ConfigError, match="class folder white that the model does not have"):
        gpucore.evaluate(checkpoint, data=str(other), split="test", device="cpu", out=str(tmp_path / "ev2"))


@pytest.mark.draws_report
@pytest.mark.parametrize("cache", ["auto", "none"])
def test_an_unreadable_photo_is_named_by_both_readers_and_skipped_files_are_said(tmp_path, cache):
    root = tmp_path / "data"
    solid(root, {"blue": (0, 0, 200), "red": (200, 0, 0)})
    with open(root / "red" / "cut.png", "wb") as handle:
        handle.write(open(root / "red" / "0.png", "rb").read()[:60])  # a download cut short
    config = dict(RUN, data=str(root), run_dir=str(tmp_path / "runs"), cache=cache, val_fraction=0, epochs=2)
    with pytest.raises(ConfigError, match=r"cut.png.*on_error: skip leaves unreadable files out"):
        gpucore.train(config, model=linear(2))
    with pytest.warns(UserWarning, match=r"on_error: skip left 1 unreadable file out: .*red/cut.png: ") as said:
        result = gpucore.train(dict(config, name="skip", report=True,
                                    data_kwargs=dict(RUN["data_kwargs"], on_error="skip")), model=linear(2))
    assert sum("on_error: skip left" in str(w.message) for w in said) == 1  # said once, not every epoch
    assert [entry.split(": ")[0] for entry in json.load(open(result.stats_path))["skipped_files"]] == \
        [str(root / "red" / "cut.png")]
    page = open(os.path.join(result.run_dir, "report.html")).read()
    assert "Files left out (1)" in page and "red/cut.png" in page
