"""Config loading: files, overrides, and an error that names the key for every bad input."""
import json
import os
import pathlib
import re

import pytest
import torch

import gpucore
from gpucore.config import KEYS, load_config, parse_overrides
from conftest import gpucore_command, gpucore_process


# The defaults a user meets first, pinned by hand: a change to one of these is a change users notice. Every other
# default is held to one source: config.KEYS, which the configuration reference is made from (test_docs.py).
PINNED = {
    "model": "fashion_mnist_cnn", "data": "fashion_mnist", "epochs": 10, "batch_size": 64, "loss": "cross_entropy",
    "optimizer": "adamw", "lr": 0.001, "schedule": "cosine", "precision": "auto", "device": "auto", "seed": 42,
    "cache": "auto", "transforms": [], "run_dir": "runs", "loggers": ["csv", "tensorboard"], "resume": None,
}


def reference_defaults():
    """The configuration reference the docs site is built with (docs/hooks/reference_pages.py renders it from
    config.KEYS): key -> its default column, read as YAML."""
    import importlib.util
    import re

    import yaml

    hook = pathlib.Path(__file__).resolve().parents[2] / "docs" / "hooks" / "reference_pages.py"
    spec = importlib.util.spec_from_file_location("reference_pages", hook)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = re.findall(r"^\| `([a-z_0-9]+)`\{ #[a-z_0-9]+ \} \| [a-z]+ \| `([^`]*)` \|", module.config_page(), re.M)
    return {key: yaml.safe_load(default) for key, default in rows}


def same(value, expected):
    if isinstance(expected, str) and isinstance(value, bool):  # YAML's false for a key of auto/true/false, as loaded
        value = "true" if value else "false"
    if isinstance(expected, float) and not isinstance(value, bool):
        return isinstance(value, (int, float, str)) and float(value) == expected
    return value == expected and type(value) is type(expected)


def test_pinned_defaults_and_every_key_documented_with_its_default():
    config = load_config()
    for name, expected in PINNED.items():
        assert same(getattr(config, name), expected), f"{name}: {getattr(config, name)!r}, expected {expected!r}"
    assert config.name == "fashion_mnist_cnn"  # an unnamed run is named after its model
    documented = reference_defaults()
    assert sorted(documented) == sorted(k.name for k in KEYS), "the configuration reference lacks or has extra keys"
    for key in KEYS:
        assert same(documented[key.name], key.default), (
            f"reference: {key.name}'s default is {documented[key.name]!r}, not {key.default!r}")


def test_yaml_json_dict_and_overrides(tmp_path):
    (tmp_path / "c.yaml").write_text("epochs: 3\nlr: 1e-2\ntf32: true\nbetas: [0.8, 0.9]\n")
    (tmp_path / "c.json").write_text(json.dumps({"epochs": 4, "use_cuda": False}))
    from_yaml = load_config(str(tmp_path / "c.yaml"), parse_overrides(["batch_size=32", "precision=32"]))
    assert (from_yaml.epochs, from_yaml.lr, from_yaml.tf32, from_yaml.batch_size) == (3, 0.01, "true", 32)
    assert from_yaml.betas == [0.8, 0.9] and from_yaml.name == "c"
    from_json = load_config(str(tmp_path / "c.json"))
    assert from_json.epochs == 4 and from_json.no_cuda  # a classifier project's use_cuda: false
    assert load_config({"epochs": 2}, {"epochs": "5"}).epochs == 5
    assert load_config(from_yaml).to_dict() == from_yaml.to_dict()


@pytest.mark.parametrize("values,pattern", [
    ({"lerning_rate": 1}, r"unknown config key 'lerning_rate'.*Did you mean 'lr'"),
    ({"batchsize": 1}, r"Did you mean 'batch_size'"),
    ({"epochs": "three"}, r"'epochs' must be an integer, got str 'three'"),
    ({"epochs": 0}, r"'epochs' is 0; it must be > 0"),
    ({"lr": -1}, r"'lr' is -1.0; it must be > 0"),
    ({"optimizer": "adagrad"}, r"'optimizer' is 'adagrad'; valid values: sgd, adam, adamw"),
    ({"betas": [0.9]}, r"'betas'.*two numbers"),
    ({"shuffle": "maybe"}, r"'shuffle' must be true or false"),
    ({"model_kwargs": 3}, r"'model_kwargs' must be a mapping"),
    ({"lr": float("nan")}, r"'lr' must be a finite number"),
])
def test_bad_values_name_the_key(values, pattern):
    with pytest.raises(gpucore.ConfigError, match=pattern):
        load_config(values)


def test_bad_files(tmp_path):
    with pytest.raises(gpucore.ConfigError, match="does not exist"):
        load_config(str(tmp_path / "missing.yaml"))
    (tmp_path / "bad.yaml").write_text("epochs: [1,\n")
    with pytest.raises(gpucore.ConfigError, match="bad.yaml' is not valid YAML"):
        load_config(str(tmp_path / "bad.yaml"))
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(gpucore.ConfigError, match="must hold a mapping"):
        load_config(str(tmp_path / "list.json"))
    (tmp_path / "c.toml").write_text("")
    with pytest.raises(gpucore.ConfigError, match=r"\.yaml, \.yml or \.json"):
        load_config(str(tmp_path / "c.toml"))
    with pytest.raises(gpucore.ConfigError, match="key=value"):
        parse_overrides(["epochs"])


@pytest.mark.parametrize("text, pattern", [
    ("null: 3\n", "config keys are names, got NoneType None as a key"),
    ("1: 3\n", "config keys are names, got int 1 as a key"),
    ("true: 3\n", "config keys are names, got bool True as a key"),
    ("epochs: 9223372036854775808\n", "'epochs' is 9223372036854775808, out of range: integers must be below 2\\^63"),
    ("growth_interval: -9223372036854775809\n", "'growth_interval' .* out of range"),
    ("seed: 1.0e+30\n", "'seed' is 1e\\+30, out of range"),
    ("epochs: 3\nlr: 0.1\nepochs: 4\n", "key 'epochs' is given twice \\(again on line 3\\)"),
    ("data_kwargs: {train_size: 5, train_size: 6}\n", "key 'train_size' is given twice"),
    ("milestones: [true]\n", "'milestones' is \\[True\\]; it must be a list of positive integers"),
    ("betas: [true, 0.9]\n", "'betas' is \\[True, 0.9\\]"),
])
def test_hostile_config_files_name_the_key(tmp_path, text, pattern):
    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(gpucore.ConfigError, match="c.yaml'.*" + pattern):
        load_config(str(tmp_path / "c.yaml"))


def test_config_files_not_utf8_and_json_duplicates(tmp_path):
    (tmp_path / "latin1.yaml").write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(gpucore.ConfigError, match=r"latin1.yaml' is not UTF-8 text \(byte 0xe9 at offset 9\)"):
        load_config(str(tmp_path / "latin1.yaml"))
    (tmp_path / "twice.json").write_text('{"epochs": 3, "epochs": 4}')
    with pytest.raises(gpucore.ConfigError, match="twice.json': key 'epochs' is given twice"):
        load_config(str(tmp_path / "twice.json"))


def test_training_input_errors(tmp_path):
    # Small generated data: each error comes from the config, the model or the data's kind, not from its size.
    run = {"run_dir": str(tmp_path), "progress": False, "epochs": 1, "data": "synthetic_fashion",
           "data_kwargs": {"train_size": 64, "val_size": 16}}
    with pytest.raises(gpucore.ConfigError, match=r"'fashion_mnist' is not a built-in model.*Did you mean 'fashion_mnist_cnn'"):
        gpucore.train(dict(run, model="fashion_mnist"))
    with pytest.raises(gpucore.ConfigError, match="cannot import module 'no_such_pkg.models'"):
        gpucore.train(dict(run, model="no_such_pkg.models:net"))
    with pytest.raises(gpucore.ConfigError, match="model_kwargs' does not fit"):
        gpucore.train(dict(run, model_kwargs={"colours": 3}))
    with pytest.raises(gpucore.ConfigError, match="neither a built-in data set"):
        gpucore.train(dict(run, data=str(tmp_path / "nothing_here"), data_kwargs={}))
    with pytest.raises(gpucore.ConfigError, match=r"model's output has shape \[8, 10\]"):
        gpucore.train(dict(run, batch_size=8, heads=3, loss="multilabel_soft_margin"))
    with pytest.raises(gpucore.ConfigError, match="'monitor': 'val_f1' is never reported with loss 'cross_entropy'; "
                                                  "reported: train_loss, train_accuracy, train_top5_accuracy, val_loss"):
        gpucore.train(dict(run, monitor="val_f1"))
    assert not os.path.exists(tmp_path / "fashion_mnist_cnn" / "metrics.jsonl")  # refused before training
    with pytest.raises(gpucore.ConfigError, match="'monitor': 'val_loss' is never reported with loss 'cross_entropy' "
                                                  "and no validation data"):
        gpucore.train(dict(run, data_kwargs={"train_size": 64, "val_size": 0}, val_fraction=0, monitor="val_loss"))
    with pytest.raises(gpucore.ConfigError, match="'heads' \\(4\\) is used by loss multilabel_soft_margin only"):
        gpucore.train(dict(run, heads=4))
    for size in ({"train_size": 0}, {"train_size": -3}, {"val_size": -1}):
        with pytest.raises(gpucore.ConfigError, match="data_kwargs': (train|val)_size of data set 'synthetic_fashion' "
                                                      "must be an integer >= [01]"):
            gpucore.train(dict(run, data_kwargs=size))
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
    x, y = torch.randn(32, 16), torch.randint(0, 3, (32,))
    with pytest.warns(RuntimeWarning, match="'top_k' is 3, but the model has at most that many classes"):
        gpucore.train(dict(run, name="topk", top_k=3), model=net, train_data=(x, y))
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(gpucore.ConfigError,
                       match="'run_dir': cannot create .*a_file/fashion_mnist_cnn' \\(Not a directory\\)"):
        gpucore.train(dict(run, run_dir=str(blocker)))
    with pytest.raises(gpucore.ConfigError, match="cuda_graphs.*valid.*auto"):
        gpucore.train(dict(run, cuda_graphs="sometimes"))
    with pytest.raises(gpucore.ConfigError, match="does not exist"):
        gpucore.train(dict(run, resume=str(tmp_path / "nope.pt")))


def test_npz_and_npy_data(tmp_path):
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, (200, 28, 28), dtype=np.uint8)
    y = rng.integers(0, 10, 200)
    np.savez(tmp_path / "data.npz", x_train=x[:160], y_train=y[:160], x_test=x[160:], y_test=y[160:])
    result = gpucore.train(dict(run_dir=str(tmp_path), progress=False, epochs=1, data=str(tmp_path / "data.npz")))
    # validated on x_test: the trained model's accuracy on it, computed here (normalised by x_train's statistics)
    train_images = torch.from_numpy(x[:160])[:, None]
    mean, std = (torch.tensor(v)[:, None, None] for v in gpucore.data.tensor_inputs.input_stats(train_images))
    with torch.no_grad():
        predicted = result.model.eval().cpu()((torch.from_numpy(x[160:])[:, None].float() / 255 - mean) / std).argmax(1)
    expected = (predicted == torch.from_numpy(y[160:])).float().mean().item()
    assert result.history[0]["val_accuracy"] == pytest.approx(expected, abs=0.026)  # (one of 40 may flip)
    folder = tmp_path / "arrays"
    folder.mkdir()
    np.save(folder / "x.npy", x)
    np.save(folder / "y.npy", y)
    result = gpucore.train(dict(run_dir=str(tmp_path), progress=False, epochs=1, data=str(folder), val_fraction=0.25))
    assert result.steps == 3  # 150 training samples in batches of 64
    np.save(folder / "y.npy", y[:10])
    with pytest.raises(gpucore.ConfigError, match=r"x.npy: 200 inputs but 10 targets"):
        gpucore.train(dict(run_dir=str(tmp_path), progress=False, epochs=1, data=str(folder), val_fraction=0))


@pytest.mark.slow
def test_cli_train_and_resume(tmp_path, capsys):
    config = tmp_path / "tiny.yaml"
    config.write_text(
        f"epochs: 2\nschedule: constant\nrun_dir: {tmp_path / 'runs'}\nprogress: false\nreport: false\n"
        "data: synthetic_fashion\ndata_kwargs: {train_size: 128, val_size: 32}\n"
    )
    result = gpucore_command(capsys, "train", str(config), "--set", "epochs=1")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["status"] == "completed" and summary["run_dir"].endswith("tiny")
    resumed = gpucore_command(capsys, "train", str(config), "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr
    history = [json.loads(line) for line in open(tmp_path / "runs" / "tiny" / "metrics.jsonl")]
    assert [row["epoch"] for row in history] == [1, 2]


@pytest.mark.slow
def test_cli_train_errors_exit_2(tmp_path):  # a gpucore process: its own stderr, no traceback
    result = gpucore_process("train", "--set", "epocs=1")
    assert result.returncode == 2
    assert "Did you mean 'epochs'" in result.stderr
    assert "Traceback" not in result.stderr


def test_example_configs_load():
    import pathlib

    folder = pathlib.Path(__file__).resolve().parents[2] / "examples" / "configs"
    configs = sorted(folder.glob("*.yaml"))
    assert configs
    for path in configs:
        config = load_config(str(path))
        assert config.name == path.stem


def test_set_accepts_json_and_yaml_flow_for_lists_and_mappings():
    config = load_config(None, parse_overrides(["data_kwargs={size: [20, 20], threads: 2}", "milestones=[3, 6]"]))
    assert config.data_kwargs == {"size": [20, 20], "threads": 2} and config.milestones == [3, 6]
    assert load_config(None, parse_overrides(['model_kwargs={"width": 8}'])).model_kwargs == {"width": 8}
    with pytest.raises(gpucore.ConfigError, match=r"'data_kwargs' must be a mapping \(JSON or YAML flow"):
        load_config(None, parse_overrides(["data_kwargs=[1, 2"]))


def test_the_four_toggles_take_the_cores_one_list_of_values():
    from gpucore import _C
    from gpucore.config import KEY_BY_NAME
    from gpucore.device.select import TOGGLES

    toggles = ("tf32", "cudnn_benchmark", "channels_last", "cuda_graphs")
    assert all(_C.config_choices()[key] == list(TOGGLES) == ["auto", "true", "false"] for key in toggles)
    assert all(KEY_BY_NAME[key].choices == list(TOGGLES) and KEY_BY_NAME[key].default == "auto" for key in toggles)
    with pytest.raises(gpucore.ConfigError, match="config key 'cuda_graphs' is 'maybe'; valid values: auto, true, false"):
        load_config({"cuda_graphs": "maybe"})
    with pytest.raises(gpucore.ConfigError, match="tf32 must be auto, true or false; got int 1"):
        gpucore.resolve_precision("32", "cpu", tf32=1)


def test_every_loss_the_core_parses_belongs_to_a_task():
    from gpucore.config import KEY_BY_NAME
    from gpucore.tasks import TASKS

    assert sorted({loss for task in TASKS for loss in task.losses}) == sorted(KEY_BY_NAME["loss"].choices)
    assert KEY_BY_NAME["loss"].choices[0] == "cross_entropy" and "ctc" in KEY_BY_NAME["loss"].choices


# The numeric keys the C++ core checks too, with their valid values written out here by hand: config.py reads these
# ranges (and the defaults) from the core (_C.config_ranges, _C.config_defaults).
# Those whose default is config.py's alone, with the valid values config.py's message gives.
DEFAULT_IN_PYTHON = {"cutmix_minmax": "two numbers in (0, 1], min < max", "crop_padding": "in [0, 65536) (pixels)",
                     "batch_size": "in [1, 2^31) (samples)", "eval_batch_size": "in [1, 2^31) (samples)"}
# Those a batch source checks (its batch_size, a FileBatches' prefetch), not the engine: a value just outside and the
# one inside at that bound.
BATCH_SOURCE_BOUNDS = {"batch_size": (0, 1), "eval_batch_size": (2**31, 2**31 - 1), "prefetch": (0, 1)}
# For each, a value just outside its range and the one inside at that bound.
BOUNDS = {
    "accumulate_grad_batches": (0, 1), "clip_grad_norm": (-0.5, 0.0), "clip_grad_value": (-0.5, 0.0),
    "log_every_n_steps": (0, 1), "max_nonfinite_steps": (0, 1), "label_smoothing": (1.0, 0.99),
    "lr": (0.0, 1e-9), "gamma": (0.0, 1e-9), "min_lr": (-0.5, 0.0), "pct_start": (1.0, 0.99), "div_factor": (0.0, 1e-9),
    "final_div_factor": (0.0, 1e-9), "mixup_alpha": (-0.5, 0.0), "cutmix_alpha": (-0.5, 0.0), "mixup_prob": (1.5, 1.0),
    "mixup_switch_prob": (-0.5, 0.0), "ema_decay": (1.0, 0.99), "ema_warmup_gamma": (0.0, 1e-9),
    "ema_warmup_power": (0.0, 1e-9),
}

def core_ranges() -> dict:
    """The numeric keys' ranges as the C++ core checks them (csrc/include/gpucore/ranges.h), as text."""
    from gpucore import _C

    return {key: str(valid) for key, valid in _C.config_ranges().items()}


# What the core's check calls a key that an op checks under its own argument's name.
CHECKED_AS = {"label_smoothing": "mix_targets: smoothing"}


def test_config_pys_ranges_and_defaults_of_numeric_keys_are_the_cores():
    from gpucore import _C
    from gpucore.config import KEY_BY_NAME

    ranges = core_ranges()
    # each key the core checks has its bounds tested below (cutmix_minmax and crop_padding by their own tests)
    assert sorted(ranges) == sorted({*BOUNDS, *DEFAULT_IN_PYTHON, *BATCH_SOURCE_BOUNDS})
    assert _C.config_defaults() == {key: KEY_BY_NAME[key].default for key in ranges if key not in DEFAULT_IN_PYTHON}
    for key in ranges:
        assert KEY_BY_NAME[key].valid == DEFAULT_IN_PYTHON.get(key, ranges[key])
        assert type(KEY_BY_NAME[key].default) is KEY_BY_NAME[key].type or key in DEFAULT_IN_PYTHON
    assert "after 3 eager warm-up steps" in KEY_BY_NAME["cuda_graphs"].doc  # the engine's graph_warmup_steps


@pytest.mark.parametrize("key", sorted(BOUNDS))
def test_a_numeric_key_out_of_the_cores_range_gets_config_pys_message_and_fails_the_cores_check(key):
    # config.py's message is the one a user sees; the engine, handed the value past config.py (an unchecked
    # dataclasses.replace), refuses it too: its invariant (a RuntimeError, not a ConfigError) on the same range.
    import dataclasses

    from gpucore import _C
    from gpucore.device.select import resolve_precision
    from gpucore.tasks import task_of
    from gpucore.training.engine_config import engine_config

    outside, inside = BOUNDS[key]
    assert getattr(load_config({key: inside}), key) == inside
    with pytest.raises(gpucore.ConfigError) as refused:
        load_config({key: outside})
    assert str(refused.value) == f"config: config key '{key}' is {outside!r}; it must be {core_ranges()[key]}"

    # Mixing on, so that label_smoothing reaches its check (the mix_targets op's).
    config = dataclasses.replace(load_config({"mixup_alpha": 1.0, "optimizer": "sgd", "schedule": "constant"}),
                                 **{key: outside})
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
    x, y = torch.randn(4, 4), torch.randint(0, 3, (4,))
    with pytest.raises(RuntimeError, match=rf"{CHECKED_AS.get(key, key)} must be {re.escape(core_ranges()[key])}, got"):
        engine = _C.Engine([_C.ParamGroup(list(model.parameters()))],
                           engine_config(config, task_of(config), "cpu", resolve_precision("32", "cpu"),
                                         steps_per_epoch=1, channels_last=False, lr=config.lr))
        engine.train_epoch(_C.TensorBatches(x, y, 4, False, False, 0, torch.device("cpu")), model, None, None)


@pytest.mark.parametrize("key", sorted(BATCH_SOURCE_BOUNDS))
def test_a_batch_key_out_of_the_cores_range_gets_config_pys_message_and_the_batch_source_refuses_it(key):
    from gpucore import _C

    outside, inside = BATCH_SOURCE_BOUNDS[key]
    assert getattr(load_config({key: inside}), key) == inside
    with pytest.raises(gpucore.ConfigError) as refused:
        load_config({key: outside})
    valid = DEFAULT_IN_PYTHON.get(key, core_ranges()[key])
    assert str(refused.value) == f"config: config key '{key}' is {outside!r}; it must be {valid}"
    if key == "prefetch":  # a FileBatches' check (test_streaming: "prefetch must be >= 1, got 0")
        assert valid == ">= 1"
        return
    # batch_size and eval_batch_size reach the core as a batch source's batch_size
    x, y = torch.randn(4, 2), torch.randint(0, 3, (4,))
    with pytest.raises(gpucore.ConfigError, match=re.escape(f"batch_size must be in [1, 2^31), got {outside}")):
        _C.TensorBatches(x, y, outside, False, False, 0, torch.device("cpu"))
    assert _C.TensorBatches(x, y, inside, False, False, 0, torch.device("cpu")).remaining() == -(-4 // inside)


def test_crop_padding_out_of_the_cores_range_gets_config_pys_message_and_randomcrop_refuses_it_too():
    with pytest.raises(gpucore.ConfigError, match=re.escape("config key 'crop_padding' is 65536; it must be in [0, 65536) "
                                                            "(pixels)")):
        load_config({"crop_padding": 65536})
    assert load_config({"crop_padding": 65535}).crop_padding == 65535
    with pytest.raises(gpucore.ConfigError, match=re.escape("RandomCrop: argument 'padding' must be integers in [0, 65536), "
                                                            "got 65536")):
        load_config({"transforms": [{"RandomCrop": {"size": 8, "padding": 65536}}]})


def test_cutmix_minmax_out_of_the_cores_range_gets_config_pys_message():
    for outside in ([0.0, 0.5], [0.5, 1.5], [0.6, 0.4]):
        with pytest.raises(gpucore.ConfigError, match=re.escape(f"config key 'cutmix_minmax' is {outside!r}; it must be "
                                                               "two numbers in (0, 1], min < max")):
            load_config({"cutmix_minmax": outside})
    assert load_config({"cutmix_minmax": [0.1, 1.0]}).cutmix_minmax == [0.1, 1.0]


def test_the_config_is_typed_and_frozen_and_set_takes_dotted_keys(tmp_path):
    import dataclasses
    import typing

    from gpucore.config import KEYS

    path = tmp_path / "run.yaml"
    path.write_text("data: synthetic_fashion\ndata_kwargs: {train_size: 600, seed: 4}\nlr: 0.01\n")
    config = load_config(str(path), parse_overrides(["data_kwargs.train_size=12000", "model_kwargs.a.b=[1, 2]"]))
    assert config.data_kwargs == {"train_size": 12000, "seed": 4} and config.model_kwargs == {"a": {"b": [1, 2]}}
    hints = typing.get_type_hints(type(config))
    assert all(hints[key.name] == (typing.Optional[key.type] if key.optional else key.type) for key in KEYS)
    assert hints["lr"] is float and hints["epochs"] is int and hints["resume"] == typing.Optional[str]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.batch_size = 8
    with pytest.raises(gpucore.ConfigError, match="'lr.x' sets an entry of a mapping; config key 'lr' is a finite number"):
        load_config(None, parse_overrides(["lr.x=1"]))
    with pytest.raises(gpucore.ConfigError, match="entry 'train_size' of config key 'data_kwargs' is 600, not a mapping"):
        load_config(str(path), parse_overrides(["data_kwargs.train_size.x=1"]))
    with pytest.raises(gpucore.ConfigError, match="unknown config key 'data_kwarg'. Did you mean 'data_kwargs'"):
        load_config(None, parse_overrides(["data_kwarg.train_size=1"]))
