"""Mid-epoch step checkpoints (checkpoint_every_n_steps, checkpoint_every_minutes) and resuming at another world size.

A step checkpoint holds the state after one optimizer step, written in the background; a run resumed from it ends
bitwise where an uninterrupted run ends (CPU). Its data position is the samples consumed of the epoch's order over
all ranks, so a run checkpointed by 2 gloo processes goes on with 1 (and 1 with 2), each sample of the epoch
trained exactly once. Longer random kill trials: `python tests/trials/kill_runs.py --step-checkpoints 2`."""
import errno
import json
import os
import subprocess
import sys
import textwrap
import time
import types

import pytest
import torch
from torch import nn

import gpucore
from gpucore import _C, checkpoint
from gpucore.errors import TrainingError
from gpucore.training import distributed

import forked_python
from conftest import assert_states_equal, kill_trials, run_together

SAMPLES, BATCH = 256, 8
# The kill tests compare subprocess runs (OMP_NUM_THREADS=1) with the in-process `uninterrupted` run.
pytestmark = pytest.mark.usefixtures("one_thread")


def tensors(samples=SAMPLES, ids=False):
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(samples, 1, 8, 8, generator=generator), torch.randint(0, 10, (samples,), generator=generator)
    if ids:
        x[:, 0, 0, 0] = torch.arange(samples, dtype=torch.float32)  # each sample's id, seen by the model
    return x, y


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.Tanh(), nn.Dropout(0.2), nn.Linear(32, 10))


def config(tmp_path, **overrides):
    # Dropout, shuffling, momentum and a cosine schedule: a resume that missed the RNG, the order, the optimizer
    # state or the step count would not end bitwise equal.
    base = dict(epochs=2, batch_size=BATCH, optimizer="sgd", momentum=0.9, lr=0.05, schedule="cosine", shuffle=True,
                normalize=False, progress=False, run_dir=str(tmp_path), name="run", val_fraction=0.0, device="cpu",
                precision="32", report=False, log_every_n_steps=1)
    base.update(overrides)
    return base


class Positions(gpucore.Callback):
    """(epoch, samples consumed) of each checkpoint the run writes."""

    def __init__(self):
        self.saved = []

    def on_save_checkpoint(self, trainer, payload):
        self.saved.append((payload["epoch"], payload["samples_consumed"]))


class StopAt(gpucore.Callback):
    """Ends the run with an error after optimizer step `step` (counted over the run), as a crash would."""

    def __init__(self, step):
        self.step = step

    def on_log(self, trainer, step, metrics):
        if step == self.step:
            raise RuntimeError("stopped by the test")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, one_thread):
    return gpucore.train(config(tmp_path_factory.mktemp("uninterrupted")), model=mlp(), train_data=tensors())


def test_every_n_steps_a_step_checkpoint_then_the_epochs_checkpoint_replaces_it(tmp_path, uninterrupted):
    positions = Positions()
    result = gpucore.train(config(tmp_path, checkpoint_every_n_steps=5), model=mlp(), train_data=tensors(),
                           callbacks=[positions])
    steps = SAMPLES // BATCH  # 32 a epoch: step checkpoints after 5, 10, ..., 30; the 32nd is the epoch's end
    expected = []
    for epoch in range(2):
        expected += [(epoch, step * BATCH) for step in range(5, steps, 5)] + [(epoch + 1, 0)]
    assert positions.saved == expected
    stats = json.load(open(result.stats_path))
    assert stats["step_checkpoints"] == 12
    assert sorted(os.listdir(result.checkpoint_dir)) == ["best.pt", "last.pt"]  # step.pt superseded by last.pt
    assert_states_equal(result.model, uninterrupted.model)  # checkpoints change nothing in training


def test_on_train_step_end_runs_before_the_step_checkpoint_of_its_step(tmp_path):
    """With step checkpoints on too, the per-step hook runs once a step, before the step's checkpoint is taken, so
    that the checkpoint holds the callbacks' state after the step."""

    class Steps(gpucore.Callback):
        def __init__(self):
            self.steps, self.at_save = [], []

        def on_train_step_end(self, trainer, step):
            self.steps.append(step)

        def on_save_checkpoint(self, trainer, payload):
            self.at_save.append((payload["samples_consumed"] // BATCH, self.steps[-1]))

    steps = Steps()
    gpucore.train(config(tmp_path, epochs=1, checkpoint_every_n_steps=5), model=mlp(), train_data=tensors(),
                  callbacks=[steps])
    per_epoch = SAMPLES // BATCH
    assert steps.steps == list(range(1, per_epoch + 1))
    assert steps.at_save == [(step, step) for step in range(5, per_epoch, 5)] + [(0, per_epoch)]


def test_every_minutes_on_the_clock_of_rank_0(tmp_path):
    positions = Positions()
    gpucore.train(config(tmp_path, epochs=1, checkpoint_every_minutes=1e-9), model=mlp(), train_data=tensors(),
                  callbacks=[positions])
    # Due after every step; the epoch's last step has the end-of-epoch checkpoint instead.
    assert positions.saved == [(0, step * BATCH) for step in range(1, SAMPLES // BATCH)] + [(1, 0)]


def test_a_crash_mid_epoch_resumes_from_the_step_checkpoint_bitwise(tmp_path, uninterrupted):
    settings = config(tmp_path, checkpoint_every_n_steps=5)
    with pytest.raises(RuntimeError, match="stopped by the test"):
        gpucore.train(settings, model=mlp(), train_data=tensors(), callbacks=[StopAt(32 + 12)])  # epoch 2, step 12
    checkpoints = os.path.join(tmp_path, "run", "checkpoints")
    saved = torch.load(os.path.join(checkpoints, "step.pt"), weights_only=True)
    assert (saved["epoch"], saved["samples_consumed"], saved["world_size"]) == (1, 10 * BATCH, 1)
    resumed = gpucore.train(dict(settings, resume="auto"), model=mlp(), train_data=tensors())
    assert_states_equal(resumed.model, uninterrupted.model)
    stats = json.load(open(resumed.stats_path))
    assert stats["resume"]["from"].endswith("step.pt") and stats["resume"]["samples_consumed"] == 80
    assert stats["steps"] == uninterrupted.steps == 64
    assert [row["epoch"] for row in resumed.history] == [1, 2]
    # Epoch 1's row comes from the checkpoint; epoch 2's training metrics go on from the sums of its 10 steps before
    # the crash, which the step checkpoint holds: both rows are the uninterrupted run's, bit for bit.
    for resumed_row, row in zip(resumed.history, uninterrupted.history):
        assert {k: v for k, v in resumed_row.items() if k.startswith("train_")} == \
               {k: v for k, v in row.items() if k.startswith("train_")}


def test_a_checkpoint_of_an_older_gpucore_counting_batches_per_rank_still_resumes(tmp_path, uninterrupted):
    settings = config(tmp_path, checkpoint_every_n_steps=7)
    with pytest.raises(RuntimeError):
        gpucore.train(settings, model=mlp(), train_data=tensors(), callbacks=[StopAt(9)])
    saved = torch.load(os.path.join(tmp_path, "run", "checkpoints", "step.pt"), weights_only=True)
    old = {key: value for key, value in saved.items() if key not in ("samples_consumed", "world_size")}
    old["position"] = 7  # batches of this rank, as checkpoints were before samples_consumed
    old_path = str(tmp_path / "old.pt")
    torch.save(old, old_path)
    resumed = gpucore.train(dict(settings, name="old", resume=old_path), model=mlp(), train_data=tensors())
    assert json.load(open(resumed.stats_path))["resume"]["samples_consumed"] == 7 * BATCH
    assert_states_equal(resumed.model, uninterrupted.model)


@pytest.mark.parametrize("world_size, first_sample", [(1, 0), (1, 37), (2, 0), (2, 48), (2, 50), (3, 37), (3, 49)])
def test_the_rest_of_an_epoch_is_sharded_from_any_sample(world_size, first_sample):
    """Rank r serves rest[r::W] of the epoch's order from `first_sample` on, wrapped from the order's start to equal
    shards; with the same world size this is the old shard with its first batches skipped."""
    samples, batch = 50, 4
    inputs, targets = torch.arange(samples, dtype=torch.float32).reshape(samples, 1), torch.zeros(samples).long()

    def served(rank, world, first, skip=0):
        source = _C.TensorBatches(inputs, targets, batch, True, False, 7, torch.device("cpu"))
        source.set_shard(rank, world, first)
        source.start_epoch(3, skip)
        ids = []
        while (pair := source.next()) is not None:
            ids += pair[0][:, 0].long().tolist()
        return ids

    order = served(0, 1, 0)
    assert sorted(order) == list(range(samples))
    first = first_sample
    rest = order[first:]
    padded = rest + order[:-len(rest) % world_size]
    for rank in range(world_size):
        assert served(rank, world_size, first) == padded[rank::world_size]
    if first_sample % (batch * world_size) == 0:
        for rank in range(world_size):
            assert served(rank, world_size, first) == served(rank, world_size, 0, first_sample // (batch * world_size))


WORKER = textwrap.dedent("""
    import json, os, sys
    import torch, gpucore
    from torch import nn

    out, attempt, stop_step = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rank = int(os.environ.get("RANK", "0"))
    trained = []  # (epoch, sample id) of every training forward of this process

    class Recording(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 10))

        def forward(self, x):
            if self.training:
                trained.extend((epoch[0], int(i)) for i in x[:, 0, 0, 0].tolist())
            return self.net(x)

    epoch = [0]

    class Track(gpucore.Callback):
        def on_epoch_start(self, trainer, number):
            epoch[0] = number - 1

        def on_log(self, trainer, step, metrics):
            if step == stop_step:
                raise RuntimeError("stopped by the test")

    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(%(samples)d, 1, 8, 8, generator=generator), torch.randint(0, 10, (%(samples)d,), generator=generator)
    x[:, 0, 0, 0] = torch.arange(%(samples)d, dtype=torch.float32)
    config = dict(epochs=2, batch_size=%(batch)d, optimizer="adamw", lr=0.01, schedule="cosine", warmup_epochs=0.5,
                  shuffle=True, normalize=False, progress=False, run_dir=out, name="run", val_fraction=0.0,
                  device="cpu", precision="32", report=False, log_every_n_steps=1, checkpoint_every_n_steps=3,
                  resume="auto", lr_scaling="linear", base_batch_size=%(batch)d)
    status = "completed"
    try:
        result = gpucore.train(config, model=Recording(), train_data=(x, y), callbacks=[Track()])
    except RuntimeError as exc:
        if "stopped by the test" not in str(exc):
            raise
        status = "stopped"
    json.dump({"status": status, "trained": trained},
              open(os.path.join(out, "trained_%%s_%%d.json" %% (attempt, rank)), "w"))
""") % {"samples": SAMPLES, "batch": BATCH}


def _environment(**variables):
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR",
                                                            "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT")}
    env.update(OMP_NUM_THREADS="1", **variables)
    return env


def _attempt(script, out, name, processes, stop_step):
    port = distributed.free_port()
    started = [forked_python.Popen([sys.executable, str(script), str(out), name, str(stop_step)], text=True,
                                   stderr=subprocess.PIPE,
                                   env=_environment(**({} if processes == 1 else dict(
                                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                                       LOCAL_RANK=str(rank), WORLD_SIZE=str(processes)))))
               for rank in range(processes)]
    errors = []
    for process in started:
        _, err = process.communicate(timeout=240)
        assert process.returncode == 0, err[-3000:]
        errors.append(err)
    return [json.load(open(out / f"trained_{name}_{rank}.json")) for rank in range(processes)], errors


def _stopped_and_resumed(tmp_path, before, after):
    """A run of `before` processes stopped after step 7 (the step checkpoint after step 6 is the newest: step 7 is
    trained again after the resume), resumed by `after` processes to the end: both attempts' samples and stderr."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    out = tmp_path / "out"
    first, _ = _attempt(script, out, "first", before, stop_step=7)
    assert all(rank["status"] == "stopped" for rank in first)
    second, errors = _attempt(script, out, "second", after, stop_step=-1)
    assert all(rank["status"] == "completed" for rank in second)
    return out, first, second, errors


def world_size_changes(folder):
    """_stopped_and_resumed for 2 -> 1 and 1 -> 2 processes, both at once (their processes mostly start up and wait on
    each other): a Future per (before, after)."""
    return run_together(folder, {sizes: (_stopped_and_resumed, *sizes) for sizes in ((2, 1), (1, 2))})


@pytest.mark.slow
@pytest.mark.prestarted(job=world_size_changes)
@pytest.mark.parametrize("before, after", [(2, 1), (1, 2)])
def test_a_run_checkpointed_by_n_processes_goes_on_with_m_each_sample_once(prestarted, before, after):
    out, first, second, errors = prestarted[before, after].result()
    consumed = 6 * BATCH * before
    assert f"resuming {before} processes' checkpoint with {after}: epoch 1 goes on after {consumed} of its samples" \
           in errors[0]

    # Epoch 1: the first attempt's 6 checkpointed steps plus the second attempt's rest are each sample once.
    per_step = BATCH * before
    kept = [sample for rank in first for index, (epoch, sample) in enumerate(rank["trained"])
            if epoch == 0 and index < 6 * BATCH]
    assert len(kept) == 6 * per_step
    resumed = [sample for rank in second for epoch, sample in rank["trained"] if epoch == 0]
    assert sorted(kept + resumed) == list(range(SAMPLES))
    # Epoch 2 at the new world size: every sample once.
    assert sorted(sample for rank in second for epoch, sample in rank["trained"] if epoch == 1) == list(range(SAMPLES))

    stats = json.load(open(out / "run" / "training_stats.json"))
    assert stats["resume"]["world_size"] == before and stats["resume"]["samples_consumed"] == consumed
    assert stats["batch"] == {"per_process": BATCH, "accumulate_grad_batches": 1, "processes": after,
                              "effective": BATCH * after, "lr_scaling": "linear", "lr": 0.01 * after}
    # The schedule's step count is restated in steps of this world size: two whole epochs of them at the end.
    assert stats["steps"] == 2 * SAMPLES // (BATCH * after)
    assert abs(stats["epochs"][-1]["lr"]) < 1e-9  # and the cosine schedule ended there, at 0
    with open(out / "run" / "checkpoints" / "last.pt", "rb") as handle:
        last = torch.load(handle, weights_only=True)
    assert last["world_size"] == after and last["epoch"] == 2


def test_step_checkpoint_keys_and_batch_size_are_checked(tmp_path):
    for key, value, valid in (("checkpoint_every_n_steps", -1, ">= 0"), ("checkpoint_every_minutes", -0.5, ">= 0"),
                              ("checkpoint_every_minutes", float("nan"), "finite"),
                              ("checkpoint_every_n_steps", 2**40, "< 2\\^31")):
        with pytest.raises(gpucore.ConfigError, match=f"{key}.*{valid}"):
            gpucore.train(config(tmp_path, **{key: value}), model=mlp(), train_data=tensors())
    for key in ("batch_size", "eval_batch_size"):
        with pytest.raises(gpucore.ConfigError, match=rf"{key}.*in \[1, 2\^31\)"):
            gpucore.train(config(tmp_path, **{key: 2**40}), model=mlp(), train_data=tensors())
    source = _C.TensorBatches(*tensors(), BATCH, True, False, 0, torch.device("cpu"))
    with pytest.raises(gpucore.ConfigError, match="first sample 300 is outside the epoch's 256 samples"):
        source.set_shard(0, 2, 300)


def test_a_batch_size_beyond_the_data_trains_on_all_of_it_at_once(tmp_path):
    """Its buffers are the data's length, not batch_size's: 2^31 - 1 allocates no more than 256 samples."""
    whole = gpucore.train(config(tmp_path / "a", batch_size=SAMPLES), model=mlp(), train_data=tensors())
    larger = gpucore.train(config(tmp_path / "b", batch_size=2**31 - 1), model=mlp(), train_data=tensors())
    assert larger.steps == whole.steps == 2
    assert_states_equal(larger.model, whole.model)


def _kill_mid_write_worker(tmp_path):
    script = tmp_path / "kill_worker.py"
    script.write_text(textwrap.dedent("""
        import os, signal, sys, torch, gpucore
        sys.path.insert(0, %(tests)r)
        from test_step_checkpoints import config, mlp, tensors

        out, kill = sys.argv[1], sys.argv[2] == "kill"
        if kill:
            save = torch.save

            def save_then_die(obj, handle, *args, **kwargs):  # half of the third step checkpoint, then SIGKILL
                if isinstance(obj, dict) and obj.get("samples_consumed") == 3 * 5 * %(batch)d:
                    handle.write(b"half a checkpoint")
                    handle.flush()
                    os.kill(os.getpid(), signal.SIGKILL)
                return save(obj, handle, *args, **kwargs)

            torch.save = save_then_die
        result = gpucore.train(dict(config(out, checkpoint_every_n_steps=5), resume="auto"), model=mlp(),
                               train_data=tensors())
        torch.save(result.model.state_dict(), os.path.join(out, "weights.pt"))
    """) % {"tests": os.path.dirname(__file__), "batch": BATCH})
    return script


@pytest.mark.slow
def test_killed_while_writing_a_step_checkpoint_the_previous_one_resumes_bitwise(tmp_path, uninterrupted):
    script = _kill_mid_write_worker(tmp_path)
    out = tmp_path / "out"
    killed = forked_python.run([sys.executable, str(script), str(out), "kill"], env=_environment(), capture_output=True,
                               text=True, timeout=240)
    assert killed.returncode == -9, killed.stderr[-3000:]
    checkpoints = out / "run" / "checkpoints"
    left = sorted(os.listdir(checkpoints))
    assert left[0] == "step.pt" and len(left) == 2 and left[1].startswith("step.pt.tmp-")  # the torn one: hidden
    assert torch.load(checkpoints / "step.pt", weights_only=True)["samples_consumed"] == 2 * 5 * BATCH
    finished = forked_python.run([sys.executable, str(script), str(out), "go"], env=_environment(), capture_output=True,
                                 text=True, timeout=240)
    assert finished.returncode == 0, finished.stderr[-3000:]
    weights = torch.load(out / "weights.pt", weights_only=True)
    assert_states_equal(weights, uninterrupted.model)
    stats = json.load(open(out / "run" / "training_stats.json"))
    assert stats["resume"]["from"].endswith("step.pt") and stats["resume"]["samples_consumed"] == 80
    assert not [name for name in os.listdir(checkpoints) if ".tmp-" in name]


def two_random_kill_trials_with_step_checkpoints(folder):
    # kill_runs.py's trials (SIGKILL at random moments, restarted until done) with a step checkpoint every 2 steps:
    # two trials here, more with `python tests/trials/kill_runs.py --step-checkpoints 2 --trials 30`.
    return kill_trials("--step-checkpoints", "2", "--epochs", "2", "--train-size", "384", "--trials", "2",
                       "--kills", "2", "--seed", "7")


@pytest.mark.slow
@pytest.mark.prestarted(job=two_random_kill_trials_with_step_checkpoints)
def test_random_kills_with_step_checkpoints_end_bitwise(prestarted):
    status, printed = prestarted
    assert status == 0, printed


def _filling_save(monkeypatch, file_name, failure, fail_at):
    """torch.save that fills the disk on the `fail_at`-th write of checkpoints/`file_name`: some bytes, then the
    error a full disk gives (OSError ENOSPC, or torch's short-write RuntimeError with the disk reported full)."""
    real_save, writes = torch.save, []

    def save(obj, handle, *args, **kwargs):
        if os.path.basename(getattr(handle, "name", "")).startswith(file_name + ".tmp-"):
            writes.append(file_name)
            if len(writes) == fail_at:
                handle.write(b"\0" * 4096)
                if failure == "enospc":
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                monkeypatch.setattr(checkpoint.shutil, "disk_usage", lambda path: types.SimpleNamespace(free=1234))
                raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 845248 vs 845148")
        return real_save(obj, handle, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)


@pytest.mark.parametrize("failure", ["enospc", "short_write"])
def test_a_full_disk_writing_last_pt_says_so_loses_nothing_and_resumes_bitwise(tmp_path, monkeypatch, failure,
                                                                               uninterrupted):
    settings = config(tmp_path)
    _filling_save(monkeypatch, "last.pt", failure, fail_at=2)  # epoch 2's last.pt
    checkpoints = tmp_path / "run" / "checkpoints"
    with pytest.raises(TrainingError, match=r"no space left on the device writing '.*last\.pt': it needs about "
                                            r"\d+\.\d kB, .* [kM]B free in .*checkpoints\. Nothing was overwritten: "
                                            r"the previous last\.pt is intact; resume: auto goes on from .*last\.pt"):
        gpucore.train(settings, model=mlp(), train_data=tensors())
    monkeypatch.undo()
    assert sorted(os.listdir(checkpoints)) == ["best.pt", "last.pt"]  # no temporary left behind
    assert torch.load(checkpoints / "last.pt", weights_only=True)["epoch"] == 1
    stats = json.load(open(tmp_path / "run" / "training_stats.json"))
    assert stats["status"] == "failed" and "no space left on the device writing" in stats["error"]
    resumed = gpucore.train(dict(settings, resume="auto"), model=mlp(), train_data=tensors())
    assert_states_equal(resumed.model, uninterrupted.model)
    rows = [json.loads(line) for line in open(resumed.metrics_path) if '"epoch"' in line and '"step"' not in line]
    assert [row["epoch"] for row in rows] == [1, 2]  # no duplicated row for the failed epoch


def test_a_full_disk_writing_a_step_checkpoint_in_the_background_says_so(tmp_path, monkeypatch):
    _filling_save(monkeypatch, "step.pt", "enospc", fail_at=1)
    with pytest.raises(TrainingError, match=r"writing the step checkpoint .* failed \(TrainingError: no space left on "
                                            r"the device writing '.*step\.pt'.*there is no earlier step\.pt"):
        gpucore.train(config(tmp_path, checkpoint_every_n_steps=5), model=mlp(), train_data=tensors())
    stats = json.load(open(tmp_path / "run" / "training_stats.json"))
    assert stats["status"] == "failed" and "no space left on the device writing" in stats["error"]


def test_training_stats_give_the_write_times_and_the_steps_a_kill_can_lose(tmp_path, monkeypatch):
    real_write = checkpoint.write_snapshot

    def slow_write(path, snapshot):  # a slow disk: the loop trains on while the step checkpoint is written
        time.sleep(0.3)
        real_write(path, snapshot)

    monkeypatch.setattr(sys.modules["gpucore.training.step_checkpoints"], "write_snapshot", slow_write)
    result = gpucore.train(config(tmp_path, epochs=1, checkpoint_every_n_steps=5), model=mlp(), train_data=tensors())
    stats = json.load(open(result.stats_path))
    writes = stats["step_checkpoint_writes"]
    assert stats["step_checkpoints"] == 6 and writes["write_s_max"] >= 0.3 and writes["write_s_mean"] >= 0.3
    assert writes["most_steps_during_a_write"] >= 1  # the next write waits: at most 5 steps train meanwhile
    assert writes["most_steps_lost"] == 5 + writes["most_steps_during_a_write"] <= 10
