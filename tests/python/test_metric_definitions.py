"""The reported metrics against torchmetrics on the same predictions (issue 60): ignore_index left out of the loss and
of every metric's numerator and denominator; validation numbers that do not depend on how the pass is batched; the
classes' mean IoU and Dice of multi-class segmentation; balanced accuracy and macro F1 of classification against
scikit-learn; and a cross_entropy segmentation run through evaluate, predict and the report."""
import json
import os
import warnings

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

import gpucore
from gpucore import cli
from conftest import batches, engine, require

VOID = 255


def evaluate(output, target, batch_size, ignore_index=-100, loss="cross_entropy", label_smoothing=0.0):
    """The engine's evaluation of `output` as an identity model's, `batch_size` samples at a time."""
    eng = engine([nn.Parameter(torch.zeros(1))], ignore_index=ignore_index, loss=loss, label_smoothing=label_smoothing)
    return eng.evaluate(batches(output, target, batch_size), lambda x: x, None)["metrics"]


def with_void(target, share, generator, ignore_index):
    """`target` with a random `share` of its entries set to ignore_index."""
    target = target.clone()
    target[torch.rand(target.shape, generator=generator) < share] = ignore_index
    return target


@pytest.mark.parametrize("ignore_index, label_smoothing", [(-100, 0.0), (VOID, 0.0), (-100, 0.2)])
def test_ignored_targets_count_in_no_loss_or_accuracy_at_any_batch_size(ignore_index, label_smoothing):
    classification = require("torchmetrics.classification")
    generator = torch.Generator().manual_seed(60)
    output = torch.randn(33, 12, generator=generator)
    target = with_void(torch.randint(0, 12, (33,), generator=generator), 0.25, generator, ignore_index)
    expected = {
        "loss": nn.functional.cross_entropy(output, target, ignore_index=ignore_index,
                                            label_smoothing=label_smoothing).item(),  # the smoothed loss
        "accuracy": classification.MulticlassAccuracy(12, average="micro", ignore_index=ignore_index)(output, target),
        "top5_accuracy": classification.MulticlassAccuracy(12, top_k=5, average="micro",
                                                           ignore_index=ignore_index)(output, target),
    }
    for batch_size in (1, 16, 33):
        metrics = evaluate(output, target, batch_size, ignore_index, label_smoothing=label_smoothing)
        for name, value in expected.items():
            assert metrics[name] == pytest.approx(float(value), rel=1e-6), f"{name}, batches of {batch_size}"


def test_segmentation_loss_accuracy_and_class_means_match_torchmetrics_at_any_batch_size():
    classification = require("torchmetrics.classification")
    generator = torch.Generator().manual_seed(61)
    classes = 4
    output = torch.randn(20, classes, 6, 7, generator=generator)
    target = torch.randint(0, classes, (20, 6, 7), generator=generator)
    target[target == 2] = 3  # class 2 is never true: only predicted, so its IoU is 0 and counts
    target = with_void(target, 0.21, generator, -100)
    predicted = output.argmax(1)
    per_class_iou = classification.MulticlassJaccardIndex(classes, average="none", ignore_index=-100)(predicted, target)
    per_class_dice = classification.MulticlassF1Score(classes, average="none", ignore_index=-100)(predicted, target)
    expected = {
        "loss": nn.functional.cross_entropy(output, target).item(),
        "accuracy": classification.MulticlassAccuracy(classes, average="micro", ignore_index=-100)(predicted, target),
        "miou": classification.MulticlassJaccardIndex(classes, average="macro", ignore_index=-100)(predicted, target),
        "mdice": classification.MulticlassF1Score(classes, average="macro", ignore_index=-100)(predicted, target),
        "miou_no_background": per_class_iou[1:].mean(),  # every class is true or predicted somewhere
        "mdice_no_background": per_class_dice[1:].mean(),
    }
    assert 0 < per_class_iou[2] or (predicted[target != -100] == 2).any()  # class 2 scored
    for batch_size in (1, 16, 20):
        metrics = evaluate(output, target, batch_size)
        for name, value in expected.items():
            assert metrics[name] == pytest.approx(float(value), rel=1e-6), f"{name}, batches of {batch_size}"


def test_a_class_neither_true_nor_predicted_is_in_no_mean():
    classification = require("torchmetrics.classification")
    output = torch.full((1, 3, 1, 4), -1.0)
    output[0, 0, 0, :2] = output[0, 1, 0, 2:] = 1.0  # predicted 0 0 1 1; class 2 nowhere
    target = torch.tensor([[[0, 1, 1, -100]]])
    metrics = evaluate(output, target, 1)
    expected = classification.MulticlassJaccardIndex(3, average="macro", ignore_index=-100)(output.argmax(1), target)
    assert metrics["miou"] == pytest.approx(float(expected)) == pytest.approx((1 / 2 + 1 / 2) / 2)


def test_balanced_accuracy_and_macro_f1_match_scikit_learn_at_any_batch_size():
    sk_metrics = require("sklearn.metrics")
    generator = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    classes = 6
    output = torch.randn(41, classes, generator=generator)
    target = with_void(torch.randint(0, classes - 1, (41,), generator=generator), 0.2, generator, VOID)
    target[:4] = 4  # class 4 is true but never predicted: recall 0, F1 0
    output[:, 4] = -10.0
    output[4:8, 5] = 10.0  # class 5 is predicted but never true: in no recall, F1 0
    target[4:8] = 0
    kept = target != VOID
    truth, predicted = target[kept].numpy(), output.argmax(1)[kept].numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scikit-learn warns of the class predicted but never true
        balanced = sk_metrics.balanced_accuracy_score(truth, predicted)
        # The labels of the macro F1 are the classes true or predicted: zero_division never applies.
        f1 = [sk_metrics.f1_score(truth, predicted, average="macro", zero_division=z) for z in (0, 1)]
    assert f1[0] == f1[1] and balanced != sk_metrics.accuracy_score(truth, predicted)
    for batch_size in (1, 16, 41):
        metrics = evaluate(output, target, batch_size, ignore_index=VOID)
        assert metrics["balanced_accuracy"] == pytest.approx(balanced, rel=1e-12), f"batches of {batch_size}"
        assert metrics["f1_macro"] == pytest.approx(f1[0], rel=1e-12), f"batches of {batch_size}"


@pytest.mark.parametrize("loss", ["bce_with_logits", "multilabel_soft_margin"])
def test_multi_label_metrics_match_torchmetrics_at_any_batch_size(loss):
    classification = require("torchmetrics.classification")
    generator = torch.Generator().manual_seed(63)
    labels = 6
    output = torch.randn(30, labels, generator=generator)
    target = (torch.rand(30, labels, generator=generator) < 0.3).float()
    target[:, 5] = 0
    output[:, 5] = -1.0  # label 5 neither true nor predicted: 0 in the macro F1
    output[:4] = torch.where(target[:4] > 0, 1.0, -1.0)  # four samples right in full
    expected = {
        "accuracy": classification.MultilabelAccuracy(labels, average="micro")(output, target),
        "dice": classification.MultilabelF1Score(labels, average="micro")(output, target),
        "f1_macro": classification.MultilabelF1Score(labels, average="macro")(output, target),
        "subset_accuracy": classification.MultilabelExactMatch(labels)(output, target),
    }
    assert expected["subset_accuracy"] >= 4 / 30
    for batch_size in (1, 16, 30):
        metrics = evaluate(output, target, batch_size, loss=loss)
        for name, value in expected.items():
            assert metrics[name] == pytest.approx(float(value), rel=1e-6), f"{name}, batches of {batch_size}"


def test_ctc_character_error_rate_matches_torchmetrics():
    text = require("torchmetrics.text")
    from gpucore.tasks import task_for

    generator = torch.Generator().manual_seed(64)
    predicted = torch.randint(1, 5, (40, 7), generator=generator)
    targets = torch.randint(1, 5, (40, 6), generator=generator)
    predicted[torch.rand(predicted.shape, generator=generator) < 0.3] = -1  # padding: shorter decodings
    targets[:, 4:][torch.rand(40, 2, generator=generator) < 0.5] = -1
    targets[:10, :] = torch.where(predicted[:10, :6] >= 0, predicted[:10, :6], -1)  # some decoded right
    as_text = lambda rows: ["".join(chr(64 + c) for c in row if c >= 0) for row in rows.tolist()]  # noqa: E731
    expected = text.CharErrorRate()(as_text(predicted), as_text(targets))
    assert task_for("ctc").decoded_metrics(predicted, targets)["cer"] == pytest.approx(float(expected), rel=1e-6)


SEG_MODELS = '''
from torch import nn


def three_classes(in_channels: int = 3):
    """Three logits per pixel: the class of each pixel is its highest."""
    return nn.Sequential(nn.Conv2d(in_channels, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 3, 1))
'''


def class_masks(images, generator):
    """Each pixel's class from its red channel (dark, middle, bright), a fifth of the pixels void (VOID)."""
    masks = torch.bucketize(images[:, 0].long(), torch.tensor([85, 170]))
    return with_void(masks, 0.2, generator, VOID)


@pytest.mark.draws_report
def test_a_multi_class_segmentation_run_evaluates_predicts_and_reports(tmp_path, monkeypatch, capsys):
    classification = require("torchmetrics.classification")
    (tmp_path / "three_class_models.py").write_text(SEG_MODELS)  # a name no other test imports
    monkeypatch.syspath_prepend(str(tmp_path))
    generator = torch.Generator().manual_seed(62)
    images = torch.randint(0, 256, (48, 3, 12, 12), generator=generator, dtype=torch.uint8)
    masks = class_masks(images, generator)
    data = tmp_path / "classes.npz"
    np.savez(data, x_train=images[:32].numpy(), y_train=masks[:32].numpy(), x_val=images[32:].numpy(),
             y_val=masks[32:].numpy())
    result = gpucore.train({"loss": "cross_entropy", "ignore_index": VOID,
                            "model": "three_class_models:three_classes",
                            "data": str(data), "epochs": 2, "batch_size": 8, "eval_batch_size": 5, "lr": 0.05,
                            "device": "cpu", "precision": "32", "progress": False, "seed": 0,
                            "run_dir": str(tmp_path / "runs"), "name": "seg"})
    run_dir = result.run_dir
    stats = json.load(open(os.path.join(run_dir, "training_stats.json")))
    assert stats["best"]["monitor"] == "val_miou"  # monitor: auto, for per-pixel classes

    checkpoint = os.path.join(run_dir, "checkpoints", "best.pt")
    loaded = gpucore.load(checkpoint, "cpu")
    val_images, val_masks = images[32:], masks[32:]
    outputs = loaded(val_images)
    predicted = outputs.argmax(1)
    iou = classification.MulticlassJaccardIndex(3, average="none", ignore_index=VOID)(predicted, val_masks)
    expected = {
        "loss": nn.functional.cross_entropy(outputs, val_masks, ignore_index=VOID).item(),
        "accuracy": float(classification.MulticlassAccuracy(3, average="micro", ignore_index=VOID)(predicted,
                                                                                                   val_masks)),
        "miou": float(classification.MulticlassJaccardIndex(3, average="macro", ignore_index=VOID)(predicted,
                                                                                                  val_masks)),
    }
    summary = gpucore.evaluate(checkpoint, device="cpu", out=str(tmp_path / "evaluation"))
    for name, value in expected.items():
        assert summary["metrics"][name] == pytest.approx(value, rel=1e-5), name
    assert [row["iou"] for row in summary["per_class"]] == pytest.approx(iou.tolist(), abs=1e-6)
    assert [row["support"] for row in summary["per_class"]] == [int((val_masks == k).sum()) for k in range(3)]

    predictions = gpucore.predict(checkpoint, val_images, masks=str(tmp_path / "masks"), device="cpu")
    assert torch.equal(predictions.predicted, predicted)
    written = np.array(Image.open(predictions.mask_files[3]))
    assert np.array_equal(written, predicted[3].numpy())  # class ids

    assert cli.main(["report", run_dir, "--device", "cpu"]) == 0
    page = open(os.path.join(run_dir, "report.html"), encoding="utf-8").read()
    assert "Validation masks" in page and "Not drawn" not in page
    assert "mean IoU over the classes in its true or predicted mask: a per-image number, not the metrics table" in page
    assert "docs/guides/training.md#metrics" in page  # where each metric is defined
    rows = json.load(open(os.path.join(run_dir, "per_class.json")))
    assert [row["iou"] for row in rows] == pytest.approx(iou.tolist(), abs=1e-6)


def test_report_without_the_validation_pass_fails_and_writes_nothing(tmp_path, monkeypatch, capsys):
    result = gpucore.train({"data": "synthetic_fashion", "data_kwargs": {"train_size": 64, "val_size": 32},
                            "model": "fast_cnn", "epochs": 1, "batch_size": 32, "device": "cpu", "progress": False,
                            "report": False, "run_dir": str(tmp_path / "runs")})

    def fails(*args, **kwargs):
        raise RuntimeError("the model's outputs do not decode")

    monkeypatch.setattr("gpucore.evaluation.run_report.evaluation_pass", fails)
    assert cli.main(["report", result.run_dir, "--device", "cpu"]) == 2
    assert ("error: report of '" + result.run_dir + "': the validation pass: RuntimeError: the model's outputs do "
            "not decode; report.html was not written") in capsys.readouterr().err
    assert not os.path.exists(os.path.join(result.run_dir, "report.html"))
