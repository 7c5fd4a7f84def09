"""Segmentation models of the libraries people use, by name: Hugging Face transformers
(`transformers:SegformerForSemanticSegmentation`, any of its vision classes), segmentation_models_pytorch (`smp:Unet`,
`smp:FPN`, `smp:DeepLabV3Plus`, `smp:Segformer`, ...) and torchvision's (`torchvision:deeplabv3_resnet50`, `fcn_*`,
`lraspp_*`), all randomly initialised (config key `pretrained` loads weights; nothing is ever downloaded).

Their outputs become one logits tensor, by one rule (`logits_of`): a tensor as it is; an object with `.logits`
(transformers' ModelOutput); a mapping's "out" (torchvision's segmentation models; their "aux" is left out); then
logits of 4 dimensions smaller than the input (SegFormer predicts at 1/4 of it) are resized bilinearly to the input's
height and width, which is the masks' size, before the loss and the metrics see them."""
from __future__ import annotations

import difflib
import inspect
import os
from typing import Dict, Optional, Type

import torch
from torch import nn
from torch.nn import functional as F

from ..errors import ConfigError
from .downloads import refuse_downloads

LIBRARIES = ("transformers", "smp")



def logits_of(output, inputs: torch.Tensor) -> torch.Tensor:
    """The logits tensor of a model's output, by the rule in this module's docstring."""
    if not isinstance(output, torch.Tensor):
        if hasattr(output, "logits"):
            output = output.logits
        elif isinstance(output, dict) and "out" in output:
            output = output["out"]
    if isinstance(output, torch.Tensor) and output.dim() == 4 and inputs.dim() == 4 and (
            output.shape[-2] < inputs.shape[-2] or output.shape[-1] < inputs.shape[-1]):
        output = F.interpolate(output, size=inputs.shape[-2:], mode="bilinear", align_corners=False)
    return output


_TENSOR_OUTPUT_CLASSES: Dict[type, type] = {}


def with_tensor_output(model: nn.Module) -> nn.Module:
    """`model`, now returning `logits_of` its output. Its class is swapped for a subclass whose forward does that
    (one per model class), rather than wrapped: parameter names stay the library's own, so weights files,
    `freeze`, Grad-CAM layer names and exported graphs see the model as the library made it."""
    cls = type(model)
    if cls in _TENSOR_OUTPUT_CLASSES.values():
        return model
    if cls not in _TENSOR_OUTPUT_CLASSES:
        def forward(self, inputs, *args, **kwargs):
            return logits_of(super(adapted, self).forward(inputs, *args, **kwargs), inputs)

        adapted = type(cls.__name__, (cls,), {"forward": forward, "__module__": cls.__module__,
                                              "__doc__": f"{cls.__name__} returning one logits tensor (gpucore)"})
        _TENSOR_OUTPUT_CLASSES[cls] = adapted
    model.__class__ = _TENSOR_OUTPUT_CLASSES[cls]
    return model


def build_library_model(library: str, name: str, kwargs: dict, import_library,
                        pretrained: Optional[str] = None) -> nn.Module:
    """`transformers:CLASS` or `smp:ARCH` with `kwargs` (config key model_kwargs), randomly initialised, with a tensor
    output. import_library: models.import_library (an optional package, or a ConfigError saying how to install it).
    pretrained: config key pretrained; a transformers model folder there is the config when model_kwargs has none."""
    full_name = f"{library}:{name}"
    refuse_downloads(library, full_name, kwargs)
    module = import_library("segmentation_models_pytorch" if library == "smp" else "transformers",
                            f"config key 'model': '{full_name}'")
    kwargs = dict(kwargs)
    if library == "transformers" and "config" not in kwargs and pretrained is not None and \
            os.path.isfile(os.path.join(str(pretrained), "config.json")):
        kwargs["config"] = pretrained  # the architecture of the weights' own folder, as from_pretrained(folder)
    build = _transformers_model if library == "transformers" else _smp_model
    return with_tensor_output(build(module, name, kwargs, full_name))


def _unknown(library: str, name: str, names, what: str) -> ConfigError:
    close = difflib.get_close_matches(name, names, n=5, cutoff=0.6)
    hint = f" Close names: {', '.join(close)}." if close else ""
    return ConfigError(f"config key 'model': {library} has no {what} '{name}'.{hint}")


def _transformers_model(transformers, name: str, kwargs: dict, full_name: str) -> nn.Module:
    """A transformers model class built from its config: model_kwargs `config` names a local folder holding
    config.json (a `save_pretrained` folder), and any other keys are config fields (num_labels, hidden_sizes, ...)
    set on top; `in_channels` is the config's num_channels."""
    cls = getattr(transformers, name, None)
    vision = [n for n in dir(transformers) if n.endswith(("ForSemanticSegmentation", "ForImageClassification"))]
    if not (isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel)) or name.startswith("Auto"):
        raise _unknown("transformers", name, vision, "vision model class")
    config_class: Type = cls.config_class
    if "in_channels" in kwargs:
        kwargs["num_channels"] = kwargs.pop("in_channels")
    folder = kwargs.pop("config", None)
    # The config's fields: what it serialises, its constructor's arguments and num_labels (a property over id2label).
    known = set(config_class().to_dict()) | set(inspect.signature(config_class.__init__).parameters) | {"num_labels"}
    known -= {"self", "kwargs"}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise ConfigError(f"config key 'model_kwargs': {', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not "
                          f"a field of {config_class.__name__} ({full_name}); its fields include "
                          f"{', '.join(sorted(known)[:40])} ...")
    if folder is not None:
        if not os.path.isfile(os.path.join(str(folder), "config.json")):
            raise ConfigError(f"config key 'model_kwargs': config '{folder}' of {full_name} must be a folder holding "
                              "config.json (as save_pretrained writes it)")
        try:
            config = config_class.from_pretrained(str(folder), local_files_only=True, **kwargs)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"config key 'model_kwargs': config '{folder}' of {full_name} cannot be read: {exc}") from exc
    else:
        try:
            config = config_class(**kwargs)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"config key 'model_kwargs' does not fit {full_name}: {exc}") from exc
    try:
        return cls(config)
    except (TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"config key 'model_kwargs' does not fit {full_name}: {type(exc).__name__}: {exc}") from exc


def _smp_model(smp, name: str, kwargs: dict, full_name: str) -> nn.Module:
    """A segmentation_models_pytorch architecture (Unet, FPN, DeepLabV3Plus, Segformer, ...) with its encoder
    randomly initialised (encoder_weights None) unless `pretrained` loads weights later."""
    architectures = {cls.__name__: cls for cls in smp.MODEL_ARCHITECTURES_MAPPING.values()}
    if name not in architectures:
        raise _unknown("smp", name, architectures, "architecture")
    kwargs["encoder_weights"] = None
    try:
        return architectures[name](**kwargs)
    except (TypeError, ValueError, KeyError) as exc:
        raise ConfigError(f"config key 'model_kwargs' does not fit {full_name}: {type(exc).__name__}: {exc}") from exc


def segmentation_encoder(model: nn.Module) -> Optional[str]:
    """The encoder of a segmentation model, which `freeze: backbone`, lr_backbone and lr_layer_decay treat as its
    backbone (the decoder and the head train at the full rate): smp's `encoder`, a transformers semantic
    segmentation model's base model (SegFormer's `segformer`), torchvision's `backbone`. None for other models."""
    modules = {c.__module__.split(".")[0] for c in type(model).__mro__}
    if "segmentation_models_pytorch" in modules:
        name = "encoder"
    elif "transformers" in modules and type(model).__name__.endswith("ForSemanticSegmentation"):
        name = getattr(model, "base_model_prefix", "")
    elif any(c.__module__.startswith("torchvision.models.segmentation") for c in type(model).__mro__):
        name = "backbone"
    else:
        return None
    return name if isinstance(getattr(model, name, None), nn.Module) else None
