"""Signals that stop a run as Ctrl-C does: SIGTERM (docker stop, systemd, Kubernetes, SLURM's preemption) and SIGUSR1
(SLURM's early warning). `gpucore train` sent one mid-epoch saves interrupted.pt at the current step, records the
run as interrupted by that signal, exits with 128 + its number, and the run resumed from there ends bitwise where an
uninterrupted run ends; after SIGUSR1 under SLURM the job is requeued and its restart resumes unasked."""
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
from conftest import assert_states_equal, rows_without_times, run_together, train_interrupted
from gpucore import signals

STEPS_PER_EPOCH = 150  # a signal after the first step checkpoint (step 10) lands mid-run: 290 steps of 10 ms left
ARGS = ["--set", "data=synthetic_fashion", "--set", f"data_kwargs={{train_size: {16 * STEPS_PER_EPOCH}, val_size: 32, "
        "seed: 3}", "--set", "epochs=2", "--set", "batch_size=16", "--set", "progress=false", "--set", "report=false",
        "--set", "loggers=[]", "--set", "checkpoint_every_n_steps=10", "--set", "seed=5",
        "--set", "model=sleepy_model:Sleepy"]
# The processes' model: its training steps take their time on the clock, not on the CPU, so the runs stay long enough
# for a signal to land mid-run while costing the CPU (shared with the other tests) next to nothing.
SLEEPY_MODEL = """
import time

from torch import nn


class Sleepy(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.linear = nn.Linear(28 * 28, num_classes)

    def forward(self, x):
        if self.training:
            time.sleep(0.01)
        return self.linear(x.flatten(1))
"""


def process_environment(run_dir, **variables):
    """The environment of the module's gpucore processes: one thread, and SLEEPY_MODEL (written to run_dir) on their
    PYTHONPATH; `variables` added."""
    (run_dir / "sleepy_model.py").write_text(SLEEPY_MODEL)
    path = os.pathsep.join(filter(None, [str(run_dir), os.environ.get("PYTHONPATH")]))
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path, **variables)


def gpucore_train(run_dir, name, *extra, env=None):
    command = [sys.executable, "-m", "gpucore", "train", *ARGS, "--set", f"run_dir={run_dir}", "--set", f"name={name}",
               *extra]
    return forked_python.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=process_environment(run_dir, **(env or {})))


def assert_resume_hint(stderr, signal_name, run_dir):
    """The hint names the run directory: run as printed, it resumes that run with its own config.json."""
    found = re.search(rf"^interrupted \({signal_name}\): resume with  gpucore train --resume (.+)$", stderr, re.MULTILINE)
    assert found, stderr[-2000:]
    assert os.path.samefile(shlex.split(found.group(1))[0], run_dir), found.group(0)


def weights(run_dir, name):
    return torch.load(os.path.join(run_dir, name, "checkpoints", "last.pt"), map_location="cpu",
                      weights_only=False)["model"]


def stats(run_dir, name):
    with open(os.path.join(run_dir, name, "training_stats.json")) as handle:
        return json.load(handle)


def uninterrupted_weights(folder, *extra):
    """The weights of the uninterrupted run of ARGS (and `extra`), which every signal's resumed run must end bitwise
    equal to."""
    straight = gpucore_train(folder, "straight", *extra)
    _, err = straight.communicate(timeout=600)
    assert straight.returncode == 0, err[-2000:]
    return weights(folder, "straight")


def process_runs(folder):
    """The `gpucore train` processes of the tests below, all at once: the uninterrupted one- and two-process
    references and each run stopped by a signal and resumed (its final weights), a Future each. Their processes mostly
    wait (the sleepy model's steps, process starts)."""
    two = ("--set", "devices=2", "--set", "device=cpu")
    return run_together(folder, {
        "one_process": (uninterrupted_weights,), "two_processes": (uninterrupted_weights, *two),
        **{("mid_epoch", signum): (signal_mid_epoch, signum) for signum in (signal.SIGTERM, signal.SIGUSR1)},
        **{("launcher", signum): (signal_to_the_launcher, signum) for signum in (signal.SIGTERM, signal.SIGINT)}})


@pytest.mark.slow
@pytest.mark.prestarted(job=process_runs)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1], ids=["SIGTERM", "SIGUSR1"])
def test_a_signal_mid_epoch_checkpoints_exits_128_plus_it_and_the_resumed_run_is_bitwise_the_uninterrupted(
        signum, prestarted):
    assert_states_equal(prestarted["mid_epoch", signum].result(), prestarted["one_process"].result(),
                        label="resumed != uninterrupted")


def signal_mid_epoch(tmp_path, signum):
    """`gpucore train` (under SLURM's variables) sent `signum` mid-epoch and resumed: its final weights."""
    # SLURM's variables of a batch job, and an scontrol that records how it was called.
    calls = tmp_path / "scontrol_calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n")
    (bin_dir / "scontrol").chmod(0o755)
    slurm = {"SLURM_JOB_ID": "4242", "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}

    run = gpucore_train(tmp_path, "stopped", env=slurm)
    step_checkpoint = tmp_path / "stopped" / "checkpoints" / "step.pt"
    deadline = time.monotonic() + 300
    while not step_checkpoint.exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert run.poll() is None, "the run ended before the signal: " + run.stderr.read()[-2000:]
    run.send_signal(signum)
    code = run.wait(timeout=300)
    stderr = run.stderr.read()
    name = signal.Signals(signum).name
    assert code == 128 + int(signum), stderr[-2000:]
    recorded = stats(tmp_path, "stopped")
    assert recorded["status"] == "interrupted" and recorded["stopped_by"] == name
    assert 10 <= recorded["steps"] < 2 * STEPS_PER_EPOCH  # stopped mid-run, after the first step checkpoint
    assert (tmp_path / "stopped" / "checkpoints" / "interrupted.pt").is_file()
    assert_resume_hint(stderr, name, tmp_path / "stopped")
    assert "Traceback" not in stderr

    if signum == signal.SIGUSR1:  # requeued; the requeued job starts with SLURM_RESTART_COUNT=1 and resumes unasked
        assert calls.read_text().split() == ["requeue", "4242"]
        assert "SLURM job 4242 requeued" in stderr
        resumed = gpucore_train(tmp_path, "stopped", env=dict(slurm, SLURM_RESTART_COUNT="1"))
    else:
        assert not calls.exists()
        resumed = gpucore_train(tmp_path, "stopped", "--resume", "auto")
    assert resumed.wait(timeout=600) == 0
    resumed_stderr = resumed.stderr.read()
    if signum == signal.SIGUSR1:
        assert "SLURM restart 1 (SLURM_RESTART_COUNT) implies resume: auto; resuming from" in resumed_stderr
    assert stats(tmp_path, "stopped")["steps"] == 2 * STEPS_PER_EPOCH
    return weights(tmp_path, "stopped")


def test_exit_codes_are_128_plus_the_signal():
    assert signals.exit_code("SIGINT") == 130 and signals.exit_code(None) == 130
    assert signals.exit_code("SIGTERM") == 143 and signals.exit_code("SIGUSR1") == 128 + signal.SIGUSR1


def test_a_stop_signal_inside_a_deferred_block_waits_for_the_block():
    done = []
    with pytest.raises(signals.Stopped) as caught, signals.StepBoundaries().installed():
        with signals.interrupts_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the signal has arrived; the block goes on
            done.append(True)
    assert done == [True] and caught.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the default handler is back


def test_a_program_that_handles_sigterm_itself_keeps_its_handler():
    received = []
    previous = signal.signal(signal.SIGTERM, lambda number, frame: received.append(number))
    try:
        with signals.StepBoundaries().installed():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
        assert received == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def in_process_run(tmp_path, train_size=64 * 12, **keys):
    """The config of the in-process runs below: 64-sample batches of synthetic_fashion on the CPU, 2 epochs, nothing
    drawn or logged; `keys` change or add keys."""
    return {"data": "synthetic_fashion", "data_kwargs": {"train_size": train_size, "val_size": 64, "seed": 3},
            "epochs": 2, "batch_size": 64, "progress": False, "report": False, "loggers": [], "seed": 5,
            "run_dir": str(tmp_path), "cuda_graphs": False, "device": "cpu", **keys}


class SignalInsideTheForward(torch.nn.Module):
    """Sends `signum` to this process in the middle of the `at`-th forward, after BatchNorm has updated its running
    statistics: where a signal landing inside a step does the most harm."""

    def __init__(self, signum=None, at=0):
        super().__init__()
        torch.manual_seed(0)
        self.features = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
        self.head = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(2), torch.nn.Flatten(), torch.nn.Linear(16, 10))
        self.signum, self.at, self.calls = signum, at, 0

    def forward(self, x):
        x = self.features(x)
        if self.training:
            self.calls += 1
            if self.calls == self.at:
                os.kill(os.getpid(), self.signum)
        return self.head(x)


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory):
    """straight_run(accumulate): the uninterrupted run of in_process_run's config with accumulate_grad_batches
    `accumulate`, trained once for the module: what each stopped and resumed run of that config must end equal to."""
    import gpucore

    runs = {}

    def run(accumulate):
        if accumulate not in runs:
            config = in_process_run(tmp_path_factory.mktemp("straight"), accumulate_grad_batches=accumulate)
            runs[accumulate] = gpucore.train(dict(config, name="straight"), model=SignalInsideTheForward())
        return runs[accumulate]

    return run


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("accumulate", [1, 2])
def test_a_signal_inside_a_step_waits_for_the_step_and_the_resume_is_bitwise(tmp_path, signum, accumulate,
                                                                             straight_run):
    config = in_process_run(tmp_path, accumulate_grad_batches=accumulate)
    import gpucore

    straight = straight_run(accumulate)
    at = 12 + 5  # the 5th micro-batch of the second epoch: inside an optimizer step when accumulating
    stopped = train_interrupted(dict(config, name="stopped"), model=SignalInsideTheForward(signum, at))
    assert stopped.status == "interrupted" and stopped.stopped_by == signal.Signals(signum).name
    saved = torch.load(tmp_path / "stopped" / "checkpoints" / "interrupted.pt", map_location="cpu", weights_only=False)
    # The step the signal landed in was finished: BatchNorm counted exactly the micro-batches of the steps taken.
    assert int(saved["model"]["features.1.num_batches_tracked"]) == stopped.steps * accumulate
    assert stopped.steps == 12 // accumulate + -(-5 // accumulate)
    resumed = gpucore.train(dict(config, name="stopped", resume="auto"), model=SignalInsideTheForward())
    assert resumed.steps == straight.steps
    assert_states_equal(resumed.model, straight.model, label="resumed != uninterrupted")


def test_a_signal_in_the_last_step_of_an_epoch_with_a_short_last_batch_resumes_at_the_next_epoch(tmp_path):
    """The last step's callback raises the signal before the engine returns: the epoch's steps are all taken, so
    interrupted.pt holds the next epoch's start, not steps x batch samples (past the end of a short last batch)."""
    import gpucore

    config = in_process_run(tmp_path, 64 * 12 + 20, epochs=3,
                            checkpoint_every_n_steps=100)  # step checkpoints on: the engine calls back after every step
    straight = gpucore.train(dict(config, name="straight"), model=SignalInsideTheForward())
    stopped = train_interrupted(dict(config, name="stopped"), model=SignalInsideTheForward(signal.SIGTERM, 13 + 13))
    assert stopped.status == "interrupted" and stopped.steps == 26
    saved = torch.load(tmp_path / "stopped" / "checkpoints" / "interrupted.pt", map_location="cpu", weights_only=True)
    assert (saved["epoch"], saved["samples_consumed"]) == (2, 0)
    # The epoch's row was not written yet: the checkpoint keeps its training part, which the resume validates and
    # records before it trains epoch 3.
    assert [row["epoch"] for row in saved["history"]] == [1]
    assert rows_without_times([saved["unrecorded_row"]]) == rows_without_times(
        [{k: v for k, v in straight.history[1].items() if k in saved["unrecorded_row"]}])
    resumed = gpucore.train(dict(config, name="stopped", resume="auto"), model=SignalInsideTheForward())
    assert resumed.status == "completed" and resumed.steps == straight.steps == 39
    assert_states_equal(resumed.model, straight.model, label="resumed != uninterrupted")
    assert rows_without_times(resumed.history) == rows_without_times(straight.history)
    with open(tmp_path / "stopped" / "metrics.jsonl", encoding="utf-8") as rows:
        assert rows_without_times(rows) == rows_without_times(straight.history)


class SignalInValidation(SignalInsideTheForward):
    """SignalInsideTheForward's net (the same weights), sending `signum` to this process in its first forward in eval
    mode after `trained` training forwards: in the validation after them, once the epoch's pass is done and before
    its row is written (not in the set-up's probe of the model, before training)."""

    def __init__(self, signum=None, trained=0):
        super().__init__()
        self.signum, self.trained, self.sent = signum, trained, False

    def forward(self, x):
        if not self.training and self.signum is not None and self.calls == self.trained and not self.sent:
            self.sent = True
            os.kill(os.getpid(), self.signum)
        return super().forward(x)


@pytest.mark.parametrize("signum,epoch", [(signal.SIGTERM, 1), (signal.SIGINT, 2)], ids=["SIGTERM-1", "SIGINT-2"])
def test_a_signal_in_validation_keeps_the_epochs_row_to_write_and_the_resume_validates_and_records_it(
        tmp_path, signum, epoch, straight_run):
    """Validated once per epoch (64 samples: one batch), so the signal lands in epoch `epoch`'s validation: its steps
    are done, its row is not written. The resumed run writes every epoch's row as the uninterrupted run does (its
    best.pt saw every epoch), and ends bitwise equal to it."""
    import gpucore

    config = in_process_run(tmp_path)
    straight = straight_run(1)
    stopped = train_interrupted(dict(config, name="stopped"), model=SignalInValidation(signum, trained=12 * epoch))
    assert stopped.status == "interrupted" and stopped.steps == 12 * epoch
    saved = torch.load(tmp_path / "stopped" / "checkpoints" / "interrupted.pt", map_location="cpu", weights_only=True)
    assert (saved["epoch"], saved["samples_consumed"]) == (epoch, 0)
    assert len(saved["history"]) == epoch - 1 and saved["unrecorded_row"]["epoch"] == epoch
    assert not any(key.startswith("val_") for key in saved["unrecorded_row"])
    resumed = gpucore.train(dict(config, name="stopped", resume="auto"), model=SignalInValidation())
    assert resumed.status == "completed" and resumed.steps == straight.steps == 24
    assert rows_without_times(resumed.history) == rows_without_times(straight.history)
    with open(tmp_path / "stopped" / "metrics.jsonl", encoding="utf-8") as rows:
        assert rows_without_times(rows) == rows_without_times(straight.history)
    assert (resumed.best_epoch, resumed.best_metric) == (straight.best_epoch, straight.best_metric)
    assert_states_equal(resumed.model, straight.model, label="resumed != uninterrupted")
    assert not (tmp_path / "stopped" / "checkpoints" / "interrupted.pt").exists()  # last.pt superseded it


class SignalAtEpochEnd(gpucore.Callback):
    """Sends `signum` to this process in its on_epoch_end of epoch `epoch`: amid the epoch's end, between the row and
    the checkpoints (ModelCheckpoint's hook comes after the user's)."""

    def __init__(self, signum, epoch):
        self.signum, self.epoch = signum, epoch

    def on_epoch_end(self, trainer, epoch, record):
        if epoch == self.epoch:
            os.kill(os.getpid(), self.signum)


def test_a_signal_amid_the_epochs_end_waits_for_its_checkpoints_and_stops_at_the_next_epochs_start(
        tmp_path, straight_run):
    import gpucore

    config = in_process_run(tmp_path)
    straight = straight_run(1)
    stopped = train_interrupted(dict(config, name="stopped"), model=SignalInsideTheForward(),
                                callbacks=[SignalAtEpochEnd(signal.SIGTERM, 1)])
    assert stopped.status == "interrupted" and stopped.stopped_by == "SIGTERM" and stopped.steps == 12
    checkpoints = tmp_path / "stopped" / "checkpoints"
    saved = torch.load(checkpoints / "interrupted.pt", map_location="cpu", weights_only=True)
    last = torch.load(checkpoints / "last.pt", map_location="cpu", weights_only=True)
    assert (saved["epoch"], saved["samples_consumed"], last["epoch"]) == (1, 0, 1)
    assert "unrecorded_row" not in saved and [row["epoch"] for row in saved["history"]] == [1]
    resumed = gpucore.train(dict(config, name="stopped", resume="auto"), model=SignalInsideTheForward())
    assert rows_without_times(resumed.history) == rows_without_times(straight.history)
    assert_states_equal(resumed.model, straight.model, label="resumed != uninterrupted")
    # At the last epoch's end nothing is left to stop: the run completes, as it would have.
    ended = gpucore.train(dict(config, name="ended"), model=SignalInsideTheForward(),
                          callbacks=[SignalAtEpochEnd(signal.SIGTERM, 2)])
    assert ended.status == "completed" and rows_without_times(ended.history) == rows_without_times(straight.history)
    assert not (tmp_path / "ended" / "checkpoints" / "interrupted.pt").exists()


def test_requeue_outside_slurm_does_nothing_and_without_scontrol_says_so(monkeypatch, tmp_path):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    assert signals.requeue_slurm_job() is None
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol there
    assert signals.requeue_slurm_job() == ("SLURM job 7: scontrol is not on PATH, so the job was not requeued; "
                                           "resubmit it to resume")


def children_of(pid):
    """The PIDs whose parent is `pid` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    if int(handle.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return found


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as handle:  # a zombie (exited, not yet reaped by anyone) counts as gone
        return handle.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the process tree from /proc")
@pytest.mark.prestarted(job=process_runs)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_the_devices_2_launcher_stops_both_workers_cleanly(signum, prestarted):
    resumed = prestarted["launcher", signum].result()
    if signum == signal.SIGTERM:  # resumed as the hint says, two processes again, it ends where an uninterrupted
        # two-process run ends, bitwise
        assert_states_equal(resumed, prestarted["two_processes"].result(), label="resumed")


def signal_to_the_launcher(tmp_path, signum):
    """A `devices: 2` run whose launcher is sent `signum`; after SIGTERM resumed as its hint says: its final weights
    (None after SIGINT)."""
    two = ["--set", "devices=2", "--set", "device=cpu"]
    run = gpucore_train(tmp_path, "stopped", *two)
    step_checkpoint = tmp_path / "stopped" / "checkpoints" / "step.pt"
    deadline = time.monotonic() + 300
    while not step_checkpoint.exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert run.poll() is None, "the run ended before the signal: " + run.stderr.read()[-2000:]
    workers = children_of(run.pid)
    assert len(workers) == 2
    run.send_signal(signum)  # to the launcher alone, as kill PID does
    code = run.wait(timeout=300)
    stderr = run.stderr.read()
    name = signal.Signals(signum).name
    assert code == 128 + int(signum), stderr[-2000:]
    assert not [pid for pid in workers if alive(pid)], "a worker outlived its launcher"
    assert "gpucore: batch 16 per process x 2 processes" in stderr  # rank 0's output reached the terminal
    assert_resume_hint(stderr, name, tmp_path / "stopped")
    assert "Traceback" not in stderr
    recorded = stats(tmp_path, "stopped")
    assert recorded["status"] == "interrupted" and recorded["stopped_by"] == name
    assert (tmp_path / "stopped" / "checkpoints" / "interrupted.pt").is_file()
    if signum == signal.SIGTERM:  # resumed as the hint says, two processes again
        resumed = forked_python.Popen([sys.executable, "-m", "gpucore", "train", "--resume", str(tmp_path / "stopped")],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env=process_environment(tmp_path))
        _, resumed_stderr = resumed.communicate(timeout=600)
        assert resumed.returncode == 0, resumed_stderr[-2000:]
        assert "per process x 2 processes" in resumed_stderr
        assert stats(tmp_path, "stopped")["world_size"] == 2
        return weights(tmp_path, "stopped")
    return None


class SignalAgainWhileSaving(SignalInsideTheForward):
    """SignalInsideTheForward, then the same signal once more while the stopped run takes its interrupted.pt snapshot
    (the model's first state_dict after the first signal): a second Ctrl-C, or `timeout` and container runtimes that
    send SIGTERM to the process and to its group."""

    def __init__(self, signum, at):
        super().__init__(signum, at)
        self.sent_again = False

    def state_dict(self, *args, **kwargs):
        if self.signum is not None and self.calls >= self.at and not self.sent_again:
            self.sent_again = True
            os.kill(os.getpid(), self.signum)
        return super().state_dict(*args, **kwargs)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_the_same_signal_again_while_interrupted_pt_is_written_does_not_lose_it(tmp_path, signum, straight_run):
    config = in_process_run(tmp_path, accumulate_grad_batches=1)
    import gpucore

    straight = straight_run(1)
    model = SignalAgainWhileSaving(signum, 5)
    stopped = train_interrupted(dict(config, name="stopped"), model=model)
    assert model.sent_again and stopped.status == "interrupted" and stopped.steps == 5
    saved = torch.load(tmp_path / "stopped" / "checkpoints" / "interrupted.pt", map_location="cpu", weights_only=False)
    assert int(saved["model"]["features.1.num_batches_tracked"]) == 5
    resumed = gpucore.train(dict(config, name="stopped", resume="auto"), model=SignalAgainWhileSaving(None, 0))
    assert resumed.steps == straight.steps
    assert_states_equal(resumed.model, straight.model, label="resumed != uninterrupted")


def test_a_signal_while_the_next_epochs_batches_start_saves_the_epochs_start(tmp_path, monkeypatch, straight_run):
    """A signal while the next epoch's batch source starts (before its first step; a streamed source starting its
    readers): interrupted.pt holds that epoch's start, the run is interrupted (not failed), the resume is bitwise."""
    import gpucore
    from gpucore.data.epoch_data import EpochData

    config = in_process_run(tmp_path, accumulate_grad_batches=1)
    straight = straight_run(1)
    starting = EpochData.epoch

    def epoch_then_signal(self, epoch, *args, **kwargs):
        source = starting(self, epoch, *args, **kwargs)
        if epoch == 1 and self.plan.training:
            os.kill(os.getpid(), signal.SIGTERM)
        return source

    monkeypatch.setattr(EpochData, "epoch", epoch_then_signal)
    stopped = train_interrupted(dict(config, name="stopped"), model=SignalInsideTheForward())
    monkeypatch.undo()
    assert stopped.status == "interrupted" and stopped.stopped_by == "SIGTERM" and stopped.steps == 12
    saved = torch.load(tmp_path / "stopped" / "checkpoints" / "interrupted.pt", map_location="cpu", weights_only=False)
    assert (saved["epoch"], saved["samples_consumed"]) == (1, 0)
    resumed = gpucore.train(dict(config, name="stopped", resume="auto"), model=SignalInsideTheForward())
    assert resumed.steps == straight.steps
    assert_states_equal(resumed.model, straight.model, label="resumed != uninterrupted")
