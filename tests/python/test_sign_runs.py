"""A sign-language run after training (issue 72): the gloss vocabulary recorded in config.json and checked by evaluate,
predict and a resume from config.json; a stop mid-epoch (SIGTERM, Ctrl-C) of an augmented clip run resumed bitwise;
predict on video files, frame folders and keypoint files against the model called by hand; evaluate --split test
from the command line, its WER against jiwer. One trained run is shared by the module (a few seconds)."""
import json
import os
import shutil
import signal
import warnings

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from conftest import assert_states_equal, require, rows_without_times, train_interrupted
from gpucore.errors import ConfigError
from test_sign_layouts import _real_cecsl, _write_csv

av = require("av")

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]  # trains runs (seconds)

# The training split's glosses give the vocabulary below; the test split's '朋友' is one training never saw.
GLOSSES = {"train": [["你好"], ["谢谢", "你"], ["你", "好"], ["我", "爱", "你"], ["好", "谢谢"], ["我", "你好"]],
           "dev": [["你", "好"], ["谢谢"]], "test": [["我", "朋友"], ["你好", "你"], ["爱"]]}
VOCABULARY = ["<blank>", "你", "你好", "好", "我", "爱", "谢谢", "<unk>"]
# Augmentation on: temporal rescaling (frames dropped or repeated), one spatial draw per clip, batching by length.
CONFIG = {"loss": "ctc", "epochs": 3, "batch_size": 2, "device": "cpu", "precision": "32", "progress": False,
          "report": False, "loggers": [], "seed": 7, "schedule": "constant",
          "data_kwargs": {"size": 24, "rescale": 0.2, "batch_by_length": True, "threads": 2},
          "transforms": [{"RandomResizedCrop": {"size": 20, "scale": [0.6, 1.0]}}, "RandomHorizontalFlip",
                         {"ColorJitter": {"brightness": 0.2, "contrast": 0.2}}]}


class ClipGRU(nn.Module):
    """A user's clip model: a convolution per frame, a GRU over the frames, a gloss classifier per step. The GRU runs
    forward only, so a clip's outputs do not depend on the padding after it in a batch. Its `at`-th training forward
    sends `signum` to this process (after the convolution: inside the step)."""

    temporal_stride = 1

    def __init__(self, num_classes=len(VOCABULARY), signum=None, at=0):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, stride=2)
        self.rnn = nn.GRU(8, 16, batch_first=True)
        self.head = nn.Linear(16, num_classes)
        self.signum, self.at, self.calls = signum, at, 0

    def forward(self, x):
        n, t = x.shape[:2]
        features = self.conv(x.flatten(0, 1)).mean((2, 3)).view(n, t, -1)
        if self.training:
            self.calls += 1
            if self.calls == self.at:
                os.kill(os.getpid(), self.signum)
        return self.head(self.rnn(features)[0])


class KeypointGRU(nn.Module):
    """A keypoint model: a GRU over T x 6 features, a classifier per step."""

    temporal_stride = 1

    def __init__(self, num_classes=5):
        super().__init__()
        torch.manual_seed(0)
        self.rnn = nn.GRU(6, 16, batch_first=True)
        self.head = nn.Linear(16, num_classes)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


def quietly(call, *args, **kwargs):
    """call(...) with the dev and test splits' unseen-gloss warnings (tested on their own) silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return call(*args, **kwargs)


@pytest.fixture(scope="module")
def cecsl(tmp_path_factory):
    """A CE-CSL folder of real encoded clips."""
    return _real_cecsl(tmp_path_factory.mktemp("sign") / "CE-CSL", GLOSSES)


@pytest.fixture(scope="module")
def trained(cecsl, tmp_path_factory, one_thread):
    """The uninterrupted run of CONFIG on `cecsl` (run directory runs/straight): its TrainResult."""
    import gpucore
    runs = tmp_path_factory.mktemp("runs")
    return quietly(gpucore.train, dict(CONFIG, data=cecsl, run_dir=str(runs), name="straight"), model=ClipGRU())


def run_path(result, *parts):
    return os.path.join(os.path.dirname(result.checkpoint_dir), *parts)


# ---- the vocabulary, recorded and checked ----------------------------------------------------------------------------

def test_config_json_and_every_checkpoint_record_the_training_splits_vocabulary(trained):
    with open(run_path(trained, "config.json"), encoding="utf-8") as handle:
        assert json.load(handle)["vocabulary"] == VOCABULARY
    for name in ("best.pt", "last.pt"):
        saved = torch.load(os.path.join(trained.checkpoint_dir, name), weights_only=False)
        assert saved["classes"] == VOCABULARY and saved["config"]["vocabulary"] == VOCABULARY


def test_a_vocabulary_set_must_be_the_training_splits(cecsl, tmp_path):
    """As `gpucore train --resume RUN_DIR` starts from config.json's vocabulary: data relabelled since is refused
    before a step, naming the glosses."""
    import gpucore
    recorded = ["<blank>", "他", "你", "你好", "好", "我", "谢谢", "<unk>"]  # '他' where the data has '爱'
    with pytest.raises(ConfigError, match=r"config key 'vocabulary' \(8 entries, as the run's config.json records it\) "
                                          r"is not the gloss vocabulary of the training split of config key 'data' .*"
                                          r"glosses the data no longer has: '他'; glosses new in the data: '爱'"):
        quietly(gpucore.train, dict(CONFIG, data=cecsl, run_dir=str(tmp_path), vocabulary=recorded), model=ClipGRU())
    assert not list(tmp_path.rglob("*.pt"))
    with pytest.raises(ConfigError, match=r"config key 'vocabulary' is set \(3 entries\), but config key 'data' "
                                          r"\('synthetic_fashion'\) gives no gloss vocabulary"):
        gpucore.train({"data": "synthetic_fashion", "loss": "ctc", "vocabulary": ["<blank>", "a", "<unk>"],
                       "run_dir": str(tmp_path), "device": "cpu"})


def test_evaluate_and_predict_refuse_a_run_whose_config_json_vocabulary_is_not_its_checkpoints(trained, cecsl,
                                                                                               tmp_path, capsys):
    import gpucore
    from gpucore import cli
    copy = tmp_path / "copy"
    shutil.copytree(run_path(trained), copy)
    values = json.loads((copy / "config.json").read_text(encoding="utf-8"))
    values["vocabulary"] = ["<blank>", "你好", "你", "好", "我", "爱", "谢谢", "<unk>"]  # ids 1 and 2 swapped
    (copy / "config.json").write_text(json.dumps(values), encoding="utf-8")
    best = str(copy / "checkpoints" / "best.pt")
    clip = os.path.join(cecsl, "video", "test", "A", "test-00000.mp4")
    expected = r"the same glosses in another order: id 1 was '你好', now '你'"
    with pytest.raises(ConfigError, match=r"checkpoint '.*best\.pt' names 8 glosses, but its run's '.*config\.json' "
                                          r"records a gloss vocabulary of 8 \(config key vocabulary\): " + expected):
        gpucore.predict(best, clip)
    with pytest.raises(ConfigError, match=expected):
        quietly(gpucore.evaluate, best, data=cecsl, split="test", device="cpu")
    assert quietly(cli.main, ["evaluate", str(copy), "--data", cecsl, "--split", "test", "--device", "cpu"]) != 0
    assert "id 1 was '你好', now '你'" in capsys.readouterr().err
    values["vocabulary"] = VOCABULARY[:-1]  # '<unk>' left out
    (copy / "config.json").write_text(json.dumps(values), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"glosses only the checkpoint has: '<unk>'"):
        gpucore.predict(best, clip)


def test_evaluate_on_a_folder_of_another_vocabulary_names_the_glosses(trained, tmp_path):
    import gpucore
    other = _real_cecsl(tmp_path / "other", {"train": [["你", "好"], ["他", "你好"]], "test": [["你"]]})
    best = os.path.join(trained.checkpoint_dir, "best.pt")
    with pytest.raises(ConfigError, match=r"data '.*other' has a gloss vocabulary of 6 entries \(from its training "
                                          r"split\), but the model of '.*best\.pt' was trained with 8: glosses the "
                                          r"model was trained with that the data's training split lacks: '我', '爱', "
                                          r"'谢谢'; glosses the data's training split has that the model was not "
                                          r"trained with: '他'"):
        gpucore.evaluate(best, data=other, split="test", device="cpu")


# ---- evaluate --split test from the command line ---------------------------------------------------------------------

@pytest.mark.usefixtures("figures_skipped")  # checks numbers, rows and files: no figure
def test_evaluate_split_test_from_the_cli_is_jiwers_wer_of_the_hypotheses(trained, cecsl, capsys, tmp_path):
    """The test split's WER as `gpucore evaluate RUN --data ROOT --split test` prints it: jiwer's on the test CSV's
    glosses (the unseen '朋友' as written) against each clip's hypothesis as `gpucore predict --json` gives it; the
    unseen gloss counted and named in a warning."""
    jiwer = require("jiwer")
    from gpucore import cli
    assert cli.main(["evaluate", run_path(trained), "--data", cecsl, "--split", "test", "--device", "cpu",
                     "--out", str(tmp_path / "evaluation")]) == 0
    printed = capsys.readouterr()
    assert ("the test split has 1 glosses (1 distinct) that training never saw, encoded as '<unk>' and scored as "
            "errors: '朋友' x1") in printed.err
    summary = json.loads(printed.out)
    assert summary["split"] == "test" and summary["samples"] == 3
    assert summary["checkpoint"] == os.path.join(trained.checkpoint_dir, "best.pt")
    clips = [os.path.join(cecsl, "video", "test", "A", f"test-{i:05d}.mp4") for i in range(3)]
    assert cli.main(["predict", summary["checkpoint"], *clips, "--json", "--device", "cpu",
                     "--out", str(tmp_path / "p.csv")]) == 0
    hypotheses = json.loads(capsys.readouterr().out)["glosses"]
    references = [" ".join(row) for row in GLOSSES["test"]]
    measured = jiwer.process_words(references, [" ".join(hypotheses[clip]) for clip in clips])
    assert summary["metrics"]["wer"] == pytest.approx(measured.wer, abs=1e-6)
    assert 0 < summary["metrics"]["wer"]  # '朋友' cannot be right


# ---- a stop mid-epoch, resumed ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_mid_epoch_of_an_augmented_clip_run_resumes_bitwise(trained, cecsl, tmp_path, signum):
    """3 steps an epoch (6 clips, batches of 2): the signal inside the second step of epoch 2. The resumed run ends
    with the uninterrupted run's weights and metrics.jsonl, bit for bit."""
    import gpucore
    config = dict(CONFIG, data=cecsl, run_dir=str(tmp_path), name="stopped")
    stopped = quietly(train_interrupted, config, model=ClipGRU(signum=signum, at=3 + 2))
    assert stopped.status == "interrupted" and stopped.stopped_by == signal.Signals(signum).name
    saved = torch.load(tmp_path / "stopped" / "checkpoints" / "interrupted.pt", weights_only=False)
    assert (saved["epoch"], saved["samples_consumed"]) == (1, 4)  # mid-epoch 2: after two batches of 2
    resumed = quietly(gpucore.train, dict(config, resume="auto"), model=ClipGRU())
    assert resumed.steps == trained.steps == 9
    assert_states_equal(resumed.model, trained.model, label="resumed != uninterrupted")
    straight = run_path(trained, "metrics.jsonl")
    with open(straight, encoding="utf-8") as a, open(tmp_path / "stopped" / "metrics.jsonl", encoding="utf-8") as b:
        assert rows_without_times(a) == rows_without_times(b)


# ---- predict on clips ------------------------------------------------------------------------------------------------

def _by_hand(loaded, frames_or_keypoints):
    """The loaded model's glosses for one clip's frames (T x C x H x W uint8) or keypoints (T x F), by hand: the run's
    standardisation, a plain forward and greedy CTC decoding (best id per step, repeats merged, blanks dropped) over
    the vocabulary without its last entry, "<unk>", which stands for glosses training never saw: never decoded."""
    x = frames_or_keypoints.float()
    if x.dim() == 4:
        mean, std = (torch.tensor(v).view(3, 1, 1) for v in loaded.normalization)
        x = (x / 255 - mean) / std
    elif loaded.normalization is not None:
        mean, std = (torch.tensor(v) for v in loaded.normalization)
        x = (x - mean) / std
    with torch.no_grad():
        assert loaded.classes[-1] == "<unk>"
        best = loaded.module.eval()(x.unsqueeze(0))[0, :, :-1].argmax(-1).tolist()
    return [loaded.classes[g] for i, g in enumerate(best) if g != 0 and (i == 0 or g != best[i - 1])]


def _frame_folder(folder, video):
    """The frames of `video` as a PHOENIX frame folder: numbered PNGs (frame 10 after frame 9: numeric order)."""
    os.makedirs(folder)
    with av.open(video) as container:
        for i, frame in enumerate(container.decode(video=0)):
            frame.to_image().save(os.path.join(folder, f"{i + 1}.png"))
    return str(folder)


def test_predict_video_files_and_frame_folders_in_one_call_as_the_model_by_hand(trained, cecsl, tmp_path, capsys):
    import gpucore
    from gpucore import cli
    from gpucore.data.clip_sequences import ClipSequences
    from gpucore.data.sign_layouts import GlossClip
    best = os.path.join(trained.checkpoint_dir, "best.pt")
    videos = [os.path.join(cecsl, "video", split, "A", f"{split}-{i:05d}.mp4") for split, i in
              (("test", 0), ("dev", 1), ("train", 5))]
    folder = _frame_folder(tmp_path / "clip" / "1", videos[2])
    inputs = [videos[0], folder, videos[1]]
    loaded = gpucore.load(best, "cpu")
    expected = []
    for path in inputs:  # each clip decoded alone, at the run's size, and called by hand
        clips = ClipSequences([GlossClip(path, (), path)], loaded.classes, size=24)
        expected.append(_by_hand(loaded, clips[0][0]))
    assert any(expected)  # the trained model names glosses (not empty decodings on both sides)
    frames = ClipSequences([GlossClip(folder, (), "")], VOCABULARY, size=24)[0][0]
    video = ClipSequences([GlossClip(videos[2], (), "")], VOCABULARY, size=24)[0][0]
    assert frames.shape == video.shape  # the folder holds the video's frames (PNG: the decoded pixels)
    predictions = gpucore.predict(loaded, inputs, batch_size=2)  # two batches: clips of different lengths padded
    assert predictions.rows == [{"input": p, "glosses": " ".join(glosses)} for p, glosses in zip(inputs, expected)]
    assert cli.main(["predict", best, *inputs, "--device", "cpu", "--out", str(tmp_path / "p.csv")]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{p}: {' '.join(g)}" for p, g in zip(inputs, expected)]
    assert cli.main(["predict", best, *inputs, "--json", "--device", "cpu", "--out", str(tmp_path / "p.csv")]) == 0
    assert json.loads(capsys.readouterr().out)["glosses"] == dict(zip(inputs, expected))


def test_predict_bad_clips_are_named(trained, cecsl, tmp_path):
    import gpucore
    best = os.path.join(trained.checkpoint_dir, "best.pt")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no frames here")
    with pytest.raises(ConfigError, match=r"frame folder '.*empty' holds no images .*: a clip of zero frames"):
        gpucore.predict(best, [str(empty)])
    keypoints = str(tmp_path / "k.npy")
    np.save(keypoints, np.zeros((6, 6), np.float32))
    with pytest.raises(ConfigError, match=r"input '.*k\.npy' is a keypoint file, but the model of '.*best\.pt' was "
                                          r"trained on video frames"):
        gpucore.predict(best, [os.path.join(cecsl, "video", "test", "A", "test-00000.mp4"), keypoints])


@pytest.fixture(scope="module")
def keypoint_run(tmp_path_factory, one_thread):
    """A keypoint run (labels.csv of T x 6 .npy files) and its data folder."""
    import gpucore
    root = tmp_path_factory.mktemp("keypoints")
    rng = np.random.default_rng(0)
    rows = {"train": [("a.npy", "HELLO WORLD"), ("b.npy", "WORLD"), ("c.npy", "THANKS HELLO"), ("d.npy", "THANKS")],
            "val": [("e.npy", "HELLO")]}
    for split, entries in rows.items():
        _write_csv(str(root / split / "labels.csv"), ["file", "text"], entries)
        for i, (name, _) in enumerate(entries):
            np.save(str(root / split / name), rng.normal(size=(8 + i, 6)).astype(np.float32))
    result = gpucore.train({"data": str(root), "loss": "ctc", "epochs": 2, "batch_size": 2, "device": "cpu",
                            "precision": "32", "progress": False, "report": False, "loggers": [],
                            "run_dir": str(root / "runs")}, model=KeypointGRU())
    return root, os.path.join(result.checkpoint_dir, "last.pt")


def test_predict_keypoint_files_as_the_model_by_hand_and_bad_ones_named(keypoint_run, tmp_path, cecsl):
    import gpucore
    root, checkpoint = keypoint_run
    loaded = gpucore.load(checkpoint, "cpu")
    assert loaded.classes == ["<blank>", "HELLO", "THANKS", "WORLD", "<unk>"]
    rng = np.random.default_rng(1)
    files = []
    for i, shape in enumerate([(9, 6), (5, 2, 3)]):  # T x K x D is flattened to T x K*D, as MediaPipe saves them
        files.append(str(tmp_path / f"new{i}.npy"))
        np.save(files[-1], rng.normal(size=shape).astype(np.float32) * 3)
    expected = [_by_hand(loaded, torch.from_numpy(np.load(f)).reshape(np.load(f).shape[0], -1)) for f in files]
    predictions = gpucore.predict(loaded, files)
    assert [row["glosses"] for row in predictions.rows] == [" ".join(g) for g in expected]
    wide = str(tmp_path / "wide.npy")
    np.save(wide, np.zeros((7, 8), np.float32))
    with pytest.raises(ConfigError, match=r"keypoint file '.*wide\.npy' has 8 features per frame, expected 6"):
        gpucore.predict(loaded, [files[0], wide])
    clip = os.path.join(cecsl, "video", "test", "A", "test-00000.mp4")
    with pytest.raises(ConfigError, match=r"input '.*test-00000\.mp4' is a video clip, but the model of '.*last\.pt' "
                                          r"was trained on keypoint sequences \(6 features per frame"):
        gpucore.predict(loaded, [clip])
    folder = tmp_path / "frames"
    folder.mkdir()
    Image.new("RGB", (8, 8)).save(folder / "1.png")
    with pytest.raises(ConfigError, match=r"input '.*frames' is a frame folder, but the model"):
        gpucore.predict(loaded, str(folder))
