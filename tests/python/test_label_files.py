"""Label files as people download them, made small from real photo crops (scikit-learn's china.jpg and flower.jpg,
scikit-image's photos where installed): Kaggle's labels.csv (class names, files named without extension) and
train.csv + train/ (+ an unlabelled test/), Hugging Face's image folder (metadata.csv at the top; metadata.jsonl in
train/ and validation/), a multi-label CSV; each read as pandas/csv read by hand gives it (and as
datasets.load_dataset("imagefolder") gives it where `datasets` is installed), each trained from the CLI with a model
as wide as the data's class count. The class count from integer labels and multi-label widths, a model of another
width refused, and every bad row named by its line."""
import contextlib
import csv
import json
import os

import numpy as np
import pytest
import torch
from PIL import Image

import gpucore
from gpucore.data import read_csv, read_files, read_label_file
from gpucore.data.builtin import read_data
from gpucore.data.identity import changes, identity_of
from gpucore.errors import ConfigError
from gpucore.models import FastCNN
from gpucore.models.surgery import output_count
from conftest import gpucore_command, gpucore_process, require

RUN = dict(epochs=1, device="cpu", precision="32", progress=False, batch_size=4, model="fast_cnn", report=False,
           loggers=[])


def _photos():
    """Real RGB photos (H x W x 3 uint8): scikit-learn's two, scikit-image's coffee and chelsea where installed."""
    sklearn_datasets = pytest.importorskip("sklearn.datasets", reason="real photos come from scikit-learn's samples")
    photos = [np.asarray(image) for image in sklearn_datasets.load_sample_images().images]
    try:
        from skimage import data as skimage_data
        photos += [skimage_data.coffee(), skimage_data.chelsea()]
    except ImportError:
        pass
    return photos


def _crop(index):
    """The index-th 32 x 32 crop, walking over the photos: each one a distinct piece of a real photo."""
    photos = _photos()
    photo = photos[index % len(photos)]
    step = index // len(photos)
    top, left = 16 + 20 * (step % 12), 24 + 40 * (step // 12)
    return photo[top:top + 32, left:left + 32]


def _save(path, index):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(_crop(index)).save(path)


def _by_hand(path, file_column, label_column):
    """(files, labels) of a CSV as the csv module reads it: the reference the readers are compared with."""
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    return [row[file_column] for row in rows], [row[label_column] for row in rows]


def _train_cli(capsys, data, tmp_path, *sets):
    """`gpucore train --set data=DATA` of RUN, 1 epoch, run in this process from tmp_path; the checkpoint it wrote,
    loaded, and its training_stats.json."""
    settings = [f"data={data}", f"run_dir={tmp_path / 'runs'}", "epochs=1", "device=cpu", "precision=32",
                "progress=false", "batch_size=4", "model=fast_cnn", "report=false", *sets]
    with contextlib.chdir(tmp_path):
        result = gpucore_command(capsys, "train", *[part for setting in settings for part in ("--set", setting)])
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    run_dir = json.loads(result.stdout)["run_dir"]
    stats = json.load(open(os.path.join(run_dir, "training_stats.json")))
    return gpucore.load(os.path.join(run_dir, "checkpoints", "last.pt"), device="cpu"), stats


def _hf_files_and_labels(data_dir):
    """{split: sorted (real path, label)} as datasets.load_dataset("imagefolder", data_dir=...) reads a folder: the
    reference for Hugging Face's convention (skipped where `datasets` is not installed)."""
    datasets = require("datasets")
    loaded = datasets.load_dataset("imagefolder", data_dir=str(data_dir), cache_dir=str(data_dir) + "-hf-cache")
    return {split: sorted(zip((os.path.realpath(image.filename) for image in loaded[split]["image"]),
                              loaded[split]["label"])) for split in loaded}


def _files_and_labels(data, classes):
    """Sorted (real path, class name) of an ImageFiles, to compare with _hf_files_and_labels."""
    return sorted(zip((os.path.realpath(p) for p in data.paths), (classes[t] for t in data.targets.tolist())))


# ---- Kaggle: labels.csv (class names, ids without extension) beside train/, and train.csv + train/ + test/ -------

BREEDS = ["beagle", "collie", "pug"]


@pytest.fixture(scope="module")
def kaggle_labels(tmp_path_factory):
    """dog-breed-identification's layout: train/<id>.jpg, labels.csv of id,breed (no extension), test/ unlabelled."""
    root = tmp_path_factory.mktemp("kaggle") / "dog-breeds"
    rows = []
    for index in range(15):
        image_id = f"{index:04x}c0ffee"
        _save(str(root / "train" / f"{image_id}.jpg"), index)
        rows.append((image_id, BREEDS[index % 3] if index != 4 else "pug"))
    for index in range(3):
        _save(str(root / "test" / f"t{index}.jpg"), 40 + index)
    with open(root / "labels.csv", "w", newline="") as handle:
        csv.writer(handle).writerows([("id", "breed"), *rows])
    return root


def test_kaggle_labels_csv_reads_names_as_written(kaggle_labels):
    ids, breeds = _by_hand(kaggle_labels / "labels.csv", "id", "breed")
    train, val = read_data(str(kaggle_labels), {})
    assert val is None  # no held-out split of its own: val_fraction holds one out
    assert train.classes == sorted(set(breeds)) == BREEDS
    assert train.paths == [str(kaggle_labels / "train" / f"{i}.jpg") for i in ids]
    assert train.targets.tolist() == [BREEDS.index(b) for b in breeds]
    assert not any(path.startswith(str(kaggle_labels / "test")) for path in train.paths)
    # the same file given to the reader, the images' folder named; or as data: itself (its train/ looked in)
    direct = read_label_file(str(kaggle_labels / "labels.csv"), root=str(kaggle_labels / "train"))
    assert direct.paths == train.paths and torch.equal(direct.targets, train.targets)
    named, _ = read_data(str(kaggle_labels / "labels.csv"), {})
    assert named.paths == train.paths and torch.equal(named.targets, train.targets)
    # pixels are the photos' crops, as Pillow decodes the JPEGs
    pillow = np.asarray(Image.open(train.paths[2]).convert("RGB"))
    assert np.array_equal(train.inputs[2].permute(1, 2, 0).numpy(), pillow)


@pytest.mark.slow
@pytest.mark.usefixtures("figures_skipped")  # checks numbers, rows and files: no figure
def test_kaggle_labels_csv_trains_and_evaluates_from_the_cli_with_a_head_per_breed(kaggle_labels, tmp_path, capsys):
    loaded, stats = _train_cli(capsys, kaggle_labels, tmp_path)
    assert output_count(loaded.module) == 3 and loaded.classes == BREEDS
    assert stats["model_kwargs_from_data"] == {"num_classes": 3, "in_channels": 3}
    assert stats["data"]["train"]["classes"] == BREEDS  # the identity a resume compares
    result = gpucore_command(capsys, "evaluate", loaded.checkpoint, "--data", str(kaggle_labels / "labels.csv"),
                             "--device", "cpu", "--out", str(tmp_path / "evaluated"))
    assert result.returncode == 0, result.stderr
    rows = json.load(open(tmp_path / "evaluated" / "per_class.json"))
    assert [row["class"] for row in rows] == BREEDS


@pytest.mark.slow
def test_train_csv_beside_train_and_test_folders_with_integer_ids(tmp_path, capsys):
    root = tmp_path / "competition"
    rows = []
    for index in range(16):
        _save(str(root / "train" / f"img_{index}.png"), index)
        rows.append((f"img_{index}.png", index % 4))
    _save(str(root / "test" / "img_99.png"), 50)
    with open(root / "train.csv", "w", newline="") as handle:
        csv.writer(handle).writerows([("image_id", "label"), *rows])
    files, labels = _by_hand(root / "train.csv", "image_id", "label")
    train, _ = read_data(str(root), {})
    assert train.classes is None  # integer ids: no names
    assert [os.path.basename(p) for p in train.paths] == files
    assert train.targets.tolist() == [int(label) for label in labels]
    loaded, stats = _train_cli(capsys, root, tmp_path)
    assert output_count(loaded.module) == 4  # the ids 0..3, not fast_cnn's default 10
    assert stats["model_kwargs_from_data"]["num_classes"] == 4


# ---- Hugging Face's image folder: metadata.csv at the top, metadata.jsonl per split ---------------------------------

@pytest.fixture(scope="module")
def hf_csv_folder(tmp_path_factory):
    """An image folder with metadata.csv (file_name,label) beside its images, some in a subfolder."""
    root = tmp_path_factory.mktemp("hf") / "flowers"
    rows = []
    for index in range(12):
        name = f"{'extra/' if index % 5 == 0 else ''}photo{index}.png"
        _save(str(root / name), index)
        rows.append((name, ["daisy", "rose", "tulip"][index % 3]))
    with open(root / "metadata.csv", "w", newline="") as handle:
        csv.writer(handle).writerows([("file_name", "label"), *rows])
    return root


def test_hf_metadata_csv_reads_as_written(hf_csv_folder):
    files, labels = _by_hand(hf_csv_folder / "metadata.csv", "file_name", "label")
    train, val = read_data(str(hf_csv_folder), {})
    assert val is None
    assert train.paths == [str(hf_csv_folder / f) for f in files]
    assert [train.classes[t] for t in train.targets.tolist()] == labels


def test_hf_metadata_csv_reads_the_files_and_labels_datasets_reads(hf_csv_folder):
    train, _ = read_data(str(hf_csv_folder), {})
    assert _hf_files_and_labels(hf_csv_folder) == {"train": _files_and_labels(train, train.classes)}


@pytest.mark.slow
def test_hf_metadata_csv_trains_from_the_cli(hf_csv_folder, tmp_path, capsys):
    loaded, stats = _train_cli(capsys, hf_csv_folder, tmp_path)
    assert output_count(loaded.module) == 3 and loaded.classes == ["daisy", "rose", "tulip"]
    assert stats["validation"]["source"] == "val_fraction"


@pytest.fixture(scope="module")
def hf_jsonl_splits(tmp_path_factory):
    """train/ and validation/, each with metadata.jsonl ({"file_name", "label"}) beside its images; validation lacks
    one of the classes, so its labels are right only when numbered by train/'s classes."""
    root = tmp_path_factory.mktemp("hf-splits") / "birds"
    for split, count, names in (("train", 12, ["finch", "owl", "wren"]), ("validation", 4, ["owl", "wren"])):
        lines = []
        for index in range(count):
            _save(str(root / split / f"{index}.jpg"), index + (0 if split == "train" else 30))
            lines.append(json.dumps({"file_name": f"{index}.jpg", "label": names[index % len(names)]}))
        (root / split / "metadata.jsonl").write_text("\n".join(lines) + "\n")
    return root


def _jsonl_by_hand(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    return [row["file_name"] for row in rows], [row["label"] for row in rows]


def test_hf_metadata_jsonl_splits_read_as_written(hf_jsonl_splits):
    train, val = read_data(str(hf_jsonl_splits), {})
    assert train.classes == ["finch", "owl", "wren"] and val.classes == train.classes
    for data, split in ((train, "train"), (val, "validation")):
        files, labels = _jsonl_by_hand(hf_jsonl_splits / split / "metadata.jsonl")
        assert data.paths == [str(hf_jsonl_splits / split / f) for f in files]
        assert [train.classes[t] for t in data.targets.tolist()] == labels


def test_hf_metadata_jsonl_splits_read_the_files_and_labels_datasets_reads(hf_jsonl_splits):
    train, val = read_data(str(hf_jsonl_splits), {})
    assert _hf_files_and_labels(hf_jsonl_splits) == {"train": _files_and_labels(train, train.classes),
                                                     "validation": _files_and_labels(val, train.classes)}


@pytest.mark.slow
def test_hf_metadata_jsonl_splits_train_from_the_cli(hf_jsonl_splits, tmp_path, capsys):
    loaded, stats = _train_cli(capsys, hf_jsonl_splits, tmp_path)
    assert output_count(loaded.module) == 3
    assert stats["validation"]["source"] == "held_out_split"


# ---- multi-label: a CSV of tags separated by '|', a JSONL of lists ------------------------------------------------

TAGS = ["beach", "city", "dog", "night", "people", "snow", "tree"]


@pytest.fixture(scope="module")
def tagged(tmp_path_factory):
    """tags.csv (file,tags: 'city|night', seven tags) beside its images."""
    root = tmp_path_factory.mktemp("tags")
    rows = []
    for index in range(14):
        _save(str(root / "images" / f"{index}.jpg"), index)
        rows.append((f"images/{index}.jpg", "|".join(TAGS[(index + k) % 7] for k in range(1 + index % 3))))
    with open(root / "tags.csv", "w", newline="") as handle:
        csv.writer(handle).writerows([("file", "tags"), *rows])
    return root


def _multi_hot_by_hand(labels, classes):
    return torch.tensor([[float(name in row.split("|")) for name in classes] for row in labels])


def test_multi_label_csv_and_jsonl_read_as_written(tagged, tmp_path):
    files, labels = _by_hand(tagged / "tags.csv", "file", "tags")
    data = read_label_file(str(tagged / "tags.csv"), multi_label=True)
    assert data.classes == TAGS and data.paths == [str(tagged / f) for f in files]
    assert torch.equal(data.targets, _multi_hot_by_hand(labels, TAGS))
    # JSON Lines: a list of labels is multi-label by itself
    (tagged / "tags.jsonl").write_text("".join(json.dumps({"image": f, "labels": row.split("|")}) + "\n"
                                               for f, row in zip(files, labels)))
    listed = read_label_file(str(tagged / "tags.jsonl"))
    assert listed.classes == TAGS and torch.equal(listed.targets, data.targets)


def test_multi_label_data_gets_as_many_outputs_as_tags_and_a_wrong_width_is_refused(tagged, tmp_path):
    data = read_csv(str(tagged / "tags.csv"), multi_label=True)
    config = {**RUN, "loss": "bce_with_logits", "top_k": 0}
    result = gpucore.train(config, train_data=data, run_dir=str(tmp_path / "ok"))
    assert output_count(result.model) == 7
    with pytest.raises(ConfigError, match=r"model 'fast_cnn' has 10 outputs, but the data has 7 classes \(beach, "
                                          r"city, .*one output each for multi-label classification: set model_kwargs "
                                          r"num_classes: 7"):
        gpucore.train(config, train_data=data, run_dir=str(tmp_path / "wide"), model_kwargs={"num_classes": 10})
    with pytest.raises(ConfigError, match=r"the model given to train\(\) has 5 outputs, but the data has 7 classes"):
        gpucore.train(config, train_data=data, run_dir=str(tmp_path / "narrow"),
                      model=FastCNN(num_classes=5, in_channels=3))
    assert not os.path.exists(tmp_path / "wide") and not os.path.exists(tmp_path / "narrow")


@pytest.mark.slow
def test_multi_label_csv_trains_from_the_cli(tagged, tmp_path, capsys):
    loaded, stats = _train_cli(capsys, tagged / "tags.csv", tmp_path, "loss=bce_with_logits", "top_k=0")
    assert output_count(loaded.module) == 7 and loaded.classes == TAGS
    assert stats["model_kwargs_from_data"]["num_classes"] == 7


# ---- the class count of integer labels, string labels for read_files ------------------------------------------

def test_integer_labels_without_names_get_one_output_per_class(tmp_path):
    paths = []
    for index in range(16):
        paths.append(str(tmp_path / "images" / f"{index}.png"))
        _save(paths[-1], index)
    data = read_files(paths, [index % 4 for index in range(16)])
    assert data.classes is None
    result = gpucore.train(RUN, train_data=data, run_dir=str(tmp_path / "runs"))
    assert output_count(result.model) == 4  # not fast_cnn's default 10
    assert json.load(open(result.stats_path))["model_kwargs_from_data"] == {"num_classes": 4, "in_channels": 3}
    with pytest.raises(ConfigError, match=r"the model given to train\(\) has 3 outputs, but the data has 4 classes "
                                          r"\(ids 0 to 3\): give it a head of that many outputs"):
        gpucore.train(RUN, train_data=data, run_dir=str(tmp_path / "narrow"),
                      model=FastCNN(num_classes=3, in_channels=3))
    with pytest.raises(ConfigError, match=r"train_data has 1 class \(id 0\); classification \(loss cross_entropy\) "
                                          r"needs 2 classes at least"):
        gpucore.train(RUN, train_data=read_files(paths, [0] * 16), run_dir=str(tmp_path / "one"))


def test_read_files_takes_class_names(tmp_path):
    paths = []
    for index in range(6):
        paths.append(str(tmp_path / f"{index}.png"))
        _save(paths[-1], index)
    names = ["tulip", "daisy", "rose", "daisy", "tulip", "rose"]
    data = read_files(paths, names)
    assert data.classes == ["daisy", "rose", "tulip"]
    assert [data.classes[t] for t in data.targets.tolist()] == names
    given = read_files(paths, names, classes=["tulip", "rose", "daisy"])
    assert given.targets.tolist() == [0, 2, 1, 2, 0, 1]
    with pytest.raises(ConfigError, match=r"file '.*0.png': 'label' is 'tulip', not a class; expected one of rose, "
                                          r"daisy or an index 0 to 1"):
        read_files(paths, names, classes=["rose", "daisy"])
    with pytest.raises(ConfigError, match=r"read_files: 'label' mixes class names \('tulip', file '.*0.png'\) and "
                                          r"integer class ids \(3, file '.*1.png'\)"):
        read_files(paths[:2], ["tulip", 3])


# ---- every bad row named ----------------------------------------------------------------------------------------

def test_bad_rows_are_named_by_line(tmp_path):
    for index, name in enumerate(("a.png", "b.png", "c.jpg", "c.png")):
        _save(str(tmp_path / name), index)
    cases = [
        ("file,label\na.png,cat\nmissing.png,dog\n", {}, r"labels-0.csv' line 3: image 'missing.png' does not exist"),
        ("file,label\na.png,cat\nb.png,\n", {}, r"line 3: 'label' is empty; every image needs its class"),
        ("file,label\na.png,cat\nb.png,dog\na.png,dog\n", {},
         r"line 4 lists image 'a.png' again \(first on line 2\)"),
        ("file,label\n", {}, r"labels-3.csv' has no rows below its header"),
        ("image,path,label\na.png,a.png,cat\n", {},
         r"columns image, path, label: which holds the image files\? Several could be: image, path; name it with "
         r"data_kwargs image_column"),
        ("file,label\nc,cat\n", {}, r"line 2: image 'c' could be any of c.png, c.jpg; name the file with its "
                                    r"extension"),
        ("file,label\na.png,cat\nb.png,1\n", {}, r"mixes class names \('cat', line 2\) and integer class ids "
                                                  r"\(1, line 3\)"),
        ("file,label\na.png,cat|dog\n", {}, r"line 2: 'label' is 'cat\|dog', which looks like several labels: for "
                                             r"multi-label data set loss bce_with_logits"),
        ("file,colour,size\na.png,red,1\n", {}, r"which holds the labels\? None has a usual name"),
        ("file,label\na.png,cat\nb.png,dog\n", {"label_column": "breed"}, r"has no column 'breed' \(label_column\); "
                                                                          r"its columns: file, label"),
    ]
    for index, (text, kwargs, message) in enumerate(cases):
        (tmp_path / f"labels-{index}.csv").write_text(text)
        with pytest.raises(ConfigError, match=message):
            read_label_file(str(tmp_path / f"labels-{index}.csv"), **kwargs)
    (tmp_path / "bad.jsonl").write_text('{"file_name": "a.png", "label": "cat"}\n["b.png", "dog"]\n')
    with pytest.raises(ConfigError, match=r"JSONL '.*bad.jsonl' line 2 is a list; expected an object"):
        read_label_file(str(tmp_path / "bad.jsonl"))
    # from the CLI: one line, no traceback
    result = gpucore_process("train", "--set", f"data={tmp_path / 'labels-0.csv'}", "--set", "device=cpu", "--set",
                             f"run_dir={tmp_path / 'runs'}", cwd=str(tmp_path))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "line 3: image 'missing.png' does not exist" in result.stderr


def test_changed_labels_of_the_same_files_change_the_identity(tmp_path):
    for index in range(4):
        _save(str(tmp_path / f"{index}.png"), index)
    (tmp_path / "a.csv").write_text("file,label\n0.png,0\n1.png,1\n2.png,0\n3.png,1\n")
    (tmp_path / "b.csv").write_text("file,label\n0.png,0\n1.png,1\n2.png,1\n3.png,0\n")
    (tmp_path / "c.csv").write_text("file,label\n3.png,1\n2.png,0\n1.png,1\n0.png,0\n")  # a's rows reordered
    before, after, reordered = (identity_of(read_label_file(str(tmp_path / f"{n}.csv"))) for n in "abc")
    assert changes(before, after) == ["the same files, but their labels differ"]
    assert changes(before, reordered) == []
