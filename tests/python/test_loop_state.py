"""The training loop's state: the run's position (training/position.py) against positions counted by hand, the
engine's step calls (decided in C++, without the host), and the host reads of device values counted exactly, so that
one more read fails."""
import json
import time

import pytest
import torch
from torch import nn

import gpucore
from gpucore import _C
from gpucore.errors import ConfigError
from gpucore.training.position import Batching, RunPosition, check_whole_batches


def test_position_counts_samples_over_all_ranks_and_the_steps_of_a_pass():
    position = RunPosition(Batching(batch_size=8, accumulate_grad_batches=3), world_size=2)
    assert position.samples_per_step() == 48 and Batching(8, 3).samples_per_step(1) == 24
    position.load_state_dict({"epoch": 4, "samples_consumed": 96, "epoch_seconds": 12.5,
                              "batching": {"batch_size": 8, "accumulate_grad_batches": 3}})
    assert (position.epoch, position.start_epoch, position.start_sample) == (4, 4, 96)
    assert position.steps_before_pass() == 2 and position.first_batch() == 6  # 96 samples = 6 batches of 8 x 2 ranks
    position.begin_pass(batches=10)  # this rank's micro-batches left: 4 windows of 3, the last one short
    assert position.pass_steps == 4
    position.steps_done(3)
    assert position.step_in_epoch(3) == 5 and position.samples_consumed() == 96 + 3 * 48
    # No clock started: the epoch trained only before this pass (the checkpoint's 12.5 s).
    assert position.state_dict() == {"epoch": 4, "samples_consumed": 240, "epoch_seconds": 12.5, "world_size": 2,
                                     "batching": {"batch_size": 8, "accumulate_grad_batches": 3}}
    position.start_clock()
    time.sleep(0.05)
    assert 12.55 <= position.state_dict()["epoch_seconds"] == pytest.approx(position.epoch_seconds(), abs=0.05)
    position.steps_done(4)  # every step of the pass: the next epoch's start, whatever the short window took
    assert position.state_dict()["epoch"] == 5 and position.state_dict()["samples_consumed"] == 0
    assert position.state_dict()["epoch_seconds"] == 0.0
    assert position.run_step(steps_per_epoch=7) == 5 * 7  # the pass's steps all taken
    position.next_epoch()
    assert (position.epoch, position.start_sample, position.pass_steps) == (5, 0, None)
    assert position.epoch_seconds() == 0.0  # the next epoch's clock starts with its pass


def test_a_pass_done_whose_row_is_not_written_is_kept_and_resumed_in_its_epoch():
    """A signal in validation: the checkpoint says the next epoch's start (epochs trained, what a resume at another
    world size counts its steps from) with the epoch's training row; loaded, the position is back in that epoch with
    its pass complete, and saved again it is the same."""
    position = RunPosition(Batching(batch_size=8, accumulate_grad_batches=1), world_size=1)
    position.begin_pass(batches=6)
    position.steps_done(6)
    assert "unrecorded_row" not in position.state_dict()  # no row held: the row was written
    row = {"epoch": 1, "train_loss": 0.25, "lr": 0.1}
    position.unrecorded_row = row
    saved = position.state_dict()
    assert (saved["epoch"], saved["samples_consumed"], saved["unrecorded_row"]) == (1, 0, row)
    position.steps_done(5)  # mid-pass a held row is no position: only a complete pass keeps one
    assert "unrecorded_row" not in position.state_dict()
    resumed = RunPosition(Batching(batch_size=8, accumulate_grad_batches=1), world_size=2)
    resumed.load_state_dict(saved)
    assert (resumed.epoch, resumed.start_epoch, resumed.pass_complete(), resumed.unrecorded_row) == (0, 0, True, row)
    assert resumed.run_step(steps_per_epoch=3) == 3
    assert resumed.state_dict() == dict(saved, world_size=2)
    resumed.next_epoch()
    assert (resumed.epoch, resumed.unrecorded_row, resumed.pass_complete()) == (1, None, False)


def test_a_torch_loader_resumes_only_at_whole_batches():
    assert check_whole_batches(96, 8, 2, epoch=3) == 6
    with pytest.raises(ConfigError, match=r"sample 100 of epoch 3 is not a whole number of batches of 8 x 2"):
        check_whole_batches(100, 8, 2, epoch=3)


def _engine(model, accumulate=1, log_every=1000):
    config = _C.EngineConfig()
    config.accumulate_grad_batches = accumulate
    config.log_every_n_steps = log_every
    config.optimizer.kind = "sgd"
    return _C.Engine([_C.ParamGroup(list(model.parameters()))], config)


def _batches(n, batch):
    generator = torch.Generator().manual_seed(5)
    x, y = torch.randn(n, 6, generator=generator), torch.randint(0, 3, (n,), generator=generator)
    return _C.TensorBatches(x, y, batch, False, False, 0, torch.device("cpu"))


def test_the_engine_calls_on_step_only_where_a_step_checkpoint_is_due_or_every_step_is_asked():
    model = nn.Linear(6, 3)
    calls = []
    record = lambda done, due: calls.append((done, due))
    engine = _engine(model, accumulate=2)
    # 20 micro-batches, windows of 2: 10 steps; the epoch's step is 1 + done; due at multiples of 3, never at the last
    engine.train_epoch(_batches(80, 4), model, None, None, on_step=record,
                       step_calls=_C.StepCalls(every_n_steps=3, steps_before=1))
    assert calls == [(2, True), (5, True), (8, True)]
    calls.clear()
    engine.train_epoch(_batches(36, 4), model, None, None, on_step=record,
                       step_calls=_C.StepCalls(every_step=True, every_n_steps=2))
    assert calls == [(1, False), (2, True), (3, False), (4, True), (5, False)]  # 9 micro-batches: 5 steps
    assert engine.steps_in_pass() == 5


def test_logs_carry_the_steps_taken_read_with_the_metrics():
    model = nn.Linear(6, 3)
    engine = _engine(model, log_every=2)
    logged = []
    stats = engine.train_epoch(_batches(40, 4), model, None, lambda metrics, steps: logged.append(steps))
    assert logged == [2, 4, 6, 8, 10] and stats["steps_taken"] == 10
    assert engine.host_syncs() == {"metrics": 6}  # 5 logs and the epoch's end, each one copy to the host
    assert engine.step_counts() == (10, 0) and engine.host_syncs() == {"metrics": 6, "counters": 1}


def _run(tmp_path, **overrides):
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(96, 16, generator=generator), torch.randint(0, 5, (96,), generator=generator)
    vx, vy = torch.randn(32, 16, generator=generator), torch.randint(0, 5, (32,), generator=generator)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 5))
    config = dict(run_dir=str(tmp_path), progress=False, device="cpu", precision="32", batch_size=8, epochs=2,
                  log_every_n_steps=4, loggers=[])
    config.update(overrides)
    return gpucore.train(config, model=model, train_data=(x, y), val_data=(vx, vy))


@pytest.mark.parametrize("overrides,per_epoch", [
    # 12 steps an epoch: metrics at steps 4, 8, 12 and the epoch's end; one validation; last.pt and best.pt from one
    # copy to the host
    ({}, {"metrics": 4, "evaluation": 1, "checkpoint": 1}),
    # the EMA is validated too; step checkpoints after steps 5 and 10 (not 12, the epoch's end)
    ({"ema_decay": 0.9, "checkpoint_every_n_steps": 5}, {"metrics": 4, "evaluation": 2, "checkpoint": 3}),
    # on_oom: reduce_batch copies the state before each pass, to start it over from
    ({"on_oom": "reduce_batch", "log_every_n_steps": 6}, {"metrics": 3, "evaluation": 1, "checkpoint": 1,
                                                          "oom_snapshot": 1}),
])
def test_host_syncs_are_counted_exactly(tmp_path, overrides, per_epoch):
    result = _run(tmp_path, **overrides)
    expected = {source: 2 * count for source, count in per_epoch.items()}
    assert result.host_syncs_by_source == expected
    assert result.host_syncs == sum(expected.values())
    stats = json.load(open(result.stats_path))
    assert stats["host_syncs"] == result.host_syncs and stats["host_syncs_by_source"] == expected
    assert stats["steps"] == 24  # as the engine's last read reported it, read no more


def test_a_resume_reads_the_step_counters_once(tmp_path):
    first = _run(tmp_path / "a", epochs=1, schedule="constant")
    resumed = _run(tmp_path / "b", epochs=2, schedule="constant", resume=f"{first.checkpoint_dir}/last.pt")
    assert resumed.host_syncs_by_source == {"counters": 1, "metrics": 4, "evaluation": 1, "checkpoint": 1}
    assert resumed.steps == 24
