"""checkpointing.migrate: each older checkpoint format, brought to the current one."""
from gpucore.training.checkpointing import migrate

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
