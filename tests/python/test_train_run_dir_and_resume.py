"""gpucore.train's run directory and resumes: the files a run writes, runs that never overwrite each other,
bitwise-exact resumes after an interrupt, checkpoints that survive a write killed midway, a Ctrl-C during a write,
non-finite losses or a kill before the first checkpoint, and metrics.jsonl kept in step with the checkpoint."""
import json
import os
import shutil

import pytest
import torch
from torch import nn

import gpucore
from gpucore import checkpoint as gcheckpoint
from conftest import SMALL, assert_resume_matches, mlp, plain, tensors, train_interrupted


@pytest.mark.slow
def test_run_directory_files(tmp_path):
    result = gpucore.train(dict(SMALL, run_dir=str(tmp_path), epochs=2, save_every_n_epochs=1, keep_last_k=1))
    names = sorted(os.listdir(result.checkpoint_dir))
    assert names == ["best.pt", "epoch_0002.pt", "last.pt"]
    stats = json.loads(open(result.stats_path).read())
    assert stats["status"] == "completed"
    assert [e["epoch"] for e in stats["epochs"]] == [1, 2]
    for key in ("train_loss", "val_loss", "val_accuracy", "lr", "epoch_time_s", "samples_per_s", "skipped_steps",
                "loss_scale", "gpu_memory_peak_bytes"):
        assert key in stats["epochs"][0]
    rows = [json.loads(line) for line in open(result.metrics_path)]
    assert rows == stats["epochs"]
    # where the wall time went: the epochs' steps and validations add up to the parts of seconds
    seconds = stats["seconds"]
    assert seconds["training"] == pytest.approx(sum(e["epoch_time_s"] for e in rows))
    assert seconds["validation"] == pytest.approx(sum(e["val_time_s"] for e in rows))
    assert all(0 < e["val_time_s"] < e["epoch_time_s"] * 10 for e in rows)
    assert 0 < seconds["setup"] < 60 and "report" not in seconds  # this test's runs draw no report (conftest)
    assert json.load(open(os.path.join(result.run_dir, "config.json")))["epochs"] == 2
    checkpoint = torch.load(os.path.join(result.checkpoint_dir, "last.pt"), weights_only=True)
    assert checkpoint["epoch"] == 2 and checkpoint["format"] == "gpucore-checkpoint"
    assert set(checkpoint["model"]) == set(result.model.state_dict())


@pytest.mark.slow
def test_a_second_run_never_overwrites_the_first(tmp_path):
    first = gpucore.train(dict(SMALL, run_dir=str(tmp_path), epochs=1))
    second = gpucore.train(dict(SMALL, run_dir=str(tmp_path), epochs=1))
    assert first.run_dir != second.run_dir
    assert os.path.exists(os.path.join(first.checkpoint_dir, "last.pt"))


@pytest.mark.slow
def test_resume_is_bitwise_exact(tmp_path):
    class StopAfterEpoch2:
        def on_epoch_end(self, trainer, epoch, record):
            if epoch == 2:
                raise KeyboardInterrupt

    config = dict(SMALL, epochs=4, seed=7)
    straight, stopped, resumed = assert_resume_matches(tmp_path, config, StopAfterEpoch2())
    assert len(stopped.history) == 2
    assert [r["epoch"] for r in resumed.history] == [1, 2, 3, 4]
    assert resumed.history[-1]["train_loss"] == straight.history[-1]["train_loss"]


@pytest.mark.slow
def test_interrupt_saves_and_resume_finishes(tmp_path):
    class StopInEpoch2:
        def on_log(self, trainer, step, metrics):
            if metrics["epoch"] == 2:
                raise KeyboardInterrupt

    config = dict(SMALL, run_dir=str(tmp_path), epochs=3, log_every_n_steps=5,
                  data_kwargs=dict(SMALL["data_kwargs"], train_size=512))  # 8 steps an epoch: a log at step 5
    result = train_interrupted(config, callbacks=[StopInEpoch2()])
    assert result.status == "interrupted"
    assert len(result.history) == 1
    saved = torch.load(os.path.join(result.checkpoint_dir, "interrupted.pt"), weights_only=True)
    assert saved["epoch"] == 1 and saved["samples_consumed"] == 5 * 64  # 5 steps of 64 samples
    assert json.load(open(result.stats_path))["status"] == "interrupted"
    resumed = gpucore.train(dict(config, resume="auto"))
    assert resumed.status == "completed" and len(resumed.history) == 3
    assert not os.path.exists(os.path.join(resumed.checkpoint_dir, "interrupted.pt"))


def test_checkpoint_killed_mid_write_leaves_the_previous_one(tmp_path, monkeypatch, fashion_run):
    last = str(tmp_path / "last.pt")
    shutil.copy(os.path.join(fashion_run.checkpoint_dir, "last.pt"), last)  # a run's checkpoint, after epoch 2
    before = open(last, "rb").read()

    def dying_save(payload, handle):
        handle.write(b"half a checkpoint")
        raise OSError("No space left on device")

    monkeypatch.setattr(gcheckpoint.torch, "save", dying_save)
    with pytest.raises(OSError, match="No space left"):
        gcheckpoint.save_checkpoint(last, {"model": {}})
    assert open(last, "rb").read() == before
    assert torch.load(last, weights_only=True)["epoch"] == 2
    assert [n for n in os.listdir(tmp_path) if ".tmp-" in n] == []


def test_nonfinite_losses_stop_with_an_error_and_keep_the_last_good_checkpoint(tmp_path):
    calls = {"n": 0}
    x, y = tensors(256)

    def loss(output, target):
        calls["n"] += 1
        value = nn.functional.cross_entropy(output, target)
        return value * float("nan") if calls["n"] > 8 else value  # epoch 1 (8 steps) is fine

    with pytest.raises(gpucore.TrainingError, match="non-finite"):
        gpucore.train(plain(tmp_path, epochs=3, batch_size=32, max_nonfinite_steps=3, log_every_n_steps=1,
                            name="nan"), model=mlp(), train_data=(x, y), loss=loss)
    run = tmp_path / "nan"
    assert torch.load(run / "checkpoints" / "last.pt", weights_only=True)["epoch"] == 1
    stats = json.load(open(run / "training_stats.json"))
    assert stats["status"] == "failed" and "non-finite" in stats["error"]


@pytest.mark.slow
def test_early_stopping_counts_on_across_a_resume(tmp_path):
    # min_delta 1.0: only epoch 1 is a best. Two epochs, then a resume: patience 2 is used up after epoch 3.
    config = dict(SMALL, run_dir=str(tmp_path), patience=2, min_delta=1.0, schedule="constant")  # epochs may grow
    first = gpucore.train(dict(config, epochs=2))
    assert first.status == "completed"
    resumed = gpucore.train(dict(config, epochs=6, resume="auto"))
    assert resumed.status == "early_stopped"
    assert [row["epoch"] for row in resumed.history] == [1, 2, 3] and resumed.best_epoch == 1


@pytest.mark.slow
def test_a_run_killed_before_its_first_checkpoint_is_resumed_in_the_same_directory(tmp_path):
    # What a kill before the first checkpoint leaves: the run directory with an empty checkpoints folder,
    # and a half-written checkpoint of the dead process.
    run_dir = tmp_path / "fashion_mnist_cnn"
    (run_dir / "checkpoints").mkdir(parents=True)
    dead_pid = 2**22 + 12345  # above Linux's pid_max default: no such process
    stale = run_dir / "checkpoints" / f"last.pt.tmp-{dead_pid}"
    stale.write_bytes(b"half a checkpoint")
    flat = dict(SMALL, run_dir=str(tmp_path), schedule="constant")  # a resume may add epochs
    result = gpucore.train(dict(flat, epochs=1, resume="auto"))
    assert result.run_dir == str(run_dir)
    assert not stale.exists()
    again = gpucore.train(dict(flat, epochs=2, resume="auto"))
    assert again.run_dir == str(run_dir) and [r["epoch"] for r in again.history] == [1, 2]


@pytest.mark.slow
def test_metrics_jsonl_agrees_with_the_checkpoint_after_a_resume(tmp_path):
    # schedule constant: a resume may then add epochs (a cosine schedule's length is fixed when the run starts)
    config = dict(SMALL, run_dir=str(tmp_path), epochs=2, schedule="constant")
    first = gpucore.train(dict(config, epochs=1))
    # A kill between writing epoch 2's row and its checkpoint: the row is on disk, the checkpoint is epoch 1's.
    with open(first.metrics_path, "a") as handle:
        handle.write(json.dumps({"epoch": 2, "train_loss": 0.5}) + "\n")
    resumed = gpucore.train(dict(config, resume="auto"))
    rows = [json.loads(line) for line in open(resumed.metrics_path)]
    assert [row["epoch"] for row in rows] == [1, 2]
    assert rows == json.loads(json.dumps(resumed.history))


def test_ctrl_c_during_a_checkpoint_write_waits_for_the_write_then_interrupts(tmp_path, monkeypatch):
    import signal

    from gpucore import checkpoint as gcheckpoint_module

    real_save = torch.save
    calls = []

    def save_interrupted_midway(payload, handle):
        calls.append(1)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)  # lands while the file is being written
        real_save(payload, handle)

    monkeypatch.setattr(gcheckpoint_module.torch, "save", save_interrupted_midway)
    result = train_interrupted(dict(SMALL, run_dir=str(tmp_path), epochs=2))
    assert result.status == "interrupted" and len(result.history) == 1
    for name in ("last.pt", "interrupted.pt"):
        saved = torch.load(os.path.join(result.checkpoint_dir, name), weights_only=True)
        assert saved["epoch"] == 1
    assert [f for f in os.listdir(result.checkpoint_dir) if ".tmp-" in f] == []
