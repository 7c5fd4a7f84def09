"""Checkpointing (training/checkpointing.py): each older checkpoint format brought to the current one (migrate); on a
small stand-in run, what a checkpoint holds (against the model's state, the training pixels' statistics computed
here, the callbacks' states) and a resume into a new run (weights, position, history, callbacks, RNGs and the
engine's counts as they were); the schedule a resume must keep."""
import json

import pytest
import torch

import gpucore
from gpucore.config import load_config
from gpucore.errors import ConfigError
from gpucore.training.checkpointing import check_schedule_length, migrate
from loop_stand_in import camera_crops, linear_model, stand_in

BATCHING = {"batch_size": 32, "accumulate_grad_batches": 2}
BEST = {"metric": 0.5, "epoch": 1, "monitor": "val_accuracy"}


def test_the_oldest_format_gets_the_runs_batching_its_world_size_samples_and_the_best_epoch_for_each_keeper():
    old = {"epoch": 1, "position": 3, "best": BEST, "history": []}
    assert migrate(old, 2, BATCHING, ["EarlyStopping", "ModelCheckpoint"]) == dict(
        old, batching=BATCHING, world_size=2, samples_consumed=3 * 32 * 2,
        callbacks={"EarlyStopping": BEST, "ModelCheckpoint": BEST})
    assert "batching" not in old  # the checkpoint read is left as it was


def test_a_checkpoint_counts_positions_in_its_own_batching_and_world_size():
    old = {"epoch": 0, "position": 5, "batching": {"batch_size": 8, "accumulate_grad_batches": 4}, "world_size": 3,
           "best": BEST, "callbacks": {"Mine": {"seen": [1]}}}
    migrated = migrate(old, 1, BATCHING, ["ModelCheckpoint"])
    assert migrated["samples_consumed"] == 5 * 8 * 3 and migrated["world_size"] == 3
    assert migrated["callbacks"] == {"Mine": {"seen": [1]}}


def test_the_current_format_is_left_as_it_is():
    current = {"epoch": 2, "samples_consumed": 64, "batching": BATCHING, "world_size": 1, "best": BEST,
               "callbacks": {"ModelCheckpoint": BEST}}
    assert migrate(current, 4, {"batch_size": 1, "accumulate_grad_batches": 1}, ["EarlyStopping"]) == current


# ---- Checkpointing on a stand-in run built by the set-up steps (loop_stand_in.py) -----------------------------------
class _Counter(gpucore.Callback):
    """A stateful callback: the epochs it saw, which checkpoints keep and a resume gives back."""

    def __init__(self):
        self.seen = []

    def on_epoch_end(self, trainer, epoch, record):
        self.seen.append(epoch)

    def state_dict(self):
        return {"seen": list(self.seen)}

    def load_state_dict(self, state):
        self.seen = list(state["seen"])


def test_a_payload_holds_the_model_the_data_facts_and_every_callbacks_state(tmp_path):
    (x, y), (xv, yv) = camera_crops(16), camera_crops(8, offset=64)
    model, counter = linear_model(), _Counter()
    run, loop = stand_in(tmp_path, model, (x, y), (xv, yv), epochs=1, normalize=True, callbacks=[counter])
    try:
        loop.fit()
        payload = loop.checkpointing.payload()
    finally:
        run.close()
    for name, tensor in model.state_dict().items():
        assert torch.equal(payload["model"][name], tensor), name
    assert payload["input_shape"] == [1, 8, 8] and payload["classes"] is None
    pixels = x.double()  # normalize: the training pixels' mean and std, which the batches were standardised with
    assert payload["input_stats"]["mean"][0] == pytest.approx(pixels.mean().item(), rel=1e-5)
    assert payload["input_stats"]["std"][0] == pytest.approx(pixels.std().item(), rel=1e-3)
    assert payload["callbacks"]["_Counter"] == {"seen": [1]}
    assert payload["best"] == payload["callbacks"]["ModelCheckpoint"] == {
        "metric": loop.history[0]["val_accuracy"], "epoch": 1, "monitor": "val_accuracy"}
    assert (payload["epoch"], payload["samples_consumed"]) == (1, 0)  # the next epoch, from its start
    assert payload["history"] == loop.history and payload["config"] == run.run_dir.config


def test_a_resume_gives_a_new_run_the_checkpoints_weights_position_history_callbacks_and_rngs(tmp_path):
    (x, y), (xv, yv) = camera_crops(16), camera_crops(8, offset=64)
    first, counter = linear_model(), _Counter()
    run, loop = stand_in(tmp_path / "a", first, (x, y), (xv, yv), epochs=2, callbacks=[counter])
    try:
        loop.fit()
        torch.manual_seed(11)  # the RNGs' state the checkpoint records
        path = str(tmp_path / "saved.pt")
        torch.save(loop.checkpointing.snapshot(), path)
        after_save = torch.rand(3)
        steps = run.engine.step_counts()
    finally:
        run.close()

    second, restored = linear_model(seed=1), _Counter()
    run, loop = stand_in(tmp_path / "b", second, (x, y), (xv, yv), epochs=3, callbacks=[restored])
    try:
        assert not torch.equal(second[1].weight, first[1].weight)
        where = loop.checkpointing.resume(path)
        assert torch.equal(torch.rand(3), after_save)  # the RNGs as they were when the checkpoint was written
        assert run.engine.step_counts() == steps
    finally:
        run.close()
    assert where == {"from": path, "epoch": 2, "samples_consumed": 0, "world_size": 1}
    for name, tensor in first.state_dict().items():
        assert torch.equal(second.state_dict()[name], tensor), name
    assert restored.seen == [1, 2] and loop.position.epoch == 2 and loop.position.steps_taken == 4
    assert loop.history == json.loads(json.dumps(torch.load(path, weights_only=True)["history"]))


@pytest.mark.parametrize("saved,asked,refused", [
    ({"schedule": "cosine", "epochs": 3}, {"schedule": "cosine", "epochs": 5}, "config key 'epochs'"),
    ({"schedule": "onecycle", "epochs": 3}, {"schedule": "onecycle", "epochs": 3}, None),
    ({"schedule": "constant", "epochs": 3}, {"schedule": "constant", "epochs": 5}, None),  # counts from the start
    ({"schedule": "step", "epochs": 3}, {"schedule": "multistep", "epochs": 3}, "config key 'schedule'"),
])
def test_a_resume_keeps_the_schedules_kind_and_a_whole_run_schedules_length(saved, asked, refused):
    config = load_config(asked)
    if refused is None:
        check_schedule_length("c.pt", saved, config)
    else:
        with pytest.raises(ConfigError, match=f"^{refused}: checkpoint 'c.pt'"):
            check_schedule_length("c.pt", saved, config)
