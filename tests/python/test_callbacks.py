"""Callbacks as Lightning users know them: the hooks in order, a callback that stops the run at a metric threshold,
its state saved in the checkpoint and given back on resume, and a resumed run equal to the uninterrupted one."""
import json
import os

import pytest
import torch

import gpucore
from conftest import assert_states_equal
from gpucore.training.loggers.base import Logger

# 8 steps an epoch, of 16 samples: the hooks' order and counts, the states and the resumes are the same at any
# batch size, and half the samples of batches of 32 train in half the time.
SMALL = {"data": "synthetic_fashion", "data_kwargs": {"train_size": 128, "val_size": 32, "seed": 3},
         "progress": False, "batch_size": 16, "epochs": 4, "seed": 5, "device": "cpu"}


class StopAtAccuracy(gpucore.Callback):
    """Ends the run once val_accuracy reaches `threshold`; remembers every epoch's value (its state)."""

    def __init__(self, threshold):
        self.threshold, self.seen = threshold, []

    def on_epoch_end(self, trainer, epoch, record):
        self.seen.append(record["val_accuracy"])
        if record["val_accuracy"] >= self.threshold:
            trainer.should_stop = True

    def state_dict(self):
        return {"seen": list(self.seen)}

    def load_state_dict(self, state):
        self.seen = list(state["seen"])


@pytest.mark.slow
def test_a_callback_stops_at_a_threshold_and_the_resumed_run_goes_on_with_its_state(tmp_path):
    straight = gpucore.train(dict(SMALL, run_dir=str(tmp_path / "a")))
    accuracies = [row["val_accuracy"] for row in straight.history]
    threshold = accuracies[1]  # reached in epoch 2 at the latest
    stop_epoch = next(i for i, value in enumerate(accuracies, start=1) if value >= threshold)

    stopping = StopAtAccuracy(threshold)
    stopped = gpucore.train(dict(SMALL, run_dir=str(tmp_path / "b")), callbacks=[stopping])
    assert stopped.status == "stopped" and len(stopped.history) == stop_epoch
    last = torch.load(os.path.join(stopped.checkpoint_dir, "last.pt"), weights_only=True)
    assert last["epoch"] == stop_epoch and last["callbacks"]["StopAtAccuracy"] == {"seen": accuracies[:stop_epoch]}

    going_on = StopAtAccuracy(threshold=2.0)  # never reached: the run goes to its last epoch
    resumed = gpucore.train(dict(SMALL, run_dir=str(tmp_path / "b"), resume="auto"), callbacks=[going_on])
    assert resumed.status == "completed" and [row["epoch"] for row in resumed.history] == [1, 2, 3, 4]
    assert going_on.seen == accuracies  # the first epochs' values came back from the checkpoint
    assert_states_equal(resumed.model, straight.model)


def test_hooks_are_called_in_order_and_early_stopping_keeps_its_state(tmp_path):
    calls = []

    class Hooks(gpucore.Callback):
        def on_fit_start(self, trainer):
            calls.append(("fit_start", trainer.epoch))

        def on_epoch_start(self, trainer, epoch):
            calls.append(("epoch_start", epoch))

        def on_log(self, trainer, step, metrics):
            calls.append(("step_end", metrics["epoch"]))

        def on_epoch_end(self, trainer, epoch, record):
            calls.append(("epoch_end", epoch))

        def on_save_checkpoint(self, trainer, checkpoint):
            checkpoint["hooks_saw"] = checkpoint["epoch"]
            calls.append(("save", checkpoint["epoch"]))

        def on_fit_end(self, trainer):
            calls.append(("fit_end", trainer.status))

        def teardown(self, trainer):
            calls.append(("teardown", trainer.status))

    config = dict(SMALL, run_dir=str(tmp_path), epochs=2, log_every_n_steps=4, patience=5)
    result = gpucore.train(config, callbacks=[Hooks()])
    steps = [("step_end", 1), ("step_end", 1)]  # 8 steps an epoch, a read every 4
    assert calls == [("fit_start", 0), ("epoch_start", 1), *steps, ("epoch_end", 1), ("save", 1), ("epoch_start", 2),
                     ("step_end", 2), ("step_end", 2), ("epoch_end", 2), ("save", 2), ("fit_end", "completed"),
                     ("teardown", "completed")]
    last = torch.load(os.path.join(result.checkpoint_dir, "last.pt"), weights_only=True)
    assert last["hooks_saw"] == 2
    assert last["callbacks"]["EarlyStopping"] == last["callbacks"]["ModelCheckpoint"] == last["best"]
    assert last["best"]["epoch"] == result.best_epoch

    class Twin(gpucore.Callback):
        def state_dict(self):
            return {}

    with pytest.raises(gpucore.ConfigError, match=r"two callbacks keep their state under '\S*Twin'"):
        gpucore.train(dict(config, run_dir=str(tmp_path / "twins")), callbacks=[Twin(), Twin()])


def test_hooks_without_the_trainer_are_refused_and_the_renamed_one_still_called(tmp_path):
    """A hook written without the trainer (before 0.1.0) is a ConfigError naming the callback, the hook and the
    signature to write, before anything trains; on_step_end (now on_log) is still called in on_log's place, with a
    DeprecationWarning, for one more release."""
    class OldCallback(gpucore.Callback):
        def on_epoch_end(self, epoch, record):
            pass

    class OldDuck:
        def on_load_checkpoint(self, checkpoint):
            pass

    config = dict(SMALL, run_dir=str(tmp_path), epochs=1, log_every_n_steps=8, schedule="constant")
    with pytest.raises(gpucore.ConfigError, match=r"callback OldCallback: on_epoch_end\(epoch, record\) takes no "
                                                  r"trainer; .* define on_epoch_end\(self, trainer, epoch, record\)"):
        gpucore.train(config, callbacks=[OldCallback()])
    with pytest.raises(gpucore.ConfigError, match=r"callback OldDuck: on_load_checkpoint\(checkpoint\)"):
        gpucore.train(dict(config, name="duck"), callbacks=[OldDuck()])

    calls = []

    class Renamed:
        def on_step_end(self, trainer, step, metrics):
            calls.append((step, metrics["epoch"], trainer.epoch))

    with pytest.warns(DeprecationWarning, match="callback Renamed: hook on_step_end is deprecated"):
        gpucore.train(dict(config, name="renamed"), callbacks=[Renamed()])
    assert calls and all(step % 8 == 0 and epoch == 1 for step, epoch, _ in calls), calls


@pytest.mark.slow
def test_a_checkpoint_from_before_callback_states_resumes_with_its_best_epoch(tmp_path):
    from gpucore.checkpoint import save_checkpoint

    config = dict(SMALL, run_dir=str(tmp_path), epochs=2, patience=3, schedule="constant")  # a resume adds an epoch
    first = gpucore.train(config)
    path = os.path.join(first.checkpoint_dir, "last.pt")
    old = torch.load(path, weights_only=True)
    for newer in ("callbacks", "batching"):  # what checkpoints held before this layout
        del old[newer]
    save_checkpoint(path, old)
    resumed = gpucore.train(dict(config, epochs=3, resume="auto"))
    assert [row["epoch"] for row in resumed.history] == [1, 2, 3] and resumed.status == "completed"
    last = torch.load(path, weights_only=True)
    better = resumed.history[2]["val_accuracy"] > max(row["val_accuracy"] for row in first.history)
    assert last["callbacks"]["EarlyStopping"]["epoch"] == (3 if better else first.best_epoch)
    assert gpucore.load(path, "cpu").task.name == "classification"


def test_on_step_end_is_on_log_now_and_still_called_with_a_deprecation_warning(tmp_path):
    """on_step_end ran every log_every_n_steps steps, not every step: it is on_log now, and a callback defining
    on_step_end (the current signature, or in a subclass of a class with on_log) still has it called for a release."""
    calls = []

    class OldName(gpucore.Callback):
        def on_step_end(self, trainer, step, metrics):
            calls.append(("old", step, metrics["epoch"], trainer.epoch))

    class Both(gpucore.Callback):  # written for both releases: on_log alone is called
        def on_log(self, trainer, step, metrics):
            calls.append(("both:on_log", step))

        def on_step_end(self, trainer, step, metrics):
            calls.append(("both:on_step_end", step))

    class SubclassedLogger(Logger):  # the base class's on_log is the less specific one
        name = "mine"

        def on_step_end(self, trainer, step, metrics):
            calls.append(("logger", step))

    config = dict(SMALL, run_dir=str(tmp_path), epochs=1, log_every_n_steps=4)
    with pytest.warns(DeprecationWarning) as warned:
        gpucore.train(config, callbacks=[OldName(), Both(), SubclassedLogger()])
    messages = [str(w.message) for w in warned if issubclass(w.category, DeprecationWarning)]
    assert sorted(m.split(" is deprecated")[0] for m in messages) == [
        "callback OldName: hook on_step_end", "callback SubclassedLogger: hook on_step_end"]
    assert all("define on_log(self, trainer, step, metrics)" in m and "on_train_step_end" in m for m in messages)
    assert calls == [("old", 4, 1, 0), ("both:on_log", 4), ("logger", 4),
                     ("old", 8, 1, 0), ("both:on_log", 8), ("logger", 8)]


@pytest.mark.parametrize("accumulate", [1, 2])
def test_on_train_step_end_is_called_once_after_every_optimizer_step(tmp_path, accumulate):
    steps, logged = [], []

    class EveryStep(gpucore.Callback):
        def on_train_step_end(self, trainer, step):
            steps.append((trainer.epoch + 1, step))

        def on_log(self, trainer, step, metrics):
            logged.append((metrics["epoch"], len(steps)))

    # 128 samples, batch 16: 8 micro-batches an epoch, 8 // accumulate optimizer steps
    config = dict(SMALL, run_dir=str(tmp_path), epochs=2, log_every_n_steps=2, accumulate_grad_batches=accumulate)
    result = gpucore.train(config, callbacks=[EveryStep()])
    per_epoch = 8 // accumulate
    assert steps == [(epoch, step) for epoch in (1, 2) for step in range(1, per_epoch + 1)]
    assert json.load(open(result.stats_path))["steps"] == 2 * per_epoch
    # on_log comes after the step's on_train_step_end
    assert logged == [(epoch, (epoch - 1) * per_epoch + step)
                      for epoch in (1, 2) for step in range(2, per_epoch + 1, 2)]


def test_the_engine_gets_no_step_callable_without_a_per_step_hook(tmp_path, monkeypatch):
    """on_train_step_end costs nothing unless a callback defines it: the engine is given on_step=None."""
    from gpucore.training import fit_loop

    given = []
    original = fit_loop.FitLoop._train_pass

    def spying(self, progress):
        engine = self.training.engine

        class Spy:
            def __getattr__(self, name):
                return getattr(engine, name)

            def train_epoch(self, *args, **kwargs):
                given.append(kwargs.get("on_step"))
                return engine.train_epoch(*args, **kwargs)

        self.training.engine = Spy()
        try:
            return original(self, progress)
        finally:
            self.training.engine = engine

    monkeypatch.setattr(fit_loop.FitLoop, "_train_pass", spying)

    class LogOnly(gpucore.Callback):
        def on_log(self, trainer, step, metrics):
            pass

    class Duck:  # not a Callback: having the method is defining it
        def __init__(self):
            self.steps = 0

        def on_train_step_end(self, trainer, step):
            self.steps += 1

    config = dict(SMALL, run_dir=str(tmp_path / "none"), epochs=1)
    gpucore.train(config, callbacks=[LogOnly()])
    assert given == [None]

    given.clear()
    duck = Duck()
    gpucore.train(dict(config, run_dir=str(tmp_path / "duck")), callbacks=[LogOnly(), duck])
    assert len(given) == 1 and callable(given[0]) and duck.steps == 8


def test_the_trainer_callbacks_receive_and_why_the_fit_stopped(tmp_path, capsys):
    """Callbacks get a Trainer (not the loop): the run, its model, position and history, the status, and a way to
    stop; the fit says why it stopped in one place (the terminal's last line and training_stats.json's stop_reason):
    max epochs, early stopping (naming the metric and the patience), a callback's stop, an interrupt's signal."""
    import json

    from gpucore.training.trainer import Trainer

    seen, models = [], []

    class Looks(gpucore.Callback):
        def on_epoch_end(self, trainer, epoch, record):
            assert isinstance(trainer, Trainer)
            models.append(trainer.model)
            seen.append((epoch, trainer.epoch, len(trainer.history), trainer.history[-1]["epoch"], trainer.status,
                         trainer.should_stop, trainer.resumed))

    config = dict(SMALL, run_dir=str(tmp_path), epochs=2, progress=True, schedule="constant")
    result = gpucore.train(dict(config, name="full"), callbacks=[Looks()])
    assert seen == [(1, 0, 1, 1, "completed", False, None), (2, 1, 2, 2, "completed", False, None)]
    assert len(models) == 2 and all(model is result.model for model in models)
    assert json.load(open(result.stats_path))["stop_reason"] == "max epochs reached (2)"
    assert "gpucore: training stopped: max epochs reached (2)" in capsys.readouterr().err

    # min_delta 10: the loss never improves enough after epoch 1, so patience 1 stops after epoch 2 of 5
    stopped = gpucore.train(dict(config, name="early", epochs=5, patience=1, min_delta=10.0, monitor="val_loss"))
    stats = json.load(open(stopped.stats_path))
    assert stopped.status == "early_stopped" and len(stopped.history) == 2
    assert stats["stop_reason"] == "early stopping: val_loss did not improve for 1 epoch (since epoch 1)"

    class StopAtOne(gpucore.Callback):
        def on_epoch_end(self, trainer, epoch, record):
            trainer.stop("enough for today")

    by_callback = gpucore.train(dict(config, name="asked"), callbacks=[StopAtOne()])
    assert by_callback.status == "stopped" and len(by_callback.history) == 1
    assert json.load(open(by_callback.stats_path))["stop_reason"] == "enough for today"

    class CtrlC(gpucore.Callback):
        def on_epoch_end(self, trainer, epoch, record):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as interrupt:
        gpucore.train(dict(config, name="ctrl_c"), callbacks=[CtrlC()])
    stats = json.load(open(interrupt.value.result.stats_path))
    assert (stats["status"], stats["stop_reason"]) == ("interrupted", "interrupted by SIGINT")
