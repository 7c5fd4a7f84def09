"""Each task's decoding and correctness against the engine's own metrics on fresh random outputs: what the
report and predict call right is what the engine's accuracy counted."""
import pytest
import torch
from torch import nn

import gpucore
from gpucore import _C
from gpucore.tasks import CTCSequence, Classification, Metric, MultiHead, MultiLabel, Segmentation, task_for


def engine_metrics(task, output, target, top_k=0):
    """The engine's metrics of one batch, with the task's loss and an identity model (no parameters: _C.evaluate
    builds no optimizer)."""
    config = _C.EngineConfig()
    config.device = torch.device("cpu")
    config.loss = task.loss_config()
    config.top_k = top_k
    batches = _C.TensorBatches(output, target, output.shape[0], False, False, 0, torch.device("cpu"))
    return _C.evaluate(batches, lambda x: x, config)["metrics"]


def test_evaluation_without_an_engine_equals_the_engines_and_plain_torch():
    torch.manual_seed(11)
    frozen = nn.Linear(6, 4).requires_grad_(False)  # no trainable parameter, and no optimizer needed
    x, y = torch.randn(50, 6), torch.randint(0, 4, (50,))
    config = _C.EngineConfig()
    config.device = torch.device("cpu")
    config.loss = task_for("cross_entropy").loss_config()
    config.top_k = 3
    batches = lambda: _C.TensorBatches(x, y, 16, False, False, 0, torch.device("cpu"))  # noqa: E731
    metrics = _C.evaluate(batches(), frozen, config)["metrics"]
    with torch.no_grad():
        logits = frozen(x)
    assert metrics["loss"] == pytest.approx(nn.functional.cross_entropy(logits, y).item(), rel=1e-5)
    assert metrics["accuracy"] == pytest.approx((logits.argmax(1) == y).float().mean().item(), abs=1e-7)
    assert metrics["top3_accuracy"] == pytest.approx((logits.topk(3).indices == y[:, None]).any(1).float().mean().item(),
                                                     abs=1e-7)
    engine = _C.Engine([_C.ParamGroup([nn.Parameter(torch.zeros(1))], 0.0, 1.0)], config)
    assert engine.evaluate(batches(), frozen, None)["metrics"] == metrics


def test_tasks_are_resolved_from_loss_and_heads():
    assert [type(task_for(loss, heads)) for loss, heads in (
        ("cross_entropy", 0), ("multilabel_soft_margin", 4), ("ctc", 0), ("bce_with_logits", 0),
        ("multilabel_soft_margin", 0), ("dice_bce", 0))] == [
        Classification, MultiHead, CTCSequence, MultiLabel, MultiLabel, Segmentation]
    with pytest.raises(gpucore.ConfigError, match=r"'heads' \(3\) is used by loss multilabel_soft_margin only; "
                                                  "loss 'ctc' would ignore it"):
        task_for("ctc", 3)
    with pytest.raises(gpucore.ConfigError, match="no task trains with 'hinge'; built-in losses: bce_with_logits, "
                                                  "cross_entropy, ctc, dice_bce, multilabel_soft_margin"):
        task_for("hinge")
    assert isinstance(task_for("bce_with_logits").for_outputs(torch.zeros(2, 1, 4, 4)), Segmentation)
    assert isinstance(task_for("bce_with_logits").for_outputs(torch.zeros(2, 5)), MultiLabel)


def test_classification_agrees_with_the_engine():
    task = task_for("cross_entropy", label_smoothing=0.1)
    output, target = torch.randn(96, 10), torch.randint(0, 10, (96,))
    metrics = engine_metrics(task, output, target, top_k=3)
    assert task.metrics(3) == [Metric("loss", "min"), Metric("accuracy", "max"), Metric("top3_accuracy", "max")] + [
        Metric(name, "max") for name in ("balanced_accuracy", "f1_macro",  # a class per sample only
                                         "miou", "miou_no_background", "mdice", "mdice_no_background")]  # masks only
    predicted = task.decode(output)
    assert task.correct(predicted, target).float().mean().item() == pytest.approx(metrics["accuracy"])
    assert task.sample_losses(output, target).mean().item() == pytest.approx(metrics["loss"], rel=1e-5)
    assert torch.allclose(task.confidence(output), output.softmax(1).max(1).values)


def test_multi_head_agrees_with_the_engine():
    heads, classes = 4, 7
    task = task_for("multilabel_soft_margin", heads)
    output = torch.randn(48, heads * classes)
    target = torch.randint(0, classes, (48, heads))
    target[:12] = output.reshape(48, heads, classes)[:12].argmax(-1)  # 12 samples right in full
    metrics = engine_metrics(task, output, target)
    predicted = task.decode(output)
    assert task.correct(predicted, target).float().mean().item() == pytest.approx(metrics["seq_accuracy"])
    assert (predicted == target).float().mean().item() == pytest.approx(metrics["char_accuracy"])
    one_hot = nn.functional.one_hot(target, classes).reshape(48, -1).float()  # soft targets score alike
    assert task.correct(predicted, one_hot).tolist() == task.correct(predicted, target).tolist()


def _greedy(steps):
    """Best class per step, repeats collapsed, blanks dropped: CTC's greedy decoding written out."""
    out, previous = [], None
    for token in steps.argmax(-1).tolist():
        if token != 0 and token != previous:
            out.append(token)
        previous = token
    return out


def test_ctc_sequence_agrees_with_the_engine():
    task = task_for("ctc")
    output = torch.randn(24, 10, 5)
    targets = torch.full((24, 10), -1)
    for i in range(24):
        truth = _greedy(output[i]) if i % 3 == 0 else torch.randint(1, 5, (1 + i % 5,)).tolist()
        targets[i, :len(truth)] = torch.tensor(truth, dtype=torch.long)
    metrics = engine_metrics(task, output, targets)
    predicted = task.decode(output)
    assert [[t for t in row if t >= 0] for row in predicted.tolist()] == [_greedy(o) for o in output]
    right = task.correct(predicted, targets)
    assert right.float().mean().item() == pytest.approx(metrics["seq_accuracy"])
    assert right[::3].all()


def test_multi_label_agrees_with_the_engine():
    task = task_for("bce_with_logits")
    output = torch.randn(40, 6)
    target = (torch.rand(40, 6) > 0.5).float()
    target[:10] = (output[:10] > 0).float()  # 10 samples right in full
    metrics = engine_metrics(task, output, target)
    predicted, truth = task.decode(output), target > 0.5
    assert (predicted == truth).float().mean().item() == pytest.approx(metrics["accuracy"])
    assert ((predicted & truth).sum() / (predicted | truth).sum()).item() == pytest.approx(metrics["iou"])
    assert task.correct(predicted, target).tolist() == [bool((p == t).all()) for p, t in zip(predicted, truth)]
    rows = [{} for _ in range(40)]
    task.add_prediction_columns(rows, output, predicted, [f"l{i}" for i in range(6)], 5)
    assert rows[3]["labels"] == ";".join(f"l{i}" for i in range(6) if output[3, i] > 0)


def test_segmentation_agrees_with_the_engine():
    task = task_for("dice_bce")
    output = torch.randn(8, 1, 12, 12)
    mask = (torch.rand(8, 12, 12) > 0.6).float()
    mask[:2] = (output[:2, 0] > 0).float()  # 2 masks right in full
    metrics = engine_metrics(task, output, mask)
    predicted = task.decode(output)
    inter, union = ((predicted == 1) & (mask == 1)).sum(), ((predicted == 1) | (mask == 1)).sum()
    assert (inter / union).item() == pytest.approx(metrics["iou"])
    assert (predicted == mask.long()).float().mean().item() == pytest.approx(metrics["accuracy"])
    right = task.correct(predicted, mask.unsqueeze(1))  # (N, 1, H, W) targets as the data may hold them
    assert right[:2].all() and right.tolist() == [bool((p == m.long()).all()) for p, m in zip(predicted, mask)]


CLASS_MEANS = {"miou", "miou_no_background", "mdice", "mdice_no_background"}  # per-pixel class targets only
SAMPLE_CLASS_MEANS = {"balanced_accuracy", "f1_macro"}  # one class target per sample only
LABEL_SETS = {"subset_accuracy", "f1_macro"}  # multi-label outputs (N, labels) only


@pytest.mark.parametrize("loss, heads, output, target, primary, not_for_these_outputs", [
    ("cross_entropy", 0, torch.randn(16, 10), torch.randint(0, 10, (16,)), "accuracy", CLASS_MEANS),
    ("cross_entropy", 0, torch.randn(4, 3, 5, 6), torch.randint(0, 3, (4, 5, 6)), "accuracy",
     {"top3_accuracy"} | SAMPLE_CLASS_MEANS),
    ("multilabel_soft_margin", 3, torch.randn(16, 3 * 4), torch.randint(0, 4, (16, 3)), "seq_accuracy", set()),
    ("ctc", 0, torch.randn(16, 6, 5), torch.randint(1, 5, (16, 3)), "seq_accuracy", set()),
    ("bce_with_logits", 0, torch.randn(16, 6), (torch.rand(16, 6) > 0.5).float(), "accuracy", set()),
    ("multilabel_soft_margin", 0, torch.randn(16, 6), (torch.rand(16, 6) > 0.5).float(), "accuracy", set()),
    ("dice_bce", 0, torch.randn(4, 1, 8, 8), (torch.rand(4, 8, 8) > 0.5).float(), "iou", LABEL_SETS),
])
def test_a_tasks_table_of_metrics_is_what_the_engine_reports(loss, heads, output, target, primary,
                                                            not_for_these_outputs):
    """The task lists every name the engine may report; for these outputs it reports all but those that need
    outputs of another shape."""
    task = task_for(loss, heads)
    for top_k in (0, 3):  # the top-k accuracy listed and reported only when asked for (cross_entropy)
        reported = engine_metrics(task, output, target, top_k=top_k)
        listed = {metric.name for metric in task.metrics(top_k)}
        assert listed - not_for_these_outputs == set(reported)
        assert {metric.name: metric.mode for metric in task.metrics(top_k)} == \
            {name: "min" if name in ("loss", "wer", "ctc_unfit") else "max" for name in listed}
    assert task.primary_metric == primary
    assert task.metric_modes(3, ("train", "val"))["val_loss"] == "min"


def test_ctc_on_clips_with_lengths_reports_the_word_error_rate_which_monitor_auto_follows():
    task = task_for("ctc").with_sequence_lengths(2)
    target = torch.cat([torch.randint(1, 13, (16, 1)), torch.randint(1, 5, (16, 3))], 1)  # frames, then glosses
    reported = engine_metrics(task, torch.randn(16, 6, 5), target, top_k=0)
    assert set(reported) == {metric.name for metric in task.metrics(0)} == {"loss", "seq_accuracy", "ctc_unfit", "wer"}
    assert task.metric_modes(0, ("train", "val")) == {
        "train_loss": "min", "train_seq_accuracy": "max", "train_ctc_unfit": "min",
        "val_loss": "min", "val_seq_accuracy": "max", "val_ctc_unfit": "min", "val_wer": "min"}
    assert task.primary_metrics() == ("wer", "seq_accuracy")
    assert task_for("ctc").primary_metrics() == ("seq_accuracy",)
