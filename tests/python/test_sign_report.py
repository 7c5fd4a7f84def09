"""The report of a sign-language run (issue 72): the WER curve in curves.png, the glosses the alignment substituted (by
which), deleted and inserted, and dev clips with their reference and decoded glosses and a strip of their frames.
One tiny run on generated clips (a labels.csv folder of real .mp4 files of moving shapes) serves every test that
reads it."""
import csv
import io
import os
import re

import numpy as np
import pytest
import torch
from torch import nn

import gpucore
from gpucore.models.cslr import TemporalHead
from gpucore.report import plots
from gpucore.tasks.sequences import word_errors
from conftest import require

GLOSSES = ("disc", "square", "ring", "cross")  # moving_shapes' shapes 0 to 3
SIZE = 16  # frames generated and read at this size: the run decodes them without resizing


def padded(rows, width=8):
    out = torch.full((len(rows), width), -1)
    for i, row in enumerate(rows):
        out[i, :len(row)] = torch.tensor(row, dtype=torch.int64)
    return out


# Chosen so that each has one minimal alignment (checked with jiwer below): the counts are the hand's.
PAIRS = [([1, 2, 3, 4, 5, 6, 7], [1, 9, 3, 4, 6, 7, 8]),  # 2 -> 9 substituted, 5 deleted, 8 inserted
         ([2, 2, 3], [2, 3]),  # a 2 deleted
         ([4], []),  # 4 deleted
         ([3, 3, 1], [3, 2, 1])]  # 3 -> 2 substituted


def test_word_errors_name_which_gloss_replaced_which_and_what_was_deleted_or_inserted():
    errors = word_errors(padded([h for _, h in PAIRS]), padded([r for r, _ in PAIRS]))
    assert errors.per_sample.tolist() == [[1, 1, 1], [0, 1, 0], [0, 1, 0], [1, 0, 0]]
    assert dict(errors.substitutions) == {(2, 9): 1, (3, 2): 1}
    assert dict(errors.deleted) == {5: 1, 2: 1, 4: 1} and dict(errors.inserted) == {8: 1}
    assert dict(errors.substituted) == {2: 1, 3: 1}
    assert errors.rate == pytest.approx(6 / 14)


def test_word_errors_counts_are_jiwers_alignments():
    jiwer = pytest.importorskip("jiwer", reason="jiwer is the reference (scripts/bootstrap.sh --tests installs it)")
    substitutions, deleted, inserted = {}, {}, {}
    for reference, hypothesis in PAIRS:
        out = jiwer.process_words(" ".join(f"g{c}" for c in reference), " ".join(f"g{c}" for c in hypothesis))
        for chunk in out.alignments[0]:
            truth = reference[chunk.ref_start_idx:chunk.ref_end_idx]
            guess = hypothesis[chunk.hyp_start_idx:chunk.hyp_end_idx]
            if chunk.type == "substitute":
                for pair in zip(truth, guess):
                    substitutions[pair] = substitutions.get(pair, 0) + 1
            for word in truth if chunk.type == "delete" else ():
                deleted[word] = deleted.get(word, 0) + 1
            for word in guess if chunk.type == "insert" else ():
                inserted[word] = inserted.get(word, 0) + 1
    errors = word_errors(padded([h for _, h in PAIRS]), padded([r for r, _ in PAIRS]))
    assert (dict(errors.substitutions), dict(errors.deleted), dict(errors.inserted)) == (substitutions, deleted,
                                                                                          inserted)


def decode_png(data: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def test_curves_png_draws_val_wer_in_its_own_panel_as_drawn(tmp_path):
    """Two histories that differ only in val_wer at epochs 2 and 3 (0.5 then 0.7, or 0.7 then 0.5): their curves.png
    differ only inside the wer panel (the middle of loss, wer and lr), and there the validation colour's line is lower
    at epoch 2 where val_wer is 0.5 (a lower WER is drawn lower)."""
    def history(second, third):
        return [{"epoch": e, "train_loss": 3.0 - e / 2, "val_loss": 3.2 - e / 2, "val_wer": wer, "lr": 0.01}
                for e, wer in zip(range(1, 5), (0.9, second, third, 0.3))]

    drawn = []
    for second, third in ((0.5, 0.7), (0.7, 0.5)):
        path = plots.curves(history(second, third), str(tmp_path / f"curves-{second}.png"))
        with open(path, "rb") as handle:
            drawn.append(decode_png(handle.read()).astype(np.int16))
    dipping, rising = drawn
    assert dipping.shape == rising.shape
    rows, columns = np.nonzero((dipping != rising).any(-1))
    width = dipping.shape[1]
    assert len(columns) and width / 3 < columns.min() and columns.max() < 2 * width / 3  # the middle panel only
    left = columns < (columns.min() + columns.max()) / 2  # around epoch 2
    orange = np.array([255, 127, 14])  # matplotlib's C1: validation, in every panel

    def line_row(image):
        region = image[rows[left].min():rows[left].max() + 1, columns[left].min():columns[left].max() + 1]
        y, _ = np.nonzero((np.abs(region - orange).sum(-1) < 60))
        return y.mean()

    assert line_row(dipping) > line_row(rising) + 3  # further down the image: a lower WER


# ---- one tiny run on generated clips ---------------------------------------------------------------------------------
class FrameNet(nn.Module):
    """A CNN on every frame under the CSLR models' TemporalHead (temporal_stride 4)."""

    temporal_stride = 4

    def __init__(self, classes=6):
        super().__init__()
        self.frames = nn.Sequential(nn.Conv2d(3, 16, 4, stride=4), nn.BatchNorm2d(16), nn.ReLU(),
                                    nn.AdaptiveMaxPool2d(1), nn.Flatten())
        self.head = TemporalHead(16, classes, hidden=32, lstm_layers=1)

    def forward(self, clips):
        n, steps = clips.shape[:2]
        return self.head(self.frames(clips.flatten(0, 1)).unflatten(0, (n, steps)))


def write_split(folder, count, seed):
    """labels.csv and `count` .mp4 clips of 1 to 3 glosses (never one twice in a row), 4 to 6 frames a gloss."""
    from gpucore.data.synthetic import moving_shapes
    from gpucore.data.video import encode_clip

    os.makedirs(folder)
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(count):
        glosses = [int(torch.randint(0, 4, (1,), generator=generator))]
        for _ in range(int(torch.randint(0, 3, (1,), generator=generator))):
            glosses.append((glosses[-1] + int(torch.randint(1, 4, (1,), generator=generator))) % 4)
        frames = torch.cat([moving_shapes(int(torch.randint(4, 7, (1,), generator=generator)), SIZE, SIZE,
                                          seed=int(torch.randint(0, 2 ** 31, (1,), generator=generator)), shape=g)
                            for g in glosses])
        encode_clip(os.path.join(folder, f"clip{i}.mp4"), frames)
        rows.append((f"clip{i}.mp4", " ".join(GLOSSES[g] for g in glosses)))
    with open(os.path.join(folder, "labels.csv"), "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([("file", "text"), *rows])
    return rows


@pytest.fixture(scope="module")
def sign_run(tmp_path_factory):
    require("av")
    root = tmp_path_factory.mktemp("signs")
    write_split(root / "train", 24, seed=1)
    dev = write_split(root / "dev", 6, seed=2)
    torch.manual_seed(0)
    result = gpucore.train({"data": str(root), "data_kwargs": {"size": SIZE}, "loss": "ctc", "epochs": 3,
                            "batch_size": 8, "lr": 0.01, "device": "cpu", "precision": "32", "progress": False,
                            "report": True, "run_dir": str(root / "runs"), "seed": 0}, model=FrameNet())
    gpucore.evaluate(os.path.join(result.checkpoint_dir, "best.pt"), data=str(root), split="val", device="cpu",
                     model=FrameNet(), out=str(root / "evaluated"))
    return root, dev, result


# The pages: the run's own, written at the end of training, and gpucore.evaluate's of the dev split.
PAGES = ("runs/FrameNet", "evaluated")


def decoded_by_hand(root, dev, result):
    """The dev clips through the run's best weights in plain PyTorch (PyAV's frames, the run's standardisation,
    greedy CTC decoding at each clip's ceil(T / 4) steps), as gloss id lists."""
    av = pytest.importorskip("av")
    checkpoint = torch.load(os.path.join(result.checkpoint_dir, "best.pt"), weights_only=False)
    model = FrameNet()
    model.load_state_dict(checkpoint["model"])
    model.eval()
    mean, std = (torch.tensor(checkpoint["input_stats"][k]).view(3, 1, 1) for k in ("mean", "std"))
    decoded, frames_of = [], []
    for name, _ in dev:
        with av.open(str(root / "dev" / name)) as container:
            frames = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
        frames_of.append(frames)
        clip = (torch.from_numpy(frames).permute(0, 3, 1, 2).float() / 255 - mean) / std
        with torch.no_grad():
            best = model(clip[None])[0, :, :-1].argmax(-1).tolist()  # "<unk>", the last class, never decoded
        glosses = [g for k, g in enumerate(best) if g != 0 and (k == 0 or g != best[k - 1])]
        decoded.append(glosses)
    assert checkpoint["classes"][-1] == "<unk>"
    return decoded, frames_of, checkpoint["classes"]


@pytest.mark.parametrize("folder", PAGES)
def test_the_report_tables_the_glosses_the_alignment_got_wrong(sign_run, folder):
    root, dev, result = sign_run
    page = (root / folder / "report.html").read_text(encoding="utf-8")
    decoded, _, vocabulary = decoded_by_hand(root, dev, result)
    references = [[vocabulary.index(g) for g in text.split()] for _, text in dev]
    errors = word_errors(padded(decoded, 12), padded(references, 12))
    assert errors.rate > 0  # a run of 3 epochs gets glosses wrong: the tables have rows
    s, d, i = errors.per_sample.sum(0).tolist()
    assert (f"<tr><td>substituted</td><td>{s}</td></tr><tr><td>deleted</td><td>{d}</td></tr>"
            f"<tr><td>inserted</td><td>{i}</td></tr>") in page
    for (truth, guess), times in errors.substitutions.items():
        assert f"<tr><td>{vocabulary[truth]}</td><td>{vocabulary[guess]}</td><td>{times}</td></tr>" in page
    tables = dict(re.findall(r"<h2>Glosses most often (\w+)[^<]*</h2><table>(.*?)</table>", page))
    assert set(tables) == {"substituted", "deleted", "inserted"}
    for kind, counts in (("deleted", errors.deleted), ("inserted", errors.inserted)):
        rows = re.findall(r"<tr><td>([^<]*)</td><td>(\d+)</td></tr>", tables[kind])
        assert sorted(rows) == sorted((vocabulary[g], str(n)) for g, n in counts.items())
    assert len(re.findall(r"<tr><td>", tables["substituted"])) == len(errors.substitutions)
    if not errors.inserted:
        assert ("<h2>Glosses most often inserted (top 20)</h2><table><tr><th>decoded gloss</th><th>times</th></tr>"
                "</table><p>None.</p>") in page


@pytest.mark.parametrize("folder", PAGES)
def test_the_report_shows_dev_clips_reference_decoded_and_their_frames(sign_run, folder):
    root, dev, result = sign_run
    from PIL import Image

    page = (root / folder / "report.html").read_text(encoding="utf-8")
    decoded, frames_of, vocabulary = decoded_by_hand(root, dev, result)
    for index, ((name, text), glosses) in enumerate(zip(dev, decoded)):
        hypothesis = " ".join(vocabulary[g] for g in glosses)
        assert f"<tr><td>{index}</td><td>{text}</td><td>{hypothesis}</td>" in page, (index, text, hypothesis)
        assert f"<td>{name} (CSV &#x27;{root / 'dev' / 'labels.csv'}&#x27; line {index + 2})</td>" in page
        # the strip: up to 8 evenly spaced frames, side by side with 2-pixel gaps, each the decoded frame it shows
        strip = np.asarray(Image.open(root / folder / "plots" / f"clip_{index}_frames.png").convert("RGB"))
        frames = frames_of[index]
        chosen = np.linspace(0, len(frames) - 1, min(8, len(frames))).round().astype(int)
        assert strip.shape == (SIZE, len(chosen) * (SIZE + 2) - 2, 3)
        for k, frame in enumerate(chosen):
            shown = strip[:, k * (SIZE + 2):k * (SIZE + 2) + SIZE].astype(int)
            assert np.array_equal(shown, frames[frame]), (index, k)  # PyAV's own frame, bit for bit
            if k:
                assert (strip[:, k * (SIZE + 2) - 2:k * (SIZE + 2)] == 255).all()  # the gap
        assert f'<img alt="clip_{index}_frames.png"' in page
