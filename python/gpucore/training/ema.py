"""Config key ema_decay: the model's exponential moving average (timm's ModelEmaV3) as a second module, a copy of
the model whose parameters and buffers the C++ engine moves toward the model's after every taken optimizer step
(gpucore::ema_update, on the device). Validation evaluates it beside the model (val_ema_* metrics) and checkpoints
keep it (checkpoint.EMA_STATE)."""
from __future__ import annotations

import copy
from typing import List, Optional, Tuple

import torch
from torch import nn

from ..errors import ConfigError

VAL_EMA = "val_ema"  # the prefix of the EMA's validation metrics: val_ema_accuracy, val_ema_loss, ...
SPLITS = ("train", "val", VAL_EMA)  # the prefixes of an epoch record's metrics


def make_ema(module: nn.Module, decay: float) -> Optional[nn.Module]:
    """The EMA module (a copy of `module` as it is now, in eval mode, without gradients), or None when `decay` (config
    key ema_decay) is 0. Made after the model took its pretrained weights, device, dtype and memory format."""
    if decay == 0:
        return None
    try:
        ema = copy.deepcopy(module).eval()
    except Exception as exc:  # noqa: BLE001 - whatever the model holds that cannot be copied
        raise ConfigError(f"config key 'ema_decay': the EMA is a copy of the model, but copy.deepcopy of "
                          f"{type(module).__name__} failed ({type(exc).__name__}: {exc}); make the model copyable "
                          "or set ema_decay 0") from exc
    ema.requires_grad_(False)
    return ema


def ema_tensors(module: nn.Module, ema: Optional[nn.Module]) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
    """(averages, sources): the EMA's state tensors and the model's, pair by pair, for the engine; a tensor the
    state lists under two names (tied weights) once, so that a step averages it once."""
    if ema is None:
        return [], []
    averages, sources, seen = [], [], set()
    for source, average in zip(module.state_dict().values(), ema.state_dict().values()):
        if not isinstance(source, torch.Tensor) or source.numel() == 0 or average.data_ptr() in seen:
            continue
        seen.add(average.data_ptr())
        averages.append(average)
        sources.append(source)
    return averages, sources


def is_ema_metric(name: Optional[str]) -> bool:
    return bool(name) and name.startswith(VAL_EMA + "_")


def monitored_weights(monitor: Optional[str]) -> str:
    """Which weights a run with an EMA keeps as its model (checkpoint.WEIGHTS): "ema" when it monitors an EMA
    metric, else "raw"."""
    return "ema" if is_ema_metric(monitor) else "raw"
