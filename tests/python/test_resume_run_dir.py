"""Resume that resumes what you ran: the hint `gpucore train` prints after Ctrl-C, run as printed, continues the same
run directory with the run's own config (its --set overrides included) and ends bitwise where the uninterrupted run
ends; a resume says on stderr what it continues from; --resume RUN_DIR refuses --set keys that change what the run
is, and a resume refuses another epochs under a schedule spread over the run (cosine, onecycle); config.json keeps
the values the run uses."""
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest
import torch

import gpucore
import forked_python
from conftest import assert_states_equal, gpucore_command

STEPS_PER_EPOCH, BATCH = 100, 16  # Ctrl-C after the first step checkpoint (step 10) lands mid-run: 190 steps left
OVERRIDES = {"data": "synthetic_fashion",
             "data_kwargs": f"{{train_size: {BATCH * STEPS_PER_EPOCH}, val_size: 64, seed: 3}}",
             "model": "resume_models:mlp", "batch_size": str(BATCH), "epochs": "2", "progress": "false",
             "report": "false", "loggers": "[]", "device": "cpu", "checkpoint_every_n_steps": "10", "seed": "5"}
TINY = {"data": "synthetic_fashion", "data_kwargs": {"train_size": 256, "val_size": 64, "seed": 3}, "batch_size": 64,
        "epochs": 2, "progress": False, "report": False, "loggers": [], "device": "cpu", "seed": 5}
ENV = dict(os.environ, OMP_NUM_THREADS="1")
# A model without BatchNorm: a signal can land inside a forward pass, after a BatchNorm layer counted the batch
# (num_batches_tracked) of a step that is then not taken, which a resume from interrupted.pt would keep. Its training
# steps take 10 ms on the clock, not on the CPU: the run lasts long enough for Ctrl-C to land mid-run, cheaply.
MODELS = """import time

import torch.nn as nn
import torch


class Slow(nn.Sequential):
    def forward(self, x):
        if self.training:
            time.sleep(0.01)
        return super().forward(x)


def mlp():
    torch.manual_seed(0)
    return Slow(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
"""


def gpucore_cli(cwd, *args):
    return forked_python.Popen([sys.executable, "-m", "gpucore", *args], cwd=cwd, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=ENV)


def sets(name, **extra):
    pairs = dict(OVERRIDES, name=name, **extra)
    return [arg for key, value in pairs.items() for arg in ("--set", f"{key}={value}")]


def model_of(run_dir):
    return torch.load(os.path.join(run_dir, "checkpoints", "last.pt"), map_location="cpu", weights_only=False)["model"]


def printed_hint(stderr):
    """The command `resume with` names, as an argument list for this Python."""
    found = re.search(r"^interrupted \(SIGINT\): resume with  (gpucore train .*)$", stderr, re.MULTILINE)
    assert found, stderr[-2000:]
    words = shlex.split(found.group(1))
    return words[2:]  # after "gpucore train"


def test_the_printed_hint_resumes_the_same_run_bitwise_and_says_from_where(tmp_path):
    (tmp_path / "resume_models.py").write_text(MODELS)  # importable by the runs, started in tmp_path
    straight = gpucore_cli(tmp_path, "train", *sets("straight"))
    assert straight.wait(timeout=300) == 0, straight.stderr.read()[-2000:]

    run = gpucore_cli(tmp_path, "train", *sets("fmi"))
    step_checkpoint = tmp_path / "runs" / "fmi" / "checkpoints" / "step.pt"
    deadline = time.monotonic() + 120
    while not step_checkpoint.exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert run.poll() is None, "the run ended before Ctrl-C: " + run.stderr.read()[-2000:]
    run.send_signal(signal.SIGINT)
    stderr = run.stderr.read()
    assert run.wait(timeout=120) == 130, stderr[-2000:]
    config_before = (tmp_path / "runs" / "fmi" / "config.json").read_bytes()

    hint = printed_hint(stderr)
    assert hint == ["--resume", os.path.join("runs", "fmi")], hint  # the run directory, not a new default run
    resumed = gpucore_cli(tmp_path, "train", *hint)
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err[-2000:]
    assert json.loads(out)["run_dir"] == str(tmp_path / "runs" / "fmi")
    assert sorted(os.listdir(tmp_path / "runs")) == ["fmi", "straight"]  # no fmi-2, no fashion_mnist_cnn
    interrupted = os.path.join("runs", "fmi", "checkpoints", "interrupted.pt")
    line = re.search(rf"^gpucore: resuming from {re.escape(interrupted)}: epoch (\d) of 2, after (\d+) of its "
                     r"samples, optimizer step (\d+)$", err, re.MULTILINE)
    assert line, err[-2000:]
    epoch, samples, step = (int(group) for group in line.groups())
    assert (epoch - 1) * STEPS_PER_EPOCH + samples // BATCH == step and 0 < step < 2 * STEPS_PER_EPOCH
    assert (tmp_path / "runs" / "fmi" / "config.json").read_bytes() == config_before
    stats = json.load(open(tmp_path / "runs" / "fmi" / "training_stats.json"))
    assert stats["status"] == "completed" and stats["steps"] == 2 * STEPS_PER_EPOCH
    assert stats["resume"]["from"] == interrupted and stats["resume"]["samples_consumed"] == samples
    assert_states_equal(model_of(tmp_path / "runs" / "fmi"), model_of(tmp_path / "runs" / "straight"),
                        label="resumed != uninterrupted")


def test_resume_run_dir_refuses_another_epochs_under_cosine_and_keys_that_change_the_run(tmp_path, capsys):
    first = gpucore.train(dict(TINY, run_dir=str(tmp_path), name="done"))
    config_path = os.path.join(first.run_dir, "config.json")
    config_before = open(config_path, "rb").read()

    longer = gpucore_command(capsys, "train", "--resume", first.run_dir, "--set", "epochs=3")
    err = longer.stderr
    assert longer.returncode == 2, err[-2000:]
    assert "config key 'epochs'" in err and "epochs 2, this resume has epochs 3" in err
    assert "schedule cosine" in err and "Keep epochs 2" in err and "pretrained:" in err and "Traceback" not in err
    with pytest.raises(gpucore.ConfigError, match="config key 'epochs'.*epochs 2, this resume has epochs 3"):
        gpucore.train(dict(TINY, run_dir=str(tmp_path), name="done", epochs=3, resume="auto"))

    other = gpucore_command(capsys, "train", "--resume", first.run_dir, "--set", "lr=0.1")
    err = other.stderr
    assert other.returncode == 2, err[-2000:]
    assert "--set lr:" in err and "the run's own lr (0.001" in err and "epochs, device" in err and "pretrained=" in err

    with_file = gpucore_command(capsys, "train", config_path, "--resume", first.run_dir)
    err = with_file.stderr
    assert with_file.returncode == 2 and "leave out the config file" in err, err[-2000:]
    assert open(config_path, "rb").read() == config_before


def test_a_constant_schedule_resumes_with_more_epochs_and_another_batch_size_is_refused(tmp_path, capsys):
    config = dict(TINY, run_dir=str(tmp_path), name="flat", schedule="constant")
    first = gpucore.train(config)
    written = json.load(open(os.path.join(first.run_dir, "config.json")))
    # A config that gives another batch size: refused as --resume RUN_DIR refuses it, nothing written.
    with pytest.raises(gpucore.ConfigError, match=r"config key 'batch_size': resume: auto goes on with the run's own "
                                                  r"batch_size \(64 in checkpoint '.*last.pt'\), not 128"):
        gpucore.train(dict(config, epochs=3, batch_size=128, resume="auto"))
    assert json.load(open(os.path.join(first.run_dir, "config.json"))) == written
    longer = gpucore.train(dict(config, epochs=3, resume="auto"))
    assert longer.run_dir == first.run_dir and [row["epoch"] for row in longer.history] == [1, 2, 3]
    assert json.load(open(os.path.join(first.run_dir, "training_stats.json")))["batch"]["per_process"] == 64
    assert json.load(open(os.path.join(first.run_dir, "config.json"))) == dict(written, epochs=3)
    assert_one_recorded_config(first.run_dir)

    cli = gpucore_command(capsys, "train", "--resume", first.run_dir, "--set", "epochs=4")
    err = cli.stderr
    assert cli.returncode == 0, err[-2000:]
    assert "resuming from " in err and "epoch 4 of 4, from its start, optimizer step 12" in err  # 4 steps an epoch
    assert [row["epoch"] for row in map(json.loads, open(os.path.join(first.run_dir, "metrics.jsonl")))] == [1, 2, 3, 4]
    assert json.load(open(os.path.join(first.run_dir, "config.json"))) == dict(written, epochs=4)
    assert_one_recorded_config(first.run_dir)


def assert_one_recorded_config(run_dir):
    """config.json, training_stats.json's config and the last checkpoint's hold the same values: after a resume, the
    run's first `resume` (how a start was asked for is not what the run is) and the resumed run's epochs."""
    recorded = json.load(open(os.path.join(run_dir, "config.json")))
    assert recorded["resume"] is None and recorded["epochs"] > 2
    assert json.load(open(os.path.join(run_dir, "training_stats.json")))["config"] == recorded
    assert torch.load(os.path.join(run_dir, "checkpoints", "last.pt"), weights_only=True)["config"] == recorded
