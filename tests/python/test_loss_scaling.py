"""The C++ engine's loss scaling against PyTorch: non-finite steps skipped with the scale halved and the schedule
held, the scale's growth, clipping on unscaled gradients, init_scale and growth_interval from the config."""

import pytest
import torch
from torch import nn

from gpucore import _C
from conftest import batches, engine


def test_scaler_skips_inf_steps_halves_the_scale_and_holds_the_schedule():
    model = nn.Linear(4, 3)
    x, y = torch.randn(12, 4), torch.randint(0, 3, (12,))
    eng = engine(list(model.parameters()), scaler=True)
    calls = {"n": 0}

    def loss(output, target):
        calls["n"] += 1
        value = nn.functional.cross_entropy(output, target)
        return value * float("inf") if calls["n"] == 2 else value  # the second of three steps overflows

    logged = []
    weights = []
    hook = lambda m, steps: (logged.append(dict(m)), weights.append(model.weight.detach().clone()))
    stats = eng.train_epoch(batches(x, y, 4), model, loss, hook)
    assert eng.step_counts() == (2, 1)
    assert [m["loss_scale"] for m in logged] == [65536.0, 32768.0, 32768.0]
    assert torch.equal(weights[0], weights[1])      # the skipped step changed nothing
    assert not torch.equal(weights[1], weights[2])
    # the step schedule halves per taken step: after 2 taken steps lr is 0.25, not 0.125
    assert stats["metrics"]["lr"] == pytest.approx(0.25)


def test_scale_grows_after_growth_interval_good_steps():
    model = nn.Linear(4, 3)
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    eng = engine(list(model.parameters()), scaler=True)
    stats = eng.train_epoch(batches(x, y, 4), model, None, None)
    assert stats["metrics"]["loss_scale"] == 65536.0 * 4  # growth_interval 2, 4 good steps


def test_clipping_sees_unscaled_gradients():
    torch.manual_seed(0)
    model, reference = nn.Linear(8, 4), nn.Linear(8, 4)
    reference.load_state_dict(model.state_dict())
    x, y = torch.randn(16, 8) * 10, torch.randint(0, 4, (16,))
    eng = engine(list(model.parameters()), scaler=True, clip=0.5, lr=1.0)
    eng.train_epoch(batches(x, y, 16), model, None, None)
    nn.functional.cross_entropy(reference(x), y).backward()
    norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5)
    assert norm > 0.5  # the clip was active
    with torch.no_grad():
        for p in reference.parameters():
            p -= 1.0 * p.grad
    for a, b in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_init_scale_and_growth_interval_reach_the_engines_scaler():
    # Loss scaling is on for 16-mixed on a GPU; here the CPU engine with the scaler on, built from config keys:
    # after 7 good steps the scale is init_scale doubled once per growth_interval (3) good steps.
    from types import SimpleNamespace

    import gpucore
    from gpucore.config import load_config
    from gpucore.tasks import task_of
    from gpucore.training.engine_config import engine_config

    config = load_config({"init_scale": 1024.0, "growth_interval": 3, "optimizer": "sgd", "schedule": "constant"})
    cpu = gpucore.resolve_precision("32", "cpu")
    policy = SimpleNamespace(autocast_dtype=cpu.autocast_dtype, param_dtype=cpu.param_dtype, loss_scaling=True)
    model = nn.Linear(4, 3)
    eng = _C.Engine([_C.ParamGroup(list(model.parameters()), weight_decay=0.0)],
                    engine_config(config, task_of(config), "cpu", policy, steps_per_epoch=7, channels_last=False,
                                  lr=config.lr))
    generator = torch.Generator().manual_seed(7)
    x, y = torch.randn(28, 4, generator=generator), torch.randint(0, 3, (28,), generator=generator)
    stats = eng.train_epoch(batches(x, y, 4), model, None, None)
    assert eng.step_counts() == (7, 0)
    assert stats["metrics"]["loss_scale"] == 1024.0 * 2 ** (7 // 3)
