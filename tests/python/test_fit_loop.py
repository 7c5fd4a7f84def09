"""The fit loop (training/fit_loop.py) on a small stand-in run built by the set-up steps (loop_stand_in.py): its
epochs against a plain PyTorch SGD loop over the same batches (weights, the records' training and validation
metrics), the callbacks' hooks in order and a callback's stop, and the engine's release: no part of the loop keeps
the engine alive once the run lets it go."""
import copy
import json
import os
import sys

import pytest
import torch
import torch.nn.functional as F

import gpucore
from gpucore.run_files import METRICS
from loop_stand_in import camera_crops, linear_model, stand_in


def test_two_epochs_train_and_record_what_a_plain_torch_loop_computes(tmp_path):
    (x, y), (xv, yv) = camera_crops(24), camera_crops(8, offset=64)
    model = linear_model()
    reference = copy.deepcopy(model)
    run, loop = stand_in(tmp_path, model, (x, y), (xv, yv), epochs=2)
    try:
        assert loop.fit() == "completed"
    finally:
        run.close()

    sgd = torch.optim.SGD(reference.parameters(), lr=0.5)
    for epoch, record in enumerate(loop.history):
        losses, correct = [], 0
        for start in range(0, 24, 8):  # shuffle false: the data's order; 3 steps an epoch
            sgd.zero_grad()
            logits = reference(x[start:start + 8])
            loss = F.cross_entropy(logits, y[start:start + 8])
            losses.append(loss.item())
            correct += (logits.argmax(1) == y[start:start + 8]).sum().item()
            loss.backward()
            sgd.step()
        with torch.no_grad():
            val_logits = reference(xv)
        assert record["epoch"] == epoch + 1
        assert record["train_loss"] == pytest.approx(sum(losses) / 3, rel=1e-5)  # batches of equal size
        assert record["train_accuracy"] == pytest.approx(correct / 24)
        assert record["val_loss"] == pytest.approx(F.cross_entropy(val_logits, yv).item(), rel=1e-5)
        assert record["val_accuracy"] == pytest.approx((val_logits.argmax(1) == yv).float().mean().item())
        assert record["lr"] == pytest.approx(0.5) and record["skipped_steps"] == 0
        assert record["samples_per_s"] == pytest.approx(24 / record["epoch_time_s"])
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    assert (loop.position.epoch, loop.position.steps_taken) == (2, 6)
    assert loop.outcome.reason == "max epochs reached (2)"
    with open(os.path.join(run.run_dir.path, METRICS)) as rows:  # metrics.jsonl holds the records as they are
        assert [json.loads(row) for row in rows] == loop.history


def test_the_hooks_run_in_order_and_a_callbacks_stop_ends_the_fit_after_its_epoch(tmp_path):
    calls = []

    class Stopper(gpucore.Callback):
        def on_fit_start(self, trainer):
            calls.append("fit_start")

        def on_epoch_start(self, trainer, epoch):
            calls.append(("epoch_start", epoch, trainer.model.training))

        def on_epoch_end(self, trainer, epoch, record):
            calls.append(("epoch_end", epoch, sorted(k for k in record if k.startswith("val_"))))
            if epoch == 2:
                trainer.stop("two are enough")

        def on_fit_end(self, trainer):
            calls.append(("fit_end", trainer.status, trainer.stop_reason))

    (x, y), (xv, yv) = camera_crops(16), camera_crops(8, offset=64)
    run, loop = stand_in(tmp_path, linear_model(), (x, y), (xv, yv), epochs=5, callbacks=[Stopper()])
    try:
        assert loop.fit() == "stopped"
    finally:
        run.close()
    val_keys = ["val_accuracy", "val_balanced_accuracy", "val_f1_macro", "val_loss", "val_time_s"]
    assert calls == ["fit_start", ("epoch_start", 1, True), ("epoch_end", 1, val_keys), ("epoch_start", 2, True),
                     ("epoch_end", 2, val_keys), ("fit_end", "stopped", "two are enough")]
    assert len(loop.history) == 2 and loop.position.epoch == 2 and loop.position.steps_taken == 4


def test_once_the_run_releases_its_engine_no_part_of_the_loop_holds_it(tmp_path):
    (x, y) = camera_crops(16)
    run, loop = stand_in(tmp_path, linear_model(), (x, y), ema_decay=0.5, on_oom="reduce_batch",
                         checkpoint_every_n_steps=1)
    try:
        loop.fit()
        loop.run_stats.stats("completed")
    finally:
        run.close()
    engine = run.engine
    held = sys.getrefcount(engine)  # this function's name and getrefcount's argument, and the run's engine part
    run.release_engine()
    assert run.engine is None and loop.checkpointing.training.engine is None
    assert sys.getrefcount(engine) == held - 1 == 2  # only this function's name is left: the engine goes with it
