"""Numbers a config key accepts must reach the C++ engine intact: out-of-range values end in a ConfigError naming
the key and its range, never in a pybind11 TypeError (int64 overflow) or a crash in a kernel."""
import pytest
import torch

import gpucore
from gpucore.config import load_config

IN_STEPS = r"\(the engine counts them in int64 optimizer steps\)"


@pytest.mark.parametrize("key, value, valid", [
    ("warmup_epochs", 2e30, r">= 0 and < 2\^31 " + IN_STEPS),
    ("warmup_epochs", float(2**31), r">= 0 and < 2\^31 " + IN_STEPS),
    ("epochs", 2**62, r"> 0 and < 2\^31 " + IN_STEPS),
    ("epochs", 2**31, r"> 0 and < 2\^31 " + IN_STEPS),
    ("step_size", 2**40, r"> 0 and < 2\^31 " + IN_STEPS),
    ("milestones", [5, 2**40], r"a list of positive integers below 2\^31 " + IN_STEPS),
    ("crop_padding", 2**62, r"in \[0, 65536\) \(pixels\)"),
    ("dist_timeout", 2**62, r"> 0 and < 2\^31 \(seconds\)"),
])
def test_out_of_range_numbers_name_the_key_and_its_range(key, value, valid):
    with pytest.raises(gpucore.ConfigError, match=rf"config key '{key}' is .*; it must be {valid}"):
        load_config({key: value})


def test_the_largest_accepted_values_load():
    config = load_config({"epochs": 2**31 - 1, "warmup_epochs": 2**31 - 1, "step_size": 2**31 - 1,
                          "milestones": [1, 2**31 - 1], "crop_padding": 65535})
    assert (config.epochs, config.step_size, config.milestones, config.crop_padding) == (
        2**31 - 1, 2**31 - 1, [1, 2**31 - 1], 65535)


@pytest.mark.parametrize("keys", [{"warmup_epochs": 2e30}, {"epochs": 2**62}, {"step_size": 2**62, "schedule": "step"},
                                  {"milestones": [2**62], "schedule": "multistep"}])
def test_training_with_out_of_range_numbers_stops_with_a_config_error_before_the_engine(tmp_path, keys):
    # Each of these once reached the engine's binding: "TypeError: incompatible function arguments". (crop_padding
    # 2^62 reached the augment kernel, which crashed: load_config's check above keeps it out.)
    x, y = torch.randn(32, 1, 8, 8), torch.randint(0, 10, (32,))
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    with pytest.raises(gpucore.ConfigError, match=f"config key '{next(iter(keys))}' is"):
        gpucore.train(dict(keys, epochs=keys.get("epochs", 1), device="cpu", progress=False, report=False,
                           val_fraction=0.0, run_dir=str(tmp_path)), model=model, train_data=(x, y))
