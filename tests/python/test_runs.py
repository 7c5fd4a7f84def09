"""`gpucore runs`' time column: the time a run trained, an interrupted epoch's part included, also once resumed."""
import json
import os
import signal
import time

import pytest
import torch

import gpucore
from conftest import train_interrupted
from gpucore.runs import duration, run_row, trained_seconds

SLEEP_S = 0.02  # per training forward: a floor under the time the interrupted epoch trained


class SlowThenInterrupted(torch.nn.Module):
    """Sleeps SLEEP_S in each training forward and sends SIGINT to this process in the `at`-th."""

    def __init__(self, at):
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 10))
        self.at, self.calls = at, 0

    def forward(self, x):
        if self.training:
            self.calls += 1
            time.sleep(SLEEP_S)
            if self.calls == self.at:
                os.kill(os.getpid(), signal.SIGINT)
        return self.body(x)


def test_a_run_interrupted_mid_epoch_records_and_shows_the_time_it_trained(tmp_path):
    config = {"data": "synthetic_fashion", "data_kwargs": {"train_size": 32 * 40, "val_size": 32, "seed": 3},
              "epochs": 1, "batch_size": 32, "progress": False, "report": False, "loggers": [],
              "run_dir": str(tmp_path), "name": "cut", "seed": 5, "cuda_graphs": False, "device": "cpu"}
    result = train_interrupted(config, model=SlowThenInterrupted(at=25))
    assert result.status == "interrupted" and result.steps == 25
    stats = json.loads((tmp_path / "cut" / "training_stats.json").read_text())
    assert stats["epochs"] == []  # no epoch finished: no epoch_time_s anywhere
    seconds = stats["seconds"]
    assert seconds["interrupted_epoch"] >= 25 * SLEEP_S
    assert seconds["training"] == seconds["interrupted_epoch"]
    assert trained_seconds(stats) == seconds["interrupted_epoch"]
    assert run_row(str(tmp_path / "cut"), "cut")["time"] != "-"


def test_a_resumed_run_counts_the_time_it_trained_before_the_interrupt(tmp_path):
    config = {"data": "synthetic_fashion", "data_kwargs": {"train_size": 32 * 20, "val_size": 32, "seed": 3},
              "epochs": 2, "batch_size": 32, "progress": False, "report": False, "loggers": [],
              "run_dir": str(tmp_path), "name": "cut", "seed": 5, "cuda_graphs": False, "device": "cpu"}
    stopped = train_interrupted(config, model=SlowThenInterrupted(at=12))  # mid-epoch 1: 12 of its 20 steps
    assert stopped.status == "interrupted" and stopped.steps == 12
    first = json.loads((tmp_path / "cut" / "training_stats.json").read_text())["seconds"]
    assert first["interrupted_epoch"] >= 12 * SLEEP_S
    resumed = gpucore.train(dict(config, resume="auto"), model=SlowThenInterrupted(at=None))
    assert resumed.status == "completed" and resumed.steps == 40
    stats = json.loads((tmp_path / "cut" / "training_stats.json").read_text())
    epoch_1, epoch_2 = stats["epochs"]
    # Epoch 1 trained 12 steps before the interrupt and 8 after it: its time is both parts', as if never interrupted.
    assert epoch_1["epoch_time_s"] >= first["interrupted_epoch"] + 8 * SLEEP_S
    assert epoch_1["samples_per_s"] == pytest.approx(32 * 20 / epoch_1["epoch_time_s"])
    assert epoch_2["epoch_time_s"] >= 20 * SLEEP_S
    # The resumed process trained 28 steps of at least SLEEP_S each, on top of what the first one recorded.
    assert trained_seconds(stats) >= first["training"] + 28 * SLEEP_S
    assert trained_seconds(stats) == pytest.approx(stats["seconds"]["training"])
    assert run_row(str(tmp_path / "cut"), "cut")["time"] == duration(trained_seconds(stats))


def test_the_time_column_adds_the_interrupted_epoch_to_the_finished_ones(tmp_path):
    stats = {"status": "interrupted", "config": {"epochs": 3}, "device": "cuda",
             "epochs": [{"epoch": 1, "epoch_time_s": 60.4}],
             "seconds": {"training": 574.6, "interrupted_epoch": 514.2}}
    (tmp_path / "training_stats.json").write_text(json.dumps(stats))
    row = run_row(str(tmp_path), "cut")
    assert row["time"] == "9m 35s" and row["epochs"] == "1/3" and row["status"] == "interrupted"
    # A file written before seconds.interrupted_epoch existed: the finished epochs only.
    del stats["seconds"]
    (tmp_path / "training_stats.json").write_text(json.dumps(stats))
    assert run_row(str(tmp_path), "cut")["time"] == "1m 00s"
