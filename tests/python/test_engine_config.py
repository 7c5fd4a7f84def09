"""The C++ engine's configuration: kinds read back, torch dtypes and devices, the step counters' limit, its defaults
config.py's."""

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


# config.py's keys (their defaults the user-facing truth) and the C++ settings they become (engine_config.py,
# placement.forward_config, Task.loss_config, epoch_data.py), by _C.default_settings()'s dotted names.
SETTING_OF_KEY = {
    "accumulate_grad_batches": "accumulate_grad_batches", "clip_grad_norm": "clip_grad_norm",
    "clip_grad_value": "clip_grad_value", "log_every_n_steps": "log_every_n_steps",
    "max_nonfinite_steps": "max_nonfinite_steps", "top_k": "top_k",
    "loss": "loss.kind", "label_smoothing": "loss.label_smoothing", "heads": "loss.heads",
    "ignore_index": "loss.ignore_index", "class_weights": "loss.class_weights",
    "optimizer": "optimizer.kind", "momentum": "optimizer.momentum", "nesterov": "optimizer.nesterov",
    "eps": "optimizer.eps", "weight_decay": "param_group.weight_decay",
    "schedule": "schedule.kind", "lr": "schedule.base_lr", "gamma": "schedule.gamma", "min_lr": "schedule.min_lr",
    "pct_start": "schedule.pct_start", "div_factor": "schedule.div_factor",
    "final_div_factor": "schedule.final_div_factor", "milestones": "schedule.milestones",
    "init_scale": "scaler.init_scale", "growth_interval": "scaler.growth_interval",
    "mixup_alpha": "mixup.mixup_alpha", "cutmix_alpha": "mixup.cutmix_alpha", "cutmix_minmax": "mixup.cutmix_minmax",
    "mixup_prob": "mixup.prob", "mixup_switch_prob": "mixup.switch_prob", "mixup_mode": "mixup.mode",
    "cutmix_correct_lam": "mixup.correct_lam", "seed": "mixup.seed",
    "ema_decay": "ema.decay", "ema_warmup": "ema.warmup", "ema_warmup_gamma": "ema.warmup_gamma",
    "ema_warmup_power": "ema.warmup_power", "prefetch": "file_batches.prefetch",
}
# The C++ settings that are no key's value as it is, and why: resolved from a key (auto), counted in optimizer steps
# where the key counts epochs, or the core's own.
NOT_A_KEYS_VALUE = {
    "device": "resolved from keys device, no_cuda, no_mps",
    "autocast_dtype": "resolved from key precision", "param_dtype": "resolved from key precision",
    "scaler.enabled": "resolved from key precision (16-mixed)",
    "channels_last": "key channels_last resolved (auto, true, false)",
    "cuda_graphs": "key cuda_graphs resolved (auto, true, false)",
    "graph_warmup_steps": "the engine's own",
    "schedule.warmup_steps": "optimizer steps: key warmup_epochs x steps per epoch",
    "schedule.total_steps": "optimizer steps: key epochs x steps per epoch",
    "schedule.step_size": "optimizer steps: key step_size (epochs) x steps per epoch",
    "scaler.growth_factor": "torch's, no key", "scaler.backoff_factor": "torch's, no key",
    "mixup.enabled": "derived: any of mixup_alpha, cutmix_alpha, cutmix_minmax on",
    "param_group.lr_scale": "derived from keys lr_backbone and lr_layer_decay (the head's: 1)",
    "loss.sequence_lengths": "the data's (its sequence_lengths_in_target)",
    "loss.temporal_stride": "the model's (its temporal_stride attribute)",
    "loss.undecoded_class": "derived from key vocabulary: its '<unk>', never decoded",
    **{f"file_batches.{name}": "the image-folder reader's (data_kwargs)" for name in
       ("channels", "height", "width", "resize", "threads", "skip_errors", "exif_orientation", "own_sizes", "decode")},
}
# The key's default in the C++ setting's form: betas is two settings; no class weights and no cutmix_minmax are the
# C++ setting's undefined tensor and empty list; an unset ignore_index is torch's -100 where the data are no
# segmentation folder (a run resolves it from its data).
AS_SETTING = {"class_weights": {"none": None}, "cutmix_minmax": {None: []}, "ignore_index": {None: -100}}


def test_the_cpp_settings_defaults_are_config_pys():
    from gpucore.config import load_config

    config = load_config()
    settings = _C.default_settings()
    # every C++ setting is a key's or says why not, so that a new one cannot go unchecked
    assert sorted(settings) == sorted({*SETTING_OF_KEY.values(), "optimizer.beta1", "optimizer.beta2",
                                       *NOT_A_KEYS_VALUE})
    theirs = {key: settings[setting] for key, setting in SETTING_OF_KEY.items()}
    theirs["betas"] = [settings["optimizer.beta1"], settings["optimizer.beta2"]]
    ours = {key: getattr(config, key) for key in theirs}
    for key, forms in AS_SETTING.items():
        ours[key] = forms.get(ours[key], ours[key])
    # {key: (config.py's default, the C++ default)} of each that differs
    assert {key: (ours[key], value) for key, value in theirs.items() if value != ours[key]} == {}
