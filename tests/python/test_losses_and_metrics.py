"""The C++ engine's losses and metrics against PyTorch: cross entropy with label smoothing, multi-label and multi-head,
BCE and dice-BCE with IoU, CTC with greedy decoding, and the shape errors."""

import pytest
import torch
from torch import nn

from gpucore import _C
from conftest import batches, engine


def evaluate(loss, output, target, heads=0, label_smoothing=0.0):
    """The engine's loss and metrics for one batch, with an identity 'model'."""
    eng = engine([nn.Parameter(torch.zeros(1))], loss=loss, heads=heads, label_smoothing=label_smoothing)
    return eng.evaluate(batches(output, target, output.shape[0]), lambda x: x, None)["metrics"]


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1, 0.35])
def test_cross_entropy_with_label_smoothing_and_accuracy(label_smoothing):
    generator = torch.Generator().manual_seed(145)
    output, target = torch.randn(64, 10, generator=generator), torch.randint(0, 10, (64,), generator=generator)
    metrics = evaluate("cross_entropy", output, target, label_smoothing=label_smoothing)
    expected = nn.functional.cross_entropy(output, target, label_smoothing=label_smoothing).item()
    assert metrics["loss"] == pytest.approx(expected, rel=1e-6), f"label_smoothing {label_smoothing}, seed 145"
    assert metrics["accuracy"] == pytest.approx((output.argmax(1) == target).float().mean().item())
    top5 = (output.topk(5, 1).indices == target[:, None]).any(1).float().mean().item()
    assert metrics["top5_accuracy"] == pytest.approx(top5)


def test_multilabel_soft_margin_and_multi_head_metrics():
    heads, classes = 4, 36
    output = torch.randn(32, heads * classes)
    target = torch.randint(0, classes, (32, heads))
    target[:8] = output.reshape(32, heads, classes)[:8].argmax(-1)  # 8 samples fully right
    metrics = evaluate("multilabel_soft_margin", output, target, heads=heads)
    one_hot = nn.functional.one_hot(target, classes).reshape(32, -1).float()
    expected = nn.MultiLabelSoftMarginLoss()(output, one_hot).item()
    assert metrics["loss"] == pytest.approx(expected, rel=1e-6)
    hits = output.reshape(32, heads, classes).argmax(-1) == target
    assert metrics["char_accuracy"] == pytest.approx(hits.float().mean().item())
    assert metrics["seq_accuracy"] == pytest.approx(hits.all(1).float().mean().item())
    assert metrics["seq_accuracy"] >= 8 / 32


def test_bce_and_dice_bce_with_iou():
    output = torch.randn(6, 1, 16, 16)
    mask = (torch.rand(6, 16, 16) > 0.6).float()
    metrics = evaluate("bce_with_logits", output, mask)
    assert metrics["loss"] == pytest.approx(
        nn.functional.binary_cross_entropy_with_logits(output, mask.unsqueeze(1)).item(), rel=1e-6)
    predicted, truth = output > 0, mask.unsqueeze(1) > 0.5
    assert metrics["iou"] == pytest.approx(((predicted & truth).sum() / (predicted | truth).sum()).item())
    dice_metrics = evaluate("dice_bce", output, mask)
    p = torch.sigmoid(output).reshape(6, -1)
    m = mask.reshape(6, -1)
    dice = (2 * (p * m).sum(1) + 1) / (p.sum(1) + m.sum(1) + 1)
    expected = nn.functional.binary_cross_entropy_with_logits(output, mask.unsqueeze(1)) + (1 - dice).mean()
    assert dice_metrics["loss"] == pytest.approx(expected.item(), rel=1e-5)
    assert dice_metrics["dice"] == pytest.approx((2 * (predicted & truth).sum() / (predicted.sum() + truth.sum())).item())


def test_loss_shape_mismatch_names_both_shapes():
    with pytest.raises(_C.ConfigError, match=r"cross_entropy.*\[8, 10\].*\[8, 3\]"):
        evaluate("cross_entropy", torch.randn(8, 10), torch.randint(0, 10, (8, 3)))
    with pytest.raises(_C.ConfigError, match=r"heads = 4"):
        evaluate("multilabel_soft_margin", torch.randn(8, 10), torch.randint(0, 10, (8, 3)), heads=4)


def test_ctc_loss_and_greedy_sequence_accuracy():
    torch.manual_seed(0)
    output = torch.randn(6, 12, 5)
    targets = torch.tensor([[1, 2, 3], [4, 4, -1], [2, -1, -1], [1, 3, 1], [3, 2, -1], [4, 1, 2]])
    # make samples 0 and 2 decode exactly: 1 1 _ 2 3 3 ... and 2 2 _ _
    output[0] = -5
    for step, token in enumerate([1, 1, 0, 2, 3, 3, 0, 0, 0, 0, 0, 0]):
        output[0, step, token] = 5
    output[2] = -5
    output[2, :, 0] = 5
    output[2, 3:5, 2] = 10
    metrics = evaluate("ctc", output, targets)
    lengths = (targets >= 0).sum(1)
    expected = nn.functional.ctc_loss(output.log_softmax(-1).transpose(0, 1), targets.clamp_min(0),
                                      torch.full((6,), 12), lengths, zero_infinity=True)
    assert metrics["loss"] == pytest.approx(expected.item(), rel=1e-5)

    def greedy(sequence):
        out, previous = [], None
        for token in sequence.argmax(-1).tolist():
            if token != 0 and token != previous:
                out.append(token)
            previous = token
        return out

    right = sum(greedy(output[i]) == [t for t in targets[i].tolist() if t >= 0] for i in range(6))
    assert right >= 2
    assert metrics["seq_accuracy"] == pytest.approx(right / 6)


def test_ctc_shape_error():
    with pytest.raises(_C.ConfigError, match=r"ctc expects an output of \(N, T, classes\)"):
        evaluate("ctc", torch.randn(4, 10), torch.randint(1, 5, (4, 3)))
