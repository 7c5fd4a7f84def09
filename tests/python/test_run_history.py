"""A run's history (run_history.py): which keys of a metrics.jsonl row are metrics, and the rate over a history, on
a real run's rows and on rows computed by hand."""
import json

import pytest
import torch

import gpucore
from gpucore.run_history import NOT_METRICS, epochs_seconds, metric_names, samples_per_second


def test_every_key_of_a_real_row_is_a_metric_or_named_as_none(tmp_path):
    torch.manual_seed(0)
    inputs, targets = torch.rand(64, 1, 8, 8), torch.randint(0, 3, (64,))
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 3))
    result = gpucore.train({"epochs": 2, "batch_size": 16, "progress": False, "report": False, "loggers": [],
                            "run_dir": str(tmp_path), "name": "row", "seed": 1, "cuda_graphs": False, "device": "cpu",
                            "ema_decay": 0.9},
                           model=model, train_data=(inputs, targets), val_data=(inputs[:32], targets[:32]))
    with open(result.metrics_path, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    assert "val_time_s" in rows[0] and "epoch_time_s" in rows[0]
    for key in rows[0]:
        assert key in NOT_METRICS or key.startswith(("train_", "val_")), key
    names = metric_names(rows)
    # curves.png draws one panel per name (and the learning rate): never a "time_s" panel from val_time_s
    assert "time_s" not in names and "loss" in names and "ema_loss" in names
    assert all(f"train_{name}" in rows[0] or f"val_{name}" in rows[0] for name in names)
    assert result.samples_per_second == pytest.approx(samples_per_second(rows))


def test_the_rate_over_a_history_weighs_each_epoch_by_its_time():
    history = [{"epoch": 1, "epoch_time_s": 2.0, "samples_per_s": 100.0},
               {"epoch": 2, "epoch_time_s": 6.0, "samples_per_s": 300.0}]
    assert samples_per_second(history) == pytest.approx((200 + 1800) / 8)
    assert epochs_seconds(history) == 8.0
    assert samples_per_second([]) is None and epochs_seconds([]) == 0.0
