"""The C++ engine's configuration: kinds read back, torch dtypes and devices, the step counters' limit."""

import pytest
import torch
from torch import nn

from gpucore import _C
from conftest import schedule


def test_config_kinds_read_back():
    for config, kind in ((_C.LossConfig(), "dice_bce"), (_C.OptimizerConfig(), "adamw"),
                         (_C.ScheduleConfig(), "onecycle")):
        config.kind = kind
        assert config.kind == kind


def test_engine_config_takes_torch_dtypes_and_devices():
    config = _C.EngineConfig()
    assert (config.device, config.autocast_dtype, config.param_dtype) == (torch.device("cpu"), None, torch.float32)
    config.autocast_dtype, config.param_dtype = torch.bfloat16, torch.float64
    assert (config.autocast_dtype, config.param_dtype) == (torch.bfloat16, torch.float64)
    with pytest.raises(TypeError):
        config.param_dtype = "float64"
    params = [nn.Parameter(torch.zeros(2))]
    config.param_dtype = torch.int32
    with pytest.raises(_C.ConfigError, match="param_dtype must be float32 or float64, got 'int32'"):
        _C.Engine([_C.ParamGroup(params)], config)
    config.param_dtype, config.autocast_dtype = torch.float32, torch.float32
    with pytest.raises(_C.ConfigError, match="autocast_dtype must be bfloat16, float16 or None, got 'float32'"):
        _C.Engine([_C.ParamGroup(params)], config)


def test_step_counters_are_exact_to_2_24_steps_and_a_longer_run_is_refused():
    # float32 counters hold every step count up to 2^24; one more step than that would round back down.
    limit = 2**24
    counters = torch.tensor([limit - 1.0, 0.0, 0.0])
    torch.ops.gpucore.count_step(counters, torch.tensor(0.0))
    assert counters[0].item() == limit
    config = _C.EngineConfig()
    config.schedule = schedule("cosine", total_steps=limit)
    _C.Engine([_C.ParamGroup([nn.Parameter(torch.zeros(2))])], config)
    config.schedule = schedule("cosine", total_steps=limit + 1)
    with pytest.raises(_C.ConfigError, match=r"a run of 16777217 optimizer steps .* at most 16777216 \(2\^24"):
        _C.Engine([_C.ParamGroup([nn.Parameter(torch.zeros(2))])], config)
