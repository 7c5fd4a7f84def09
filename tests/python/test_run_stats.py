"""training_stats.json's writer (training/run_stats.py) on small stand-ins: an engine part whose engine reports known
counts, a position, history and best epoch set by hand; every derived figure is computed here by hand. Then on a
stand-in run built by the set-up steps (loop_stand_in.py): the lr it reports is the one the engine trains with."""
import json
import os
from types import SimpleNamespace

import pytest

from gpucore.run_files import STATS
from gpucore.training.callbacks import BestEpoch, Monitor
from gpucore.training.engine_config import RunEngine
from gpucore.training.fit_outcome import FitOutcome
from gpucore.training.position import Batching, RunPosition
from gpucore.training.run_stats import RunStats
from gpucore.training.step_checkpoints import StepCheckpoints
from loop_stand_in import camera_crops, linear_model, stand_in


class _Engine:
    """A stand-in for _C.Engine: the counts it reports are fixed here."""

    def host_syncs(self):
        return {"metrics": 7, "evaluation": 2, "checkpoint": 1}

    def graph_stats(self):
        return {"captured": 0, "replays": 0, "eager_steps": 0, "reason": None}


class _Set:
    def __init__(self, skipped):
        self.skipped = skipped

    def skipped_files(self):
        return list(self.skipped)


class _RunDir:
    resume, resume_implied = None, False

    def __init__(self):
        self.written = []

    def write_stats(self, stats):
        self.written.append(stats)


def _stats(tmp_path, graphs_reason=None, has_ema=False, monitor="val_loss", cuda_graphs="false"):
    position = RunPosition(Batching(8, 2), world_size=2)
    position.engine_read(5, 1)  # 5 steps taken, 1 skipped, as the engine last said
    history = [{"epoch": 1, "epoch_time_s": 2.0, "val_time_s": 0.5}, {"epoch": 2, "epoch_time_s": 3.0, "val_time_s": 0.25}]
    best = BestEpoch(Monitor(monitor, "auto", 0.0, {monitor: "min"}, ()))
    best.update(2, {monitor: 0.4})
    training = RunEngine(engine=_Engine(), batching=Batching(8, 2), steps_per_epoch=3, lr=0.05,
                         graphs_reason=graphs_reason, auto_monitor=("accuracy",))
    data = SimpleNamespace(train_set=_Set(["b.png", "a.png"]), val_set=_Set(["a.png", "c.png"]))
    run_dir = _RunDir()
    facts = {"device": "cpu", "classes": ["x", "y"]}
    stats = RunStats("linear", cuda_graphs, lambda: facts, run_dir, training, has_ema, data, position, history,
                     FitOutcome(), best, StepCheckpoints(str(tmp_path), 0, 0, True), None)
    return stats, run_dir


def test_the_stats_are_the_runs_facts_and_what_its_parts_counted(tmp_path):
    stats, run_dir = _stats(tmp_path)
    stats.interrupted_epoch_seconds = 1.5
    stats.setup_seconds = 4.0
    stats.write("completed")
    written = run_dir.written[-1]
    assert written["device"] == "cpu" and written["classes"] == ["x", "y"]  # the facts, as given
    assert written["status"] == "completed" and written["error"] is None
    assert written["batch"] == {"per_process": 8, "accumulate_grad_batches": 2, "processes": 2, "effective": 32,
                                "lr_scaling": "linear", "lr": 0.05}
    assert (written["steps"], written["skipped_steps"]) == (5, 1)
    assert written["host_syncs"] == 10 and written["host_syncs_by_source"] == {"metrics": 7, "evaluation": 2,
                                                                               "checkpoint": 1}
    assert written["best"] == {"metric": 0.4, "epoch": 2, "monitor": "val_loss"}  # no EMA: no weights named
    # training: the epochs' 2 + 3 seconds and the interrupted epoch's 1.5; validation: 0.5 + 0.25
    assert written["seconds"] == {"setup": 4.0, "training": 6.5, "interrupted_epoch": 1.5, "validation": 0.75}
    assert written["skipped_files"] == ["a.png", "b.png", "c.png"]  # both sets', once each, sorted
    assert written["epochs"] == stats.history and written["resume"] == {"asked": None, "implied_by_restart": False}
    assert "frozen_layers" not in written and "oom_reductions" not in written


@pytest.mark.parametrize("asked,reason,eager", [
    ("false", None, 6),  # never asked to capture: all 5 taken and 1 skipped steps ran eagerly
    ("auto", "CUDA graphs capture CUDA steps; this run trains on cpu", 6),  # asked, but the plan said why not
    ("auto", None, 0),  # the engine captured: its own count of eager steps stands
])
def test_graph_stats_say_what_was_asked_and_why_steps_ran_eagerly(tmp_path, asked, reason, eager):
    stats, _ = _stats(tmp_path, graphs_reason=reason, cuda_graphs=asked)
    assert stats.graph_stats() == {"captured": 0, "replays": 0, "eager_steps": eager, "reason": reason,
                                   "asked": asked}


@pytest.mark.parametrize("monitor,weights", [("val_ema_loss", "ema"), ("val_loss", "raw")])
def test_with_an_ema_the_best_epoch_names_the_weights_it_monitored(tmp_path, monitor, weights):
    stats, _ = _stats(tmp_path, has_ema=True, monitor=monitor)
    assert stats.best() == {"metric": 0.4, "epoch": 2, "monitor": monitor, "weights": weights}


def test_the_lr_reported_is_the_one_the_engine_trains_with(tmp_path):
    """lr_scaling linear: lr 0.2 x (8 per batch x accumulate 2) / base_batch_size 64 = 0.05, in training_stats.json
    as in the engine's own report of its lr (constant schedule)."""
    run, loop = stand_in(tmp_path, linear_model(), camera_crops(48), lr=0.2, accumulate_grad_batches=2,
                         lr_scaling="linear", base_batch_size=64, epochs=1)
    try:
        assert loop.fit() == "completed"
        with open(os.path.join(run.run_dir.path, STATS)) as written:
            stats = json.load(written)
    finally:
        run.close()
    assert stats["batch"]["lr"] == pytest.approx(0.05, rel=1e-12) and stats["batch"]["effective"] == 16
    assert loop.history[0]["lr"] == pytest.approx(0.05, rel=1e-6)
    assert stats["steps"] == 3  # 6 batches of 8, 2 a step
