"""The sign-language layouts read from a ROOT folder (gpucore.data.sign_layouts): CE-CSL (label/*.csv, clips by Number
in per-translator subfolders or flat), PHOENIX-2014 (annotations/manual/*.corpus.csv and the frame folders it names)
and labels.csv (file,text); the gloss vocabulary from the training split, dev/test glosses it lacks encoded as <unk>
and named; each bad row named (file, line) and refused, or skipped and counted."""
import csv
import os

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import require
from gpucore.data.sign_layouts import (BLANK, UNKNOWN, encode_glosses, find_sign_layout, gloss_vocabulary,
                                       read_sign_layout)
from gpucore.errors import ConfigError

CECSL_ROWS = {
    "train": [("train-00001", "A", "你好谢谢", "你好/谢谢"), ("train-00002", "B", "我爱你", "我/爱/你"),
              ("train-00003", "A", "谢谢你", "谢谢/ 你 /")],  # spaces and a trailing '/' around glosses
    "dev": [("dev-00001", "C", "你好朋友", "你好/朋友")],  # 朋友: never in training
    "test": [("test-00001", "A", "我爱你", "我/爱/你")],
}


def _write_csv(path, header, rows, delimiter=","):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, delimiter=delimiter)
        writer.writerow(header)
        writer.writerows(rows)


def make_cecsl(root, rows=CECSL_ROWS, flat_splits=("dev",)):
    """A CE-CSL folder: label/{split}.csv and a (tiny, not a real video: layouts do not decode) .mp4 per row under
    video/{split}/{Translator}/, or flat for `flat_splits`."""
    for split, entries in rows.items():
        _write_csv(os.path.join(root, "label", f"{split}.csv"), ["Number", "Translator", "Chinese Sentences", "Gloss"],
                   entries)
        for number, translator, _, _ in entries:
            folder = os.path.join(root, "video", split, *(() if split in flat_splits else (translator,)))
            os.makedirs(folder, exist_ok=True)
            open(os.path.join(folder, f"{number}.mp4"), "wb").close()
    return str(root)


def test_cecsl_clips_glosses_splits_and_vocabulary(tmp_path):
    root = make_cecsl(tmp_path)
    assert find_sign_layout(root) == "CE-CSL"
    layout = read_sign_layout(root)
    assert layout.name == "CE-CSL" and layout.kind == "video"
    train = layout.splits["train"]
    assert [os.path.relpath(c.path, root) for c in train] == [
        "video/train/A/train-00001.mp4", "video/train/B/train-00002.mp4", "video/train/A/train-00003.mp4"]
    assert [c.glosses for c in train] == [("你好", "谢谢"), ("我", "爱", "你"), ("谢谢", "你")]
    assert train[1].where.endswith("train.csv' line 3")
    assert os.path.relpath(layout.splits["dev"][0].path, root) == "video/dev/dev-00001.mp4"  # flat
    vocabulary = gloss_vocabulary(train)
    assert vocabulary == [BLANK, *sorted({"你好", "谢谢", "我", "爱", "你"}), UNKNOWN]
    assert encode_glosses(train, vocabulary, "train")[1] == [vocabulary.index(g) for g in ("我", "爱", "你")]
    with pytest.warns(UserWarning, match="the dev split has 1 glosses .* '朋友' x1"):
        dev = encode_glosses(layout.splits["dev"], vocabulary, "dev")
    assert dev == [[vocabulary.index("你好"), vocabulary.index(UNKNOWN)]]


def test_cecsl_number_in_two_translator_folders_taken_from_its_translators(tmp_path):
    root = make_cecsl(tmp_path)
    os.makedirs(tmp_path / "video" / "train" / "B", exist_ok=True)
    open(tmp_path / "video" / "train" / "B" / "train-00001.mp4", "wb").close()  # same Number, other translator
    with pytest.warns(UserWarning, match=r"1 clips without a row, not read: '.*B/train-00001\.mp4'"):
        layout = read_sign_layout(root)
    assert os.path.relpath(layout.splits["train"][0].path, root) == "video/train/A/train-00001.mp4"


def _photo_frames(folder, count, offset):
    from sklearn.datasets import load_sample_image
    photo = load_sample_image("flower.jpg")
    os.makedirs(folder, exist_ok=True)
    for t in range(count):
        Image.fromarray(photo[50 + offset + 2 * t:66 + offset + 2 * t, 80:96]).save(
            os.path.join(folder, f"images{t + 1:04d}.png"))


def test_phoenix_frame_folders_and_space_separated_glosses(tmp_path):
    require("sklearn")
    corpus = {"train": [("01April_2010_Thursday_heute_default-0", "REGEN WIND"),
                        ("01April_2010_Thursday_heute_default-1", "__ON__ SONNE REGEN __OFF__")],
              "dev": [("02April_2010_Friday_tagesschau_default-0", "SONNE SCHNEE")]}
    for split, rows in corpus.items():
        _write_csv(str(tmp_path / "annotations" / "manual" / f"{split}.corpus.csv"),
                   ["id", "folder", "signer", "annotation"],
                   [(name, f"{name}/1/*.png", "Signer01", text) for name, text in rows], delimiter="|")
        for i, (name, _) in enumerate(rows):
            _photo_frames(str(tmp_path / "features" / "fullFrame-210x260px" / split / name / "1"), 4 + i, 10 * i)
    root = str(tmp_path)
    assert find_sign_layout(root) == "PHOENIX-2014"
    layout = read_sign_layout(root)
    assert layout.kind == "frames"
    assert [os.path.relpath(c.path, root) for c in layout.splits["train"]] == [
        f"features/fullFrame-210x260px/train/01April_2010_Thursday_heute_default-{i}/1" for i in range(2)]
    assert [c.glosses for c in layout.splits["train"]] == [("REGEN", "WIND"), ("__ON__", "SONNE", "REGEN", "__OFF__")]
    assert gloss_vocabulary(layout.splits["train"]) == [BLANK, "REGEN", "SONNE", "WIND", "__OFF__", "__ON__", UNKNOWN]
    assert layout.splits["dev"][0].glosses == ("SONNE", "SCHNEE")
    from gpucore.data.clip_sequences import ClipSequences
    vocabulary = gloss_vocabulary(layout.splits["train"])
    clips = ClipSequences(layout.splits["train"], vocabulary, size=16)
    x, y = clips.collate(clips.__getitems__([0, 1]))
    assert y.tolist() == [[4, 1, 3, -1, -1], [5, 5, 2, 1, 4]]
    for row, clip in enumerate(layout.splits["train"]):
        names = sorted(os.listdir(clip.path))
        frames = np.stack([np.asarray(Image.open(os.path.join(clip.path, n))) for n in names])
        assert x[row, :len(names)].permute(0, 2, 3, 1).numpy().tolist() == frames.tolist()  # the PNGs, bit for bit


def test_labels_csv_of_keypoint_files_in_train_and_val(tmp_path):
    values = np.random.default_rng(0).normal(size=(3, 5, 6)).astype(np.float32)
    for split, rows in {"train": [("a.npy", "HELLO WORLD"), ("b.npy", "WORLD")], "val": [("c.npy", "HELLO")]}.items():
        _write_csv(str(tmp_path / split / "labels.csv"), ["file", "text"], rows)
        for name, _ in rows:
            np.save(str(tmp_path / split / name), values["abc".index(name[0])])
    np.save(str(tmp_path / "train" / "stray.npy"), np.zeros((5, 6), np.float32))
    with pytest.warns(UserWarning, match=r"1 clips without a row, not read: '.*stray\.npy'"):
        layout = read_sign_layout(str(tmp_path))
    assert layout.name == "labels.csv" and layout.kind == "keypoints"
    assert [(os.path.basename(c.path), c.glosses) for c in layout.splits["train"]] == [
        ("a.npy", ("HELLO", "WORLD")), ("b.npy", ("WORLD",))]
    assert [os.path.basename(c.path) for c in layout.splits["dev"]] == ["c.npy"]
    assert layout.unlabelled == [str(tmp_path / "train" / "stray.npy")]
    from gpucore.data.clip_sequences import ClipSequences
    clips = ClipSequences(layout.splits["train"], gloss_vocabulary(layout.splits["train"]))
    x, y = clips.collate([clips[0], clips[1]])
    assert torch.equal(x, torch.from_numpy(np.stack([np.load(str(tmp_path / "train" / n)) for n in ("a.npy", "b.npy")])))
    assert y.tolist() == [[5, 1, 2], [5, 2, -1]]


@pytest.mark.parametrize("bad", ["missing clip", "empty gloss"])
def test_bad_rows_refused_by_line_or_skipped_and_counted(tmp_path, bad):
    rows = {split: list(entries) for split, entries in CECSL_ROWS.items()}
    if bad == "missing clip":
        make_cecsl(tmp_path, rows)
        os.remove(tmp_path / "video" / "train" / "B" / "train-00002.mp4")
        message = r"train\.csv' line 3: no clip named 'train-00002' under"
    else:
        rows["train"][1] = ("train-00002", "B", "我爱你", " / ")
        make_cecsl(tmp_path, rows)
        message = r"train\.csv' line 3: an empty gloss string"
    with pytest.raises(ConfigError, match=message + ".*on_error: skip"):
        read_sign_layout(str(tmp_path))
    with pytest.warns(UserWarning, match="1 rows left out: .*" + message):
        layout = read_sign_layout(str(tmp_path), on_error="skip")
    assert [os.path.basename(c.path) for c in layout.splits["train"]] == ["train-00001.mp4", "train-00003.mp4"]
    assert len(layout.skipped) == 1


def test_mixed_clip_kinds_and_reserved_glosses_refused(tmp_path):
    root = make_cecsl(tmp_path)
    os.remove(tmp_path / "video" / "test" / "A" / "test-00001.mp4")
    np.save(str(tmp_path / "video" / "test" / "A" / "test-00001.npy"), np.zeros((4, 3)))
    with pytest.raises(ConfigError, match=r"mixes clip kinds: video .*keypoints .*test-00001\.npy"):
        read_sign_layout(root)
    rows = {"train": [("train-00001", "A", "x", "<blank>/你好")]}
    other = make_cecsl(tmp_path / "reserved", rows)
    with pytest.raises(ConfigError, match="gloss '<blank>' is a name gpucore's vocabulary reserves"):
        read_sign_layout(other)


def test_not_a_layout_and_missing_columns(tmp_path):
    with pytest.raises(ConfigError, match="holds no sign-language layout"):
        read_sign_layout(str(tmp_path))
    _write_csv(str(tmp_path / "label" / "train.csv"), ["Number", "Gloss"], [("train-00001", "A/B")])
    os.makedirs(tmp_path / "video" / "train")
    with pytest.raises(ConfigError, match=r"missing: Translator, Chinese Sentences"):
        read_sign_layout(str(tmp_path))


# ---- data: ROOT, served as a run's training and validation sets -----------------------------------------------------

def _real_cecsl(root, glosses):
    """A CE-CSL folder of real encoded clips (PyAV's encoder): one clip of moving shapes per row, each gloss drawn as
    its own shape for 4 frames, then other motion up to 8 + 2 x row frames."""
    from gpucore.data.synthetic import moving_shapes
    from gpucore.data.video import encode_clip
    shapes = {gloss: i % 4 for i, gloss in enumerate(sorted({g for rows in glosses.values() for r in rows for g in r}))}
    for split, rows in glosses.items():
        entries = []
        for i, row in enumerate(rows):
            number = f"{split}-{i:05d}"
            entries.append((number, "A", "句子", "/".join(row)))
            parts = [moving_shapes(4, 32, 32, seed=i * 7 + j, shape=shapes[g]) for j, g in enumerate(row)]
            rest = 8 + 2 * i - 4 * len(row)
            frames = torch.cat(parts + ([moving_shapes(rest, 32, 32, seed=100 + i)] if rest > 0 else []))
            folder = os.path.join(root, "video", split, "A")
            os.makedirs(folder, exist_ok=True)
            encode_clip(os.path.join(folder, f"{number}.mp4"), frames)
        _write_csv(os.path.join(root, "label", f"{split}.csv"), ["Number", "Translator", "Chinese Sentences", "Gloss"],
                   entries)
    return str(root)


GLOSSES = {"train": [["你好"], ["谢谢", "你"], ["你", "好"], ["我", "爱", "你"]], "dev": [["你好", "朋友"], ["你"]],
           "test": [["我", "你"]]}


def test_data_root_serves_train_and_dev_clips_as_contract_batches(tmp_path):
    require("av")
    import gpucore
    from gpucore.data.builtin import read_data
    from gpucore.data.clip_sequences import ClipSequences
    from gpucore.data.epoch_data import training_set, validation_set
    from gpucore.data.video import decode_clip

    root = _real_cecsl(tmp_path, GLOSSES)
    kwargs = {"size": 24, "rescale": 0.2, "batch_by_length": True}
    with pytest.warns(UserWarning, match="'朋友' x1"):
        train, dev = read_data(root, kwargs)
    assert isinstance(train, ClipSequences) and dev.split == "dev" and dev.rescale == 0
    vocabulary = train.classes
    assert vocabulary == [BLANK, "你", "你好", "好", "我", "爱", "谢谢", UNKNOWN]
    assert dev.targets == [[2, 7], [1]]
    config = gpucore.load_config({"data": root, "loss": "ctc", "batch_size": 2, "seed": 5, "data_kwargs": kwargs,
                                  "transforms": [{"RandomResizedCrop": {"size": 20, "scale": [0.5, 1.0]}}]})
    train_set = training_set(train, config, torch.device("cpu"))
    assert train_set.plan.input_shape == [3, 24, 24] and train_set.plan.output_size == (20, 20)
    batches = list(train_set.batches(epoch=1))
    assert sorted(len(y) for _, y in batches) == [2, 2]
    for x, y in batches:
        assert x.dtype == torch.float32 and x.shape[2:] == (3, 20, 20)
        assert x.shape[1] == int(y[:, 0].max())  # padded to the batch's longest clip
        for row in range(len(y)):
            frames = int(y[row, 0])
            assert not x[row, frames:].any()  # zeros past its end
    # the same epoch again (a resume): the same batches, bit for bit
    again = list(training_set(train, config, torch.device("cpu")).batches(epoch=1))
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(batches, again))
    val_set = validation_set(dev, config, torch.device("cpu"), train_set.plan.normalization)
    (x, y), = list(val_set.batches())
    assert y.tolist() == [[8, 2, 7], [10, 1, -1]]  # dev clips 8 and 10 frames, every frame kept (no rescaling)
    mean, std = (torch.tensor(v).view(3, 1, 1) for v in train_set.plan.normalization)
    frames = decode_clip(dev.clips[0], range(8), (24, 24)).float()
    # the deterministic form of RandomResizedCrop 20 is Resize 20 + CenterCrop 20: torchvision's antialiased bilinear
    # resize of each frame (gpucore's resize is checked against it elsewhere, to one intensity level)
    resized = torch.nn.functional.interpolate(frames, size=(20, 20), mode="bilinear", antialias=True,
                                              align_corners=False).round().clamp(0, 255) / 255
    assert x.shape == (2, 10, 3, 20, 20)
    assert (x[0, :8] - (resized - mean) / std).abs().max() <= 1.01 / 255 / std.min()
    assert not x[0, 8:].any()


def test_evaluate_split_test_and_a_models_vocabulary(tmp_path):
    require("av")
    from gpucore.data.builtin import read_data
    root = _real_cecsl(tmp_path, GLOSSES)
    vocabulary = [BLANK, "你", "我", "好", UNKNOWN]  # a trained model's
    with pytest.warns(UserWarning):
        train, test = read_data(root, {"size": 16}, classes=vocabulary, held_out=("test", "validation"))
    assert test.split == "test" and test.targets == [[2, 1]] and train.classes == vocabulary
    with pytest.raises(ConfigError, match=r"does not fit the clips .*size, channels, frame_stride"):
        read_data(root, {"sise": 16})


def test_held_out_splits_by_the_names_evaluate_reads_them(tmp_path):
    from gpucore.data.builtin import held_out_folders
    from gpucore.data.sign_layouts import sign_layout_splits
    root = make_cecsl(tmp_path)
    assert sign_layout_splits(root) == ["train", "dev", "test"]
    assert held_out_folders(root) == ["validation", "test"]  # evaluate's split val reads dev, split test reads test
    os.remove(tmp_path / "label" / "test.csv")
    assert held_out_folders(root) == ["validation"]


class FrameGRU(torch.nn.Module):
    """A user's own model for clips: a convolution per frame, a GRU over the frames, a gloss classifier per step."""

    temporal_stride = 1

    def __init__(self, outputs):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2)
        self.rnn = torch.nn.GRU(8, 16, batch_first=True)
        self.head = torch.nn.Linear(16, outputs)

    def forward(self, x):
        n, t = x.shape[:2]
        features = self.conv(x.flatten(0, 1)).mean((2, 3)).view(n, t, -1)
        return self.head(self.rnn(features)[0])


@pytest.mark.slow  # trains a run (seconds)
@pytest.mark.usefixtures("figures_skipped")  # checks numbers, rows and files: no figure
def test_train_on_a_cecsl_root_then_evaluate_each_split(tmp_path):
    require("av")
    import warnings
    import gpucore
    root = _real_cecsl(tmp_path / "CE-CSL", GLOSSES)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the dev and test splits' unseen glosses (tested above)
        result = gpucore.train({"data": root, "loss": "ctc", "epochs": 1, "batch_size": 2, "device": "cpu",
                                "precision": "32", "progress": False, "report": False, "data_kwargs": {"size": 24},
                                "run_dir": str(tmp_path / "runs")}, model=FrameGRU(8))
        checkpoint = torch.load(os.path.join(result.checkpoint_dir, "best.pt"), weights_only=False)
        assert checkpoint["classes"] == [BLANK, "你", "你好", "好", "我", "爱", "谢谢", UNKNOWN]  # the vocabulary
        assert checkpoint["data"]["train"]["kind"] == "video clips" and checkpoint["data"]["train"]["samples"] == 4
        scored = {split: gpucore.evaluate(os.path.join(result.checkpoint_dir, "best.pt"), data=root, split=split,
                                          device="cpu", model=FrameGRU(8))["samples"]
                  for split in ("test", "val", "all")}
    assert scored == {"test": 1, "val": 2, "all": 7}



class PooledFrames(torch.nn.Module):
    """A user's model of temporal_stride 4: a convolution per frame, its features pooled 4 frames to a step."""

    temporal_stride = 4

    def __init__(self, outputs):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2)
        self.head = torch.nn.Linear(8, outputs)

    def forward(self, x):
        n, t = x.shape[:2]
        features = self.conv(x.flatten(0, 1)).mean((2, 3)).view(n, t, -1)
        steps = torch.nn.functional.avg_pool1d(features.transpose(1, 2), 4, ceil_mode=True).transpose(1, 2)
        return self.head(steps)


@pytest.mark.slow  # trains a run (seconds)
def test_clips_too_short_for_the_models_stride_refused_or_skipped_before_the_first_step(tmp_path):
    """6 frames fit 3 glosses at data_kwargs' temporal_stride 1, not at the model's 4 (2 steps): train refuses the
    clip by name before any step, or leaves it out with a warning naming it (on_error skip)."""
    require("av")
    import gpucore
    from gpucore.data.synthetic import moving_shapes
    from gpucore.data.video import encode_clip
    glosses = {"train": [["你", "好"], ["我", "爱", "你"], ["你"]], "dev": [["你", "好"]]}
    root = _real_cecsl(tmp_path / "CE-CSL", glosses)
    short = os.path.join(root, "video", "train", "A", "train-00001.mp4")  # 我/爱/你
    encode_clip(short, moving_shapes(6, 32, 32, seed=9))
    config = {"data": root, "loss": "ctc", "epochs": 1, "batch_size": 2, "device": "cpu", "precision": "32",
              "progress": False, "report": False, "data_kwargs": {"size": 24}, "run_dir": str(tmp_path / "runs")}
    with pytest.raises(ConfigError, match=r"line 3: clip '.*train-00001\.mp4' gives 2 output steps .*temporal_stride "
                                          r"4\), fewer than CTC needs for its 3 glosses"):
        gpucore.train(config, model=PooledFrames(6))
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").rglob("*.pt"))  # no step was taken
    with pytest.warns(UserWarning, match=r"the train split: 1 clips left out, too short .*temporal_stride 4: .*"
                                         r"train-00001\.mp4"):
        result = gpucore.train({**config, "data_kwargs": {"size": 24, "on_error": "skip"}}, model=PooledFrames(6))
    assert result.history[0]["train_ctc_unfit"] == 0
    checkpoint = torch.load(os.path.join(result.checkpoint_dir, "last.pt"), weights_only=False)
    assert checkpoint["data"]["train"]["samples"] == 2  # the two clips that fit


@pytest.mark.slow  # trains a run (seconds)
def test_a_resume_on_another_vocabulary_is_refused_naming_the_glosses(tmp_path):
    require("av")
    import gpucore
    glosses = {"train": [["你", "好"], ["我", "你"]], "dev": [["你", "好"]]}
    root = _real_cecsl(tmp_path / "CE-CSL", glosses)
    config = {"data": root, "loss": "ctc", "epochs": 1, "batch_size": 2, "device": "cpu", "precision": "32",
              "progress": False, "report": False, "data_kwargs": {"size": 24}, "run_dir": str(tmp_path / "runs"),
              "name": "signs", "schedule": "constant"}  # constant: a resume may add epochs
    result = gpucore.train(config, model=FrameGRU(5))
    last = os.path.join(result.checkpoint_dir, "last.pt")
    assert torch.load(last, weights_only=False)["classes"] == [BLANK, "你", "好", "我", UNKNOWN]
    # the training labels relabelled: 我 becomes 他 (a gloss gone, one new), then 你 and 我 swapped (the same glosses)
    label = tmp_path / "CE-CSL" / "label" / "train.csv"
    text = label.read_text(encoding="utf-8")
    label.write_text(text.replace("我", "他"), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"trained with a gloss vocabulary of 5 entries and this resume's training "
                                          r"split gives 5: glosses the data no longer has: '我'; glosses new in the "
                                          r"data: '他'"):
        gpucore.train({**config, "epochs": 2, "resume": last, "accept_changed_data": True}, model=FrameGRU(5))
    label.write_text(text.replace("我/你", "你/我"), encoding="utf-8")  # same glosses: the vocabulary is sorted
    resumed = gpucore.train({**config, "epochs": 2, "resume": last, "accept_changed_data": True}, model=FrameGRU(5))
    assert [record["epoch"] for record in resumed.history] == [1, 2]
    from gpucore.data.identity import check_same_vocabulary
    with pytest.raises(ConfigError, match=r"the same glosses in another order: id 1 was '你', now '好'"):
        check_same_vocabulary("c.pt", [BLANK, "你", "好"], [BLANK, "好", "你"])  # a Dataset's own vocabulary
    check_same_vocabulary("c.pt", None, [BLANK, "你"])  # a checkpoint that records none: nothing to compare


class EightGlosses(FrameGRU):
    """FrameGRU of 8 outputs, built with no arguments (gpucore predict --model builds it so)."""

    def __init__(self):
        super().__init__(8)


@pytest.mark.slow  # trains a run (seconds)
def test_predict_prints_a_clips_glosses_as_the_models_greedy_decoding(tmp_path, capsys, monkeypatch):
    require("av")
    import json
    import warnings
    import gpucore
    from gpucore import cli
    from gpucore.data.synthetic import moving_shapes
    from gpucore.data.video import encode_clip
    root = _real_cecsl(tmp_path / "CE-CSL", GLOSSES)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the dev and test splits' unseen glosses (tested above)
        result = gpucore.train({"data": root, "loss": "ctc", "epochs": 2, "batch_size": 2, "device": "cpu",
                                "precision": "32", "progress": False, "report": False, "data_kwargs": {"size": 24},
                                "run_dir": str(tmp_path / "runs")}, model=EightGlosses())
    best = os.path.join(result.checkpoint_dir, "best.pt")
    clip = str(tmp_path / "new.mp4")  # a clip no split holds: 14 frames of two shapes
    encode_clip(clip, torch.cat([moving_shapes(7, 32, 32, seed=41, shape=1), moving_shapes(7, 32, 32, seed=42)]))
    # the reference: the trained weights on the clip decoded as the training reader reads it, greedy by hand
    loaded = gpucore.load(best, "cpu", EightGlosses())
    from gpucore.data.clip_sequences import ClipSequences
    from gpucore.data.sign_layouts import GlossClip
    clips = ClipSequences([GlossClip(clip, (), "new")], loaded.classes, size=24)
    frames = clips[0][0].float() / 255
    mean, std = (torch.tensor(v).view(3, 1, 1) for v in loaded.normalization)
    with torch.no_grad():
        outputs = loaded.module.eval()(((frames - mean) / std).unsqueeze(0))[0]
    assert loaded.classes[-1] == "<unk>"
    best_path = outputs[:, :-1].argmax(-1).tolist()  # "<unk>" (glosses training never saw) is never decoded
    ids = [g for i, g in enumerate(best_path) if g != 0 and (i == 0 or g != best_path[i - 1])]
    expected = [loaded.classes[g] for g in ids]
    assert expected  # the trained model names glosses on it (not an empty decoding on both sides)
    predictions = gpucore.predict(loaded, clip)
    assert predictions.rows == [{"input": clip, "glosses": " ".join(expected)}]
    monkeypatch.syspath_prepend(os.path.dirname(__file__))
    model = ["--model", "test_sign_layouts:EightGlosses", "--device", "cpu", "--out", str(tmp_path / "p.csv")]
    assert cli.main(["predict", best, clip, *model]) == 0
    assert capsys.readouterr().out == " ".join(expected) + "\n"
    assert cli.main(["predict", best, clip, *model, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["glosses"] == {clip: expected}
