"""A model on its device, as training and evaluation alike run it: its device, dtype and memory format
(place_model; channels-last where it is faster), and the C++ engine's settings of its forward pass
(forward_config). As device selection (select.py), these take the config keys they read, not the config."""
from __future__ import annotations

import torch
from torch import nn

from .. import _C
from .select import PrecisionPolicy


def resolve_channels_last(setting: str, device: torch.device, module: nn.Module) -> bool:
    """Config key channels_last: true, false, or auto: on for conv nets on the CPU and on CUDA, where oneDNN's and
    cuDNN's convolutions run faster channels-last (python -m bench layout: the Fashion-MNIST CNN about 1.4x on 2 EPYC
    cores; on an H100 in bf16 torchvision's ResNet-18 1.83x and ResNet-50 1.62x at 224 px, the small CNNs 0.99x).
    Other devices (MPS) keep the default layout: not measured there."""
    if setting != "auto":
        return setting == "true"
    return device.type in ("cpu", "cuda") and any(isinstance(m, nn.Conv2d) for m in module.modules())


def place_model(module: nn.Module, channels_last_setting: str, device: torch.device, policy: PrecisionPolicy) -> bool:
    """Moves `module` to `device`, in the policy's parameter dtype and the memory format config key channels_last
    (`channels_last_setting`) asks for; returns channels_last as resolved (the engine's settings need it). Training
    and evaluation alike."""
    channels_last = resolve_channels_last(channels_last_setting, device, module)
    module.to(device=device, dtype=policy.param_dtype)
    if channels_last:
        module.to(memory_format=torch.channels_last)
    return channels_last


def forward_config(task, device: str, policy, channels_last: bool, top_k: int) -> _C.EngineConfig:
    """The forward pass's settings and its metrics' (those of `task`, a gpucore.tasks.Task; config key top_k): what
    an evaluation (_C.evaluate) reads."""
    engine = _C.EngineConfig()
    engine.device = torch.device(device)
    engine.autocast_dtype = policy.autocast_dtype
    engine.param_dtype = policy.param_dtype
    engine.channels_last = channels_last
    engine.top_k = top_k
    engine.loss = task.loss_config(device)
    return engine
