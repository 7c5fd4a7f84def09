"""The C++ engine's learning-rate schedules against PyTorch's schedulers: cosine, step, multistep, onecycle, warm-up,
and the schedules' validation."""

import pytest
import torch
from torch import nn

from gpucore import _C
from conftest import schedule


def lrs(config, steps):
    return [_C.learning_rate(config, torch.tensor(float(s))).item() for s in range(steps)]


def torch_lrs(make_scheduler, steps, lr=0.1):
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=lr)
    scheduler = make_scheduler(optimizer)
    values = []
    for _ in range(steps):
        values.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return values


@pytest.mark.parametrize("ours,theirs", [
    (schedule("cosine", base_lr=0.1, total_steps=50, min_lr=0.001),
     lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=50, eta_min=0.001)),
    (schedule("step", base_lr=0.1, total_steps=50, step_size=7, gamma=0.5),
     lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=7, gamma=0.5)),
    (schedule("multistep", base_lr=0.1, total_steps=50, milestones=[10, 25, 40], gamma=0.3),
     lambda o: torch.optim.lr_scheduler.MultiStepLR(o, milestones=[10, 25, 40], gamma=0.3)),
    (schedule("onecycle", base_lr=0.1, total_steps=50, pct_start=0.3),
     lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=50, pct_start=0.3,
                                                   cycle_momentum=False)),
])
def test_schedules_match_torch(ours, theirs):
    assert lrs(ours, 50) == pytest.approx(torch_lrs(theirs, 50), rel=1e-5, abs=1e-8)


def test_linear_warmup_then_constant():
    values = lrs(schedule("constant", base_lr=0.1, warmup_steps=4, total_steps=20), 8)
    assert values == pytest.approx([0.025, 0.05, 0.075, 0.1, 0.1, 0.1, 0.1, 0.1])


@pytest.mark.parametrize("values,message", [
    ({"kind": "cosine", "warmup_steps": 10, "total_steps": 10}, "warm-up"),
    ({"kind": "onecycle", "warmup_steps": 2, "total_steps": 10}, "own warm-up"),
    ({"kind": "multistep", "milestones": [5, 3], "total_steps": 10}, "increasing"),
])
def test_schedule_validation(values, message):
    config = schedule(values.pop("kind"), **values)
    with pytest.raises(_C.ConfigError, match=message):
        _C.learning_rate(config, torch.tensor(0.0))
