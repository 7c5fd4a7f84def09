"""The validation loop (training/validation_loop.py) on a small stand-in run built by the set-up steps: its metrics
against plain PyTorch on the same model and samples, the EMA's beside them, eval mode, and no validation set."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gpucore.config import load_config, with_real_values
from gpucore.training import distributed
from gpucore.training.run_setup import build_run
from gpucore.training.validation_loop import ValidationLoop


def _run(tmp_path, val_data, **keys):
    torch.manual_seed(0)
    inputs, targets = torch.rand(24, 1, 8, 8), torch.randint(0, 3, (24,))
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 3), nn.Dropout(0.5))  # dropout: eval mode shows in the loss
    config = with_real_values(load_config(dict({"device": "cpu", "precision": "32", "progress": False,
                                                "report": False, "seed": 3, "normalize": False, "batch_size": 8,
                                                "run_dir": str(tmp_path), "name": "v", "cuda_graphs": False},
                                               **keys)))
    return model, build_run(config, distributed.environment(), model=model, train_data=(inputs, targets),
                            val_data=val_data)


def test_a_validation_pass_scores_the_model_as_plain_pytorch_does_in_eval_mode(tmp_path):
    torch.manual_seed(1)
    val_x, val_y = torch.rand(20, 1, 8, 8), torch.randint(0, 3, (20,))
    model, run = _run(tmp_path, (val_x, val_y), ema_decay=0.5)
    try:
        record = ValidationLoop(run.data, run.model, None, "none").run_epoch(0, run.engine)
    finally:
        run.close()
    assert not model.training
    with torch.no_grad():
        logits = model(val_x)
    assert record["val_loss"] == pytest.approx(F.cross_entropy(logits, val_y).item(), rel=1e-5)
    assert record["val_accuracy"] == pytest.approx((logits.argmax(1) == val_y).float().mean().item())
    # no step taken yet: the EMA is the model itself, scored on the same samples
    assert record["val_ema_loss"] == pytest.approx(record["val_loss"], rel=1e-6)
    assert record["val_time_s"] > 0


def test_without_a_validation_set_the_pass_records_nothing(tmp_path):
    _, run = _run(tmp_path, None, val_fraction=0)
    try:
        assert run.data.val_set is None
        assert ValidationLoop(run.data, run.model, None, "none").run_epoch(0, run.engine) == {}
    finally:
        run.close()
