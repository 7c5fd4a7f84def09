"""The run report (plots/, per_class.json, report.html), gpucore report and gpucore evaluate: checked on their
contents (a confusion matrix counted by hand, scikit-learn's per-class metrics, decoded PNG pixels, the page's
images), not on the files' existence."""
import json
import os
import re
import shutil

import numpy as np
import pytest
import torch
from torch import nn

import gpucore
from gpucore import cli
from gpucore.evaluation import run_report
from gpucore.report import page as report_page, plots
from gpucore.data.builtin import CLASS_NAMES
from gpucore.data.synthetic import synthetic_fashion
from conftest import CAPTCHA_KWARGS, FASHION_KWARGS, require, run_copy

Image = require("PIL.Image")
pytestmark = pytest.mark.draws_report

DATA = FASHION_KWARGS  # the shared run's (conftest.fashion_run, which draws its report)
RUN = dict(data="synthetic_fashion", data_kwargs=DATA, epochs=2, batch_size=64, progress=False, device="cpu")


@pytest.fixture
def run(fashion_run):
    """The session's finished classification run, its report drawn (read-only: run_copy to write)."""
    return fashion_run


def _png(path):
    image = np.asarray(Image.open(path).convert("RGB"))
    assert image.shape[0] > 100 and image.shape[1] > 100, path
    assert image.std() > 10, f"{path} is blank"  # more than a white page
    return image


def test_the_run_writes_its_report_with_a_hand_counted_confusion_matrix(run):
    stats = json.load(open(run.stats_path))
    assert stats["report"] == os.path.join(run.run_dir, "report.html")
    assert 0 < stats["seconds"]["report"] < 600 and stats["seconds"]["training"] > 0
    loaded = gpucore.load(os.path.join(run.checkpoint_dir, "best.pt"), device="cpu")
    _, (x_val, y_val) = synthetic_fashion(**DATA)
    guesses = loaded(x_val).argmax(1)
    by_hand = np.zeros((10, 10), dtype=np.int64)
    for true, guess in zip(y_val.tolist(), guesses.tolist()):
        by_hand[true, guess] += 1
    assert report_page.confusion(y_val, guesses, 10).numpy().tolist() == by_hand.tolist()
    rows = json.load(open(os.path.join(run.run_dir, "per_class.json")))
    assert [r["class"] for r in rows] == CLASS_NAMES["synthetic_fashion"]
    assert [r["support"] for r in rows] == by_hand.sum(1).tolist()
    recall = [by_hand[i, i] / by_hand[i].sum() if by_hand[i].sum() else 0 for i in range(10)]
    assert [r["recall"] for r in rows] == pytest.approx(recall)
    for name in ("curves", "confusion_matrix", "confusion_matrix_normalized", "per_class", "val_predictions",
                 "top_losses", "train_batch"):
        _png(os.path.join(run.run_dir, "plots", f"{name}.png"))


def test_per_class_metrics_equal_scikit_learns():
    metrics = require("sklearn.metrics")
    generator = torch.Generator().manual_seed(0)
    truth = torch.randint(0, 6, (500,), generator=generator)
    guess = torch.where(torch.rand(500, generator=generator) < 0.6, truth, torch.randint(0, 6, (500,), generator=generator))
    guess[guess == 5] = 4  # class 5 never predicted: precision 0 by zero_division=0
    rows = report_page.per_class(report_page.confusion(truth, guess, 6), [str(i) for i in range(6)])
    precision, recall, f1, support = metrics.precision_recall_fscore_support(truth, guess, labels=list(range(6)),
                                                                             zero_division=0)
    assert [r["precision"] for r in rows] == pytest.approx(precision.tolist())
    assert [r["recall"] for r in rows] == pytest.approx(recall.tolist())
    assert [r["f1"] for r in rows] == pytest.approx(f1.tolist())
    assert [r["support"] for r in rows] == support.tolist()
    assert metrics.confusion_matrix(truth, guess, labels=list(range(6))).tolist() == \
        report_page.confusion(truth, guess, 6).tolist()


def test_figures_are_laid_out_and_cropped_to_the_pixels_of_matplotlibs_tight_layout_and_tight_bbox(tmp_path):
    # plots._save lays a figure out and crops it with one pass over it less than figure.tight_layout() followed by
    # savefig(bbox_inches="tight"), at another zlib level: the decoded pixels must be matplotlib's own
    generator = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    count = int(torch.randint(3, 14, (), generator=generator))  # rotated tick labels from 9 classes on
    targets = torch.randint(0, count, (300,), generator=generator)
    guesses = torch.where(torch.rand(300, generator=generator) < 0.5, targets,
                          torch.randint(0, count, (300,), generator=generator))
    rows = report_page.per_class(report_page.confusion(targets, guesses, count), [f"class {k}" for k in range(count)])
    ours = plots.per_class_bars(rows, str(tmp_path / "ours.png"))
    reference = plots.per_class_figure(rows)
    reference.tight_layout()
    reference.savefig(tmp_path / "matplotlib.png", dpi=100, bbox_inches="tight", facecolor="white")
    expected = np.asarray(Image.open(tmp_path / "matplotlib.png").convert("RGBA"))
    assert expected.std() > 10  # bars and labels, not a blank page
    assert np.array_equal(np.asarray(Image.open(ours).convert("RGBA")), expected)


def test_the_training_batch_is_shown_un_normalised(run):
    """The grid shows the images as stored (uint8 / 255), not the standardised values: its pixels span black
    to white where standardised values, clipped to [0, 1], would lose the background."""
    stats = gpucore.load(os.path.join(run.checkpoint_dir, "last.pt"), "cpu").input_stats
    images = torch.tensor([[[[0.0, 1.0], [0.5, 0.25]]]])
    standardised = (images - stats["mean"][0]) / stats["std"][0]
    shown = report_page.display_images(standardised, (stats["mean"], stats["std"]))
    assert shown[0] == pytest.approx(images[0, 0].numpy(), abs=1e-6)


def test_the_page_is_self_contained(run):
    page = open(os.path.join(run.run_dir, "report.html"), encoding="utf-8").read()
    sources = re.findall(r'<img[^>]*src="([^"]*)"', page)
    assert len(sources) == 7 and all(s.startswith("data:image/png;base64,") for s in sources)
    assert not re.search(r'(src|href)\s*=\s*["\']?\s*(https?:)?//', page)
    for fact in ("why this device", "why this precision", "host syncs", "skipped steps", "training samples/s",
                 "checkpoints/best.pt", "crop_padding"):
        assert fact in page
    assert "peak GPU memory" not in page and "<td>error</td>" not in page  # rows without a value are left out
    epochs = [{"epoch_time_s": 1.0, "samples_per_s": 100.0, "gpu_memory_peak_bytes": 3 << 20},
              {"epoch_time_s": 3.0, "samples_per_s": 200.0, "gpu_memory_peak_bytes": 5 << 20}]
    facts = dict(run_report._facts({"epochs": epochs, "best": {"monitor": "val_accuracy", "metric": 0.91234, "epoch": 2}},
                               "best.pt", 2))
    assert facts["training samples/s"] == pytest.approx(175.0)  # weighted by epoch time
    assert facts["peak GPU memory (MiB)"] == 5.0 and facts["best"] == "val_accuracy 0.9123 at epoch 2"


def test_evaluate_on_the_runs_validation_data_gives_its_last_metrics(run, tmp_path):
    summary = gpucore.evaluate(os.path.join(run.checkpoint_dir, "last.pt"), device="cpu", out=str(tmp_path / "val"))
    last = run.history[-1]
    assert summary["samples"] == DATA["val_size"]
    assert summary["metrics"]["accuracy"] == pytest.approx(last["val_accuracy"], abs=1e-9)
    assert summary["metrics"]["loss"] == pytest.approx(last["val_loss"], rel=1e-6)
    written = json.load(open(tmp_path / "val" / "evaluation.json"))
    assert written["metrics"] == pytest.approx(summary["metrics"])
    assert sum(r["support"] for r in written["per_class"]) == DATA["val_size"]
    _png(tmp_path / "val" / "plots" / "confusion_matrix.png")


@pytest.mark.usefixtures("figures_skipped")  # checks numbers, rows and files: no figure
def test_evaluate_other_data_and_splits(run, tmp_path):
    (x, y), (xv, yv) = synthetic_fashion(train_size=100, val_size=40, seed=7)
    np.savez(tmp_path / "only_train.npz", x_train=x.numpy(), y_train=y.numpy())
    np.savez(tmp_path / "with_test.npz", x_train=x.numpy(), y_train=y.numpy(), x_test=xv.numpy(), y_test=yv.numpy())
    checkpoint = os.path.join(run.checkpoint_dir, "best.pt")
    test = gpucore.evaluate(checkpoint, data=str(tmp_path / "with_test.npz"), split="test", device="cpu",
                            out=str(tmp_path / "test"))
    loaded = gpucore.load(checkpoint, "cpu")
    assert test["samples"] == 40
    assert test["metrics"]["accuracy"] == pytest.approx((loaded(xv).argmax(1) == yv).float().mean().item())
    whole = gpucore.evaluate(checkpoint, data=str(tmp_path / "only_train.npz"), device="cpu", out=str(tmp_path / "v"))
    assert (whole["split"], whole["samples"]) == ("all", 100)  # data given: all of it
    assert whole["metrics"]["accuracy"] == pytest.approx((loaded(x).argmax(1) == y).float().mean().item())
    with pytest.raises(gpucore.ConfigError, match=r"split 'test' does not apply to data '.*only_train.npz': it has no "
                                                  r"held-out split of its own .*; splits that do: all$"):
        gpucore.evaluate(checkpoint, data=str(tmp_path / "only_train.npz"), split="test", device="cpu")
    with pytest.raises(gpucore.ConfigError, match="split 'training' is not one of all, val, test, train"):
        gpucore.evaluate(checkpoint, split="training")
    with pytest.raises(gpucore.ConfigError, match="does not exist"):
        gpucore.evaluate(str(tmp_path / "missing.pt"))


def test_gpucore_report_redraws_an_interrupted_run(run, tmp_path, capsys):
    copy = run_copy(run, tmp_path)
    for name in ("report.html", "per_class.json"):
        os.remove(copy / name)
    shutil.rmtree(copy / "plots")
    os.rename(copy / "checkpoints" / "last.pt", copy / "checkpoints" / "interrupted.pt")
    os.remove(copy / "checkpoints" / "best.pt")
    assert cli.main(["report", str(copy), "--device", "cpu"]) == 0
    assert capsys.readouterr().out.strip() == str(copy / "report.html")
    page = open(copy / "report.html", encoding="utf-8").read()
    assert "checkpoints/interrupted.pt (after epoch 2)" in page
    assert json.load(open(copy / "training_stats.json"))["report"] == str(copy / "report.html")
    _png(copy / "plots" / "top_losses.png")


def test_report_errors_name_the_bad_thing(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path / "nowhere")]) == 2
    assert "has no training_stats.json" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "training_stats.json").write_text("{}")
    with pytest.raises(gpucore.ConfigError, match="has no checkpoint"):
        gpucore.write_report(str(tmp_path / "empty"))


def test_a_failing_figure_is_a_warning_and_the_rest_is_written(run, tmp_path, monkeypatch):
    copy = run_copy(run, tmp_path)

    def broken(*args, **kwargs):
        raise ValueError("no ink")

    monkeypatch.setattr(plots, "curves", broken)
    complete = (copy / "report.html").read_bytes()
    # The run's complete report is never replaced by one that lacks a figure of it.
    with pytest.warns(RuntimeWarning, match="curves.png: ValueError: no ink"), \
            pytest.raises(gpucore.ConfigError, match="would lack curves.png.*kept"):
        gpucore.write_report(str(copy), device="cpu")
    assert (copy / "report.html").read_bytes() == complete
    os.remove(copy / "report.html")  # a run without a report yet: the page is written, saying what is missing
    with pytest.warns(RuntimeWarning, match="curves.png: ValueError: no ink"):
        path = gpucore.write_report(str(copy), device="cpu")
    page = open(path, encoding="utf-8").read()
    assert "Not drawn" in page and "no ink" in page and "confusion_matrix.png" in page


def test_captcha_report_shows_strings_and_per_character_confusion(captcha_run):
    result = captcha_run
    rows = json.load(open(os.path.join(result.run_dir, "per_class.json")))
    assert len(rows) == 36 and sum(r["support"] for r in rows) == CAPTCHA_KWARGS["val_size"] * 4
    page = open(os.path.join(result.run_dir, "report.html"), encoding="utf-8").read()
    _, (_, y_val) = gpucore.data.synthetic.synthetic_captcha(**CAPTCHA_KWARGS)
    first = "".join(CLASS_NAMES["synthetic_captcha"][i] for i in y_val[0].tolist())
    assert f"<td>0</td><td>{first}</td>" in page
    for name in ("val_predictions", "train_batch", "confusion_matrix"):
        _png(os.path.join(result.run_dir, "plots", f"{name}.png"))


def test_ctc_report_of_a_users_model_and_tensors(tmp_path):
    (x, y), (xv, yv) = gpucore.data.synthetic.synthetic_sequences(train_size=128, val_size=16, steps=16, classes=5,
                                                             max_length=4, noise=0.1)
    model = nn.Sequential(nn.Linear(5, 32), nn.ReLU(), nn.Linear(32, 5))
    result = gpucore.train(dict(run_dir=str(tmp_path), progress=False, epochs=1, batch_size=32, loss="ctc",
                                normalize=False), model=model, train_data=(x, y), val_data=(xv, yv))
    page = open(os.path.join(result.run_dir, "report.html"), encoding="utf-8").read()
    truth = "".join(str(i) for i in yv[0].tolist() if i >= 0)
    assert f"<td>0</td><td>{truth}</td>" in page
    assert "Confusion matrix per character (sequences of the right length)" in page
    assert "train_batch.png" not in page  # not images: no training batch to show


def test_report_false_writes_no_report(tmp_path):
    result = gpucore.train(dict(RUN, run_dir=str(tmp_path), epochs=1, report=False, data_kwargs={"train_size": 64,
                                                                                              "val_size": 16}))
    assert not os.path.exists(os.path.join(result.run_dir, "report.html"))
    assert "report" not in json.load(open(result.stats_path))


def test_segmentation_report_shows_masks_with_their_iou(tmp_path):
    truth = torch.zeros(2, 4, 4, dtype=torch.long)
    truth[0, :2, :2] = 1  # 4 pixels
    guess = torch.zeros(2, 4, 4, dtype=torch.long)
    guess[0, :2, :3] = 1  # 6 pixels, 4 shared: IoU 4/6; image 1: both empty, IoU 1
    assert report_page.mask_iou(truth, guess).tolist() == pytest.approx([4 / 6, 1.0])
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(48, 1, 16, 16, generator=generator)
    masks = (images[:, 0] > 0.5).long()
    model = nn.Conv2d(1, 1, 3, padding=1)
    result = gpucore.train(dict(run_dir=str(tmp_path), progress=False, epochs=1, batch_size=16, loss="dice_bce",
                                lr=0.05), model=model, train_data=(images[:32], masks[:32]),
                           val_data=(images[32:], masks[32:]))
    page = open(os.path.join(result.run_dir, "report.html"), encoding="utf-8").read()
    assert "Validation masks" in page and "Not drawn" not in page
    _png(os.path.join(result.run_dir, "plots", "val_predictions.png"))
    _png(os.path.join(result.run_dir, "plots", "train_batch.png"))


@pytest.mark.slow
def test_report_cam_layer_is_the_layer_of_the_top_losses_grad_cam(tmp_path, monkeypatch):
    from gpucore import cam as gcam
    from gpucore.report import sections

    calls = []

    class Recording(gcam.CAM):
        def __call__(self, inputs, targets=None):
            result = super().__call__(inputs, targets)
            calls.append((list(self.layer_names), inputs.detach().clone(), list(targets), result.cams.clone()))
            return result

    monkeypatch.setattr(sections, "CAM", Recording)
    result = gpucore.train(dict(RUN, run_dir=str(tmp_path), data_kwargs={"train_size": 256, "val_size": 64}, epochs=1,
                                report_cam_layer="features.4"))
    assert len(calls) == 2  # the predicted and the true class of the worst mistakes
    model = result.model.float().eval()
    for layers, inputs, targets, cams in calls:
        assert layers == ["features.4"]
        expected = gpucore.gradcam(model, "features.4", inputs, targets=targets).cams
        torch.testing.assert_close(cams, expected, rtol=1e-4, atol=1e-4)
    auto = gpucore.gradcam(model, "auto", calls[0][1], targets=calls[0][2]).cams
    assert (auto - calls[0][3]).abs().max() > 0.05  # not the automatic layer's maps


@pytest.mark.slow
def test_report_of_a_streamed_fine_tuned_run_counts_the_folders_images(tmp_path):
    """An image folder read batch by batch (cache: none) into a fine-tuned model (pretrained weights, frozen
    backbone): the report's per-class support is the folder's count of validation images per class, and its
    recalls give back the run's val_accuracy."""
    from gpucore.data.png import encode_png

    (x, y), (xv, yv) = synthetic_fashion(train_size=120, val_size=60, seed=4)
    for split, images, labels in (("train", x, y), ("val", xv, yv)):
        for i, (image, label) in enumerate(zip(images, labels.tolist())):
            folder = tmp_path / "images" / split / CLASS_NAMES["synthetic_fashion"][label].replace(" ", "_")
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{i}.png").write_bytes(encode_png(image.reshape(28, 28)))
    torch.manual_seed(0)
    weights = tmp_path / "start.pt"
    torch.save(gpucore.models.FashionMnistCNN().state_dict(), weights)
    result = gpucore.train(dict(data=str(tmp_path / "images"), data_kwargs={"channels": 1}, cache="none", epochs=2,
                                batch_size=32, progress=False, device="cpu", pretrained=str(weights),
                                freeze="backbone", freeze_epochs=1, run_dir=str(tmp_path / "runs")))
    stats = json.load(open(result.stats_path))
    assert stats["pretrained"]["loaded"] == len(torch.load(weights))  # the fine-tuning start was loaded
    rows = json.load(open(os.path.join(result.run_dir, "per_class.json")))
    folders = sorted(os.listdir(tmp_path / "images" / "val"))
    assert [r["class"] for r in rows] == folders
    assert [r["support"] for r in rows] == [len(os.listdir(tmp_path / "images" / "val" / f)) for f in folders]
    best = next(row for row in result.history if row["epoch"] == result.best_epoch)
    correct = sum(r["recall"] * r["support"] for r in rows)
    assert correct / 60 == pytest.approx(best["val_accuracy"], abs=1e-9)
    page = open(os.path.join(result.run_dir, "report.html"), encoding="utf-8").read()
    assert "Not drawn" not in page
    for name in ("confusion_matrix", "val_predictions", "top_losses", "train_batch"):
        _png(os.path.join(result.run_dir, "plots", f"{name}.png"))
