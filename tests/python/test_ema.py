"""Config key ema_decay: the EMA of the weights against timm's ModelEmaV3, skipped steps, the val_ema_* metrics
against plain PyTorch, monitor, checkpoints, bitwise resume and gpucore.load."""
import copy
import json
import os

import pytest
import torch
from torch import nn

import gpucore
from gpucore import _C
from gpucore.config import load_config
from gpucore.models.pretrained import read_state_dict
from gpucore.training.ema import ema_tensors, make_ema

from conftest import assert_resume_matches, assert_states_equal, batches, require, schedule

TINY = {"data": "synthetic_fashion", "data_kwargs": {"train_size": 192, "val_size": 64, "seed": 3}, "progress": False,
        "batch_size": 32, "device": "cpu", "precision": "32", "seed": 5}


def bn_mlp(seed=0):
    """Parameters, float buffers (running statistics) and an integer one (num_batches_tracked)."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 12), nn.BatchNorm1d(12), nn.ReLU(), nn.Linear(12, 3))


def ema_engine(model, ema, decay, warmup=False, scaler=False):
    config = _C.EngineConfig()
    config.device = torch.device("cpu")
    config.log_every_n_steps = 1
    config.max_nonfinite_steps = 100
    optimizer = _C.OptimizerConfig()
    optimizer.kind = "sgd"
    config.optimizer = optimizer
    config.schedule = schedule("constant", base_lr=0.2, total_steps=100)
    scaler_config = _C.GradScalerConfig()
    scaler_config.enabled = scaler
    config.scaler = scaler_config
    config.ema.decay, config.ema.warmup = decay, warmup
    return _C.Engine([_C.ParamGroup(list(model.parameters()), weight_decay=0.0)], config, *ema_tensors(model, ema))


def states(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def timm_average(initial, taken_states, decay, warmup):
    """timm's ModelEmaV3 (as timm's train.py calls it: update(model, step=n) after the n-th optimizer step) over the
    model's states after each taken step."""
    ModelEmaV3 = require("timm.utils.model_ema").ModelEmaV3
    model = copy.deepcopy(initial)
    reference = ModelEmaV3(model, decay=decay, use_warmup=warmup)
    for step, state in enumerate(taken_states, start=1):
        model.load_state_dict(state)
        reference.update(model, step=step)
    return reference.module.state_dict()


def assert_same_state(ours, theirs):
    assert list(ours) == list(theirs)
    for name, value in ours.items():
        if value.is_floating_point():
            torch.testing.assert_close(value, theirs[name], rtol=1e-6, atol=1e-7, msg=name)
        else:
            assert torch.equal(value, theirs[name]), name


@pytest.mark.parametrize("decay,warmup", [(0.9, False), (0.6, True), (0.999, True)])
def test_ema_after_n_steps_equals_timm_model_ema_v3(decay, warmup):
    model = bn_mlp()
    initial = copy.deepcopy(model)
    ema = make_ema(model, decay)
    seen = []
    eng = ema_engine(model, ema, decay, warmup)
    x, y = torch.randn(64, 6), torch.randint(0, 3, (64,))
    eng.train_epoch(batches(x, y, 8), model, None, lambda metrics, steps: seen.append(states(model)))
    assert len(seen) == 8 and not torch.equal(seen[0]["0.weight"], seen[-1]["0.weight"])
    assert_same_state(ema.state_dict(), timm_average(initial, seen, decay, warmup))
    assert ema.state_dict()["1.num_batches_tracked"].item() == 8  # integer buffers are copied


def test_a_skipped_step_leaves_the_ema_as_it_was():
    model = bn_mlp(1)
    initial = copy.deepcopy(model)
    ema = make_ema(model, 0.8)
    eng = ema_engine(model, ema, 0.8, warmup=True, scaler=True)
    calls = {"n": 0}

    def loss(output, target):
        calls["n"] += 1
        value = nn.functional.cross_entropy(output, target)
        return value * float("inf") if calls["n"] == 3 else value  # the third of five steps overflows

    models, averages = [], []
    hook = lambda metrics, steps: (models.append(states(model)), averages.append(states(ema)))
    eng.train_epoch(batches(torch.randn(40, 6), torch.randint(0, 3, (40,)), 8), model, loss, hook)
    assert eng.step_counts() == (4, 1)
    for name, value in averages[1].items():
        assert torch.equal(averages[2][name], value), name  # untouched, though the forward moved BN's statistics
    assert not torch.equal(models[2]["1.running_mean"], models[1]["1.running_mean"])
    # the warm-up counts taken steps only: timm over the four taken steps' weights
    taken = [models[i] for i in (0, 1, 3, 4)]
    assert_same_state(ema.state_dict(), timm_average(initial, taken, 0.8, True))


def test_ema_update_op_dtypes_and_opcheck():
    counters = torch.tensor([5.0, 0.0, 0.0])
    weight = 1 - 0.7  # no warm-up: decay 0.7 from the second update on
    for dtype in (torch.float64, torch.bfloat16, torch.float16):
        average, source = torch.randn(33).to(dtype), torch.randn(33).to(dtype)
        math = torch.float64 if dtype == torch.float64 else torch.float32  # as torch's lerp computes
        expected = torch.lerp(average.to(math), source.to(math), weight).to(dtype)
        torch.ops.gpucore.ema_update([average], [source], counters, 0.7, False, 1.0, 2 / 3)
        torch.testing.assert_close(average, expected)
    channels_last = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    target = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    expected = torch.lerp(channels_last, target, weight)
    torch.ops.gpucore.ema_update([channels_last], [target], counters, 0.7, False, 1.0, 2 / 3)
    torch.testing.assert_close(channels_last, expected)
    with pytest.raises(RuntimeError, match="shape"):
        torch.ops.gpucore.ema_update([torch.zeros(3)], [torch.zeros(4)], counters, 0.7, False, 1.0, 2 / 3)
    torch.library.opcheck(torch.ops.gpucore.ema_update,
                          ([torch.randn(4), torch.zeros(2, dtype=torch.long)], [torch.randn(4), torch.arange(2)],
                           torch.tensor([3.0, 1.0, 0.0]), 0.9, True, 1.0, 2 / 3))


@pytest.mark.parametrize("values,key", [
    ({"ema_decay": 1.0}, "ema_decay"), ({"ema_decay": -0.5}, "ema_decay"), ({"ema_warmup_gamma": 0}, "ema_warmup_gamma"),
    ({"ema_warmup_power": -1}, "ema_warmup_power"), ({"ema_decay": "high"}, "ema_decay"),
])
def test_bad_values_name_the_key(values, key):
    with pytest.raises(gpucore.ConfigError, match=f"'{key}'"):
        load_config(values)


def test_engine_checks_the_ema_config_and_tensors():
    model = bn_mlp()
    ema = make_ema(model, 0.9)
    with pytest.raises(RuntimeError, match=r"ema_decay must be in \[0, 1\), got 1.5"):  # config.py refuses it first
        ema_engine(model, ema, 1.5)
    with pytest.raises(gpucore.ConfigError, match="ema_decay is 0"):
        ema_engine(model, ema, 0.0)
    other = make_ema(nn.Sequential(nn.Linear(6, 13)), 0.9)
    averages, _ = ema_tensors(other, other)
    config = _C.EngineConfig()
    config.ema.decay = 0.9
    with pytest.raises(gpucore.ConfigError, match="do not fit"):
        _C.Engine([_C.ParamGroup(list(model.parameters()))], config, averages, list(model.parameters())[:2])


def test_monitoring_an_ema_metric_needs_ema_decay(tmp_path):
    with pytest.raises(gpucore.ConfigError, match="val_ema_accuracy.*ema_decay 0"):
        gpucore.train(dict(TINY, run_dir=str(tmp_path), epochs=1, monitor="val_ema_accuracy"))


def plain_metrics(model, x, y):
    with torch.no_grad():
        output = model(x)
    return nn.functional.cross_entropy(output, y).item(), (output.argmax(1) == y).double().mean().item()


def test_val_ema_metrics_are_those_of_the_ema_weights(tmp_path):
    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(96, 6, generator=generator), torch.randint(0, 3, (96,), generator=generator)
    xv, yv = torch.randn(50, 6, generator=generator), torch.randint(0, 3, (50,), generator=generator)
    result = gpucore.train(dict(run_dir=str(tmp_path), progress=False, device="cpu", precision="32", epochs=2,
                                batch_size=16, eval_batch_size=50, normalize=False, ema_decay=0.8, top_k=0),
                           model=bn_mlp(), train_data=(x, y), val_data=(xv, yv))
    record = result.history[-1]
    saved = torch.load(os.path.join(result.checkpoint_dir, "last.pt"), weights_only=True)
    ema = bn_mlp().eval()
    ema.load_state_dict(saved["model_ema"])
    # TrainResult.model_ema: the EMA after the last step, as last.pt keeps it
    assert not result.model_ema.training and not any(p.requires_grad for p in result.model_ema.parameters())
    assert_states_equal(saved["model_ema"], result.model_ema, keys=list(result.model_ema.state_dict()))
    loss, accuracy = plain_metrics(ema, xv, yv)
    assert record["val_ema_loss"] == pytest.approx(loss, rel=1e-6)
    assert record["val_ema_accuracy"] == accuracy
    raw_loss, _ = plain_metrics(result.model.eval(), xv, yv)
    assert record["val_loss"] == pytest.approx(raw_loss, rel=1e-6) and raw_loss != pytest.approx(loss, rel=1e-3)
    assert saved["weights"] == "raw"  # monitor auto: val_accuracy, the raw weights'


def test_monitor_picks_the_ema_and_load_and_report_use_its_weights(tmp_path):
    result = gpucore.train(dict(TINY, run_dir=str(tmp_path), epochs=2, ema_decay=0.5, monitor="val_ema_loss"))
    assert result.monitor == "val_ema_loss"
    assert result.best_metric == min(r["val_ema_loss"] for r in result.history)
    best = os.path.join(result.checkpoint_dir, "best.pt")
    saved = torch.load(best, weights_only=True)
    assert saved["weights"] == "ema" and saved["epoch"] == result.best_epoch
    assert json.load(open(result.stats_path))["best"]["weights"] == "ema"
    loaded = gpucore.load(best, device="cpu")
    assert loaded.weights == "ema" and "EMA weights" in repr(loaded)
    assert_states_equal(saved["model_ema"], loaded.module, keys=list(loaded.module.state_dict()))
    assert not all(torch.equal(value, saved["model_ema"][name]) for name, value in saved["model"].items())
    # config key pretrained takes the same weights from it
    ema_weights = read_state_dict(best)
    assert_states_equal(saved["model_ema"], ema_weights, keys=list(ema_weights))
    # the report shows the EMA weights and says so
    from gpucore.evaluation.run_report import _facts
    facts = dict(_facts({}, "best.pt", saved["epoch"], loaded.weights))
    assert "its EMA weights" in facts["model shown"]


@pytest.mark.slow
def test_resume_mid_epoch_and_at_an_epoch_boundary_is_bitwise_exact(tmp_path):
    class Stop:
        def __init__(self, epoch, step_in_epoch):
            self.epoch, self.step = epoch, step_in_epoch

        def on_log(self, trainer, step, metrics):
            if metrics["epoch"] == self.epoch and self.step is not None and step == (self.epoch - 1) * 6 + self.step:
                raise KeyboardInterrupt

        def on_epoch_end(self, trainer, epoch, record):
            if epoch == self.epoch and self.step is None:
                raise KeyboardInterrupt

    config = dict(TINY, epochs=3, ema_decay=0.7, ema_warmup=True, log_every_n_steps=1)
    straight = gpucore.train(dict(config, run_dir=str(tmp_path / "straight")))
    expected = torch.load(os.path.join(straight.checkpoint_dir, "last.pt"), weights_only=True)
    for name, stop in (("mid", Stop(2, 4)), ("boundary", Stop(2, None))):
        _, _, resumed = assert_resume_matches(tmp_path, config, stop, straight=straight, name=name)
        assert resumed.status == "completed"
        saved = torch.load(os.path.join(resumed.checkpoint_dir, "last.pt"), weights_only=True)
        for part in ("model", "model_ema", "engine"):
            assert list(saved[part]) == list(expected[part])
            assert_states_equal(saved[part], expected[part], label=f"{name}: {part}")


@pytest.mark.slow
def test_resuming_a_run_without_ema_with_ema_decay_is_an_error(tmp_path):
    gpucore.train(dict(TINY, run_dir=str(tmp_path), name="plain", epochs=1))
    last = os.path.join(str(tmp_path), "plain", "checkpoints", "last.pt")
    with pytest.raises(gpucore.ConfigError, match="holds no EMA weights"):
        gpucore.train(dict(TINY, run_dir=str(tmp_path), name="again", epochs=2, ema_decay=0.9, resume=last))


def test_a_model_that_cannot_be_copied_is_a_config_error():
    class Uncopyable(nn.Linear):
        def __deepcopy__(self, memo):
            raise TypeError("cannot pickle '_thread.lock' object")

    with pytest.raises(gpucore.ConfigError, match="ema_decay.*deepcopy of Uncopyable failed"):
        make_ema(Uncopyable(2, 2), 0.5)
