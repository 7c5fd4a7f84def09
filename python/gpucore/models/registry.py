"""Models by name, as timm's _registry and _builder: the built-ins (builtin.py: the small CNNs of mnist-gpu.py and
captcha_train.py), torchvision's and timm's (`torchvision:resnet18`, `timm:convnext_tiny`), the segmentation
libraries' (`transformers:...`, `smp:...`, segmentation_models.py) and `package.module:factory`; what a model's
factory takes from the data (num_classes, in_channels); and what config key model records for a model given to
gpucore.train in Python. What fine-tuning reaches into in a built model (its head, first convolution and backbone)
is surgery.py's."""
from __future__ import annotations

import difflib
import functools
import importlib
import inspect
from typing import Callable, List, Optional, Tuple

import torch
from torch import nn

from ..errors import ConfigError
from ..redact import holds_mask, masked_value_message
from ..values import is_int
from . import segmentation_models
from .builtin import CaptchaCNN, FashionMnistCNN, FastCNN
from .cslr import CSLRKeypoints, CSLRResNet18
from .downloads import refuse_downloads
from .surgery import set_input_channels
from .torchvision_build import mismatch_message

BUILTIN = {"fashion_mnist_cnn": FashionMnistCNN, "fast_cnn": FastCNN, "captcha_cnn": CaptchaCNN,
           "cslr_resnet18": CSLRResNet18, "cslr_keypoints": CSLRKeypoints}

# Model names of the libraries users already have: `torchvision:resnet18`, `timm:convnext_tiny`.
LIBRARIES = ("torchvision", "timm")
_INSTALL = {
    "torchvision": "torchvision (pip install torchvision: the release made for your torch)",
    "timm": "timm (pip install timm; it needs torchvision too)",
    "huggingface_hub": "huggingface_hub (pip install huggingface_hub)",
    "safetensors": "safetensors (pip install safetensors)",
    "transformers": "transformers (pip install transformers)",
    "segmentation_models_pytorch": "segmentation_models_pytorch (pip install segmentation-models-pytorch)",
}
_LISTED_BY = {"torchvision": "torchvision.models.list_models()", "timm": "timm.list_models()"}


def fixed_input_size(name: str) -> Optional[Tuple[int, int]]:
    """The (height, width) built-in model `name` takes, where it takes one size only; None for any other model. A
    model states its own input, as timm's pretrained_cfg does."""
    return getattr(BUILTIN.get(name), "input_size", None)


def build_model(name: str, kwargs: dict, pretrained: Optional[str] = None) -> nn.Module:
    """A built-in model by name, a torchvision or timm model (`torchvision:NAME`, `timm:NAME`, randomly
    initialised: config key `pretrained` loads weights), or `package.module:factory` called with `kwargs`.
    pretrained (config key pretrained): a transformers model folder there also gives the architecture when
    model_kwargs names no config, as from_pretrained(folder) takes it. A value a run's files recorded masked
    (gpucore.load of a checkpoint) is a ConfigError: the model would be built with the mask."""
    for key, value in (("model_kwargs", kwargs), ("pretrained", pretrained)):
        if holds_mask(value):
            raise ConfigError(masked_value_message(key, value) + "; or give gpucore.load the model to load a "
                              "checkpoint's weights into (model=; gpucore evaluate, report, predict, export: --model)")
    library, _, library_name = name.partition(":")
    if library in LIBRARIES:
        return _library_model(library, library_name, kwargs)
    if library in segmentation_models.LIBRARIES:
        return segmentation_models.build_library_model(library, library_name, kwargs, import_library, pretrained)
    if is_python_model(name):
        raise ConfigError(python_model_error(name))
    if ":" in name:
        module_name, _, attribute = name.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(f"config key 'model': cannot import module '{module_name}' ({exc}); put the folder "
                              f"that holds {module_name.split('.')[0]} on PYTHONPATH (sys.path in Python)") from exc
        factory = getattr(module, attribute, None)
        if factory is None or not callable(factory):
            raise ConfigError(f"config key 'model': module '{module_name}' has no callable '{attribute}'")
    elif name in BUILTIN:
        factory = BUILTIN[name]
    else:
        close = ([f"torchvision:{name}"] if name in _torchvision_names()
                 else difflib.get_close_matches(name, BUILTIN, n=1))
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ConfigError(
            f"config key 'model': '{name}' is not a built-in model ({', '.join(BUILTIN)}), a library model "
            f"('torchvision:NAME', 'timm:NAME', 'transformers:CLASS', 'smp:ARCH') nor of the form 'package.module:factory'.{hint}"
        )
    return _call_factory(name, factory, kwargs)


# Config key `model` of a run whose model was given to gpucore.train in Python and cannot be rebuilt by name:
# 'python:MODULE.QUALNAME' of its class. Nothing builds it; what loads the run's checkpoints is told to pass the model.
PYTHON_MODEL = "python:"


def is_python_model(name: str) -> bool:
    return isinstance(name, str) and name.startswith(PYTHON_MODEL)


def python_model_error(name: str, checkpoint: Optional[str] = None) -> str:
    """The message for a config (or a checkpoint's) whose model came from Python: what to pass instead."""
    qualname = name[len(PYTHON_MODEL):] or "an nn.Module"
    short = qualname.rpartition(".")[2] or "Net"
    where = f"checkpoint '{checkpoint}'" if checkpoint else "config key 'model'"
    path = repr(checkpoint) if checkpoint else "'best.pt'"
    return (f"{where}: the model ({qualname}) was given to gpucore.train in Python and its class cannot be imported "
            "and built with no arguments, so it cannot be rebuilt by name; pass it: on the command line "
            "--model package.module:factory (a class or function, importable from PYTHONPATH, that builds it with "
            f"no arguments), in Python gpucore.load({path}, model={short}(...)) or gpucore.train(..., model=...)")


def python_model_spec(module: nn.Module, name: Optional[str] = None, kwargs: Optional[dict] = None
                      ) -> Tuple[str, dict]:
    """(model, model_kwargs) that config keys model and model_kwargs record for a model given to gpucore.train,
    where config keys model and model_kwargs were `name` and `kwargs`: those, when `name` is a built-in of the
    model's own class and builds it with `kwargs`; else 'package.module:ClassName' when that path imports the
    model's own class (not one of __main__ or defined in a function) and ClassName() (or ClassName(**kwargs))
    builds a model with the same parameters and buffers (names and shapes), so that the run's checkpoints rebuild
    it; else PYTHON_MODEL + the class's module and qualified name, with {} (nothing rebuilds it:
    python_model_error)."""
    cls = type(module)
    kwargs = dict(kwargs or {})
    if name in BUILTIN and BUILTIN[name] is cls and _rebuilds(cls, module, kwargs):
        return name, kwargs
    fallback = (f"{PYTHON_MODEL}{cls.__module__}.{cls.__qualname__}", {})
    if cls.__module__ in ("__main__", "builtins") or "." in cls.__qualname__ or "<" in cls.__qualname__:
        return fallback
    try:
        found = getattr(importlib.import_module(cls.__module__), cls.__qualname__, None)
    except Exception:  # noqa: BLE001 - not importable: recorded as from Python
        return fallback
    if found is not cls:
        return fallback
    for candidate in ({}, kwargs) if kwargs else ({},):
        if _rebuilds(cls, module, candidate):
            return f"{cls.__module__}:{cls.__qualname__}", candidate
    return fallback


def _rebuilds(cls, module: nn.Module, kwargs: dict) -> bool:
    """Whether cls(**kwargs) has the parameters and buffers of `module`, names and shapes. Built on the meta device
    where it can be (no memory, no time), else on the CPU; the random state is left as it was."""
    try:
        parameters = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False
    takes_any = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    if any(p.default is inspect.Parameter.empty and name not in kwargs
           and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
           for name, p in parameters.items()) or not (takes_any or set(kwargs) <= set(parameters)):
        return False
    wanted = {key: tuple(value.shape) for key, value in module.state_dict().items()}
    with torch.random.fork_rng(devices=[]):
        for device in ("meta", "cpu"):
            try:
                with torch.device(device):
                    fresh = cls(**kwargs)
            except Exception:  # noqa: BLE001 - cannot be built there (or at all)
                continue
            return isinstance(fresh, nn.Module) and wanted == {
                key: tuple(value.shape) for key, value in fresh.state_dict().items()}
    return False


# The keys of config key model_kwargs that taking them from the data fills in, and the other names a user may give
# them by (timm's in_chans is in_channels).
DATA_KEYS = {"num_classes": ("num_classes",), "in_channels": ("in_channels", "in_chans")}


def accepted_data_keys(name: str) -> Tuple[str, ...]:
    """Which of num_classes and in_channels model `name`'s factory takes: the built-ins' and a
    `package.module:factory`'s own parameters of those names (not **kwargs: what it does with them is unknown);
    both for torchvision and timm models (gpucore sets a torchvision model's input channels, timm takes in_chans);
    none for the segmentation libraries' models (transformers:, smp:) or names that do not resolve."""
    library = name.partition(":")[0]
    if library in LIBRARIES:
        return ("num_classes", "in_channels")
    if library in segmentation_models.LIBRARIES or is_python_model(name):
        return ()
    if ":" in name:
        module_name, _, attribute = name.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attribute, None)
        except Exception:  # build_model names the problem
            return ()
    else:
        factory = BUILTIN.get(name)
    if factory is None or not callable(factory):
        return ()
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return ()
    return tuple(key for key in DATA_KEYS if key in parameters
                 and parameters[key].kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY))


def kwargs_from_data(name: str, kwargs: dict, num_classes: Optional[int], in_channels: Optional[int]) -> dict:
    """What of num_classes and in_channels model `name` should take from the data: those its factory accepts
    (accepted_data_keys), that the data knows (not None) and that config key model_kwargs does not give itself
    (in_chans counts as in_channels). Returns {key: value}, to add to model_kwargs."""
    known = {"num_classes": num_classes, "in_channels": in_channels}
    return {key: known[key] for key in accepted_data_keys(name)
            if known[key] is not None and not any(alias in kwargs for alias in DATA_KEYS[key])}


def _call_factory(name: str, factory: Callable, kwargs: dict) -> nn.Module:
    try:
        model = factory(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"config key 'model_kwargs' does not fit model '{name}': {exc}") from exc
    if not isinstance(model, nn.Module):
        raise ConfigError(f"config key 'model': '{name}' returned {type(model).__name__}, not a torch.nn.Module")
    return model


def _torchvision_names() -> List[str]:
    """torchvision's model names (resnet18, ...), for a name given without `torchvision:`; none where it cannot be
    imported (not installed, or built for another torch: building the model says so)."""
    try:
        return importlib.import_module("torchvision.models").list_models()
    except Exception:  # ImportError, or a torchvision whose compiled ops do not fit this torch
        return []


def import_library(module: str, needed_by: str):
    """An optional package (torchvision, timm, huggingface_hub, safetensors.torch), or a ConfigError saying that
    `needed_by` needs it and how to install it."""
    try:
        return importlib.import_module(module)
    except Exception as exc:  # ImportError, or a torchvision whose compiled ops do not fit this torch (timm's too)
        mismatch = mismatch_message(exc)
        if mismatch is not None:
            raise ConfigError(f"{needed_by}: {mismatch}") from exc
        raise ConfigError(f"{needed_by} needs {_INSTALL[module.split('.')[0]]}; importing it failed: "
                          f"{type(exc).__name__}: {exc}") from exc


def _library_model(library: str, name: str, kwargs: dict) -> nn.Module:
    """A randomly initialised torchvision or timm model with num_classes outputs (the library builds and
    initialises the head) and in_channels inputs."""
    full_name = f"{library}:{name}"
    refuse_downloads(library, full_name, kwargs)
    kwargs = dict(kwargs)
    in_channels = kwargs.pop("in_channels", None)
    if in_channels is not None and (not is_int(in_channels) or in_channels < 1):
        raise ConfigError(f"config key 'model_kwargs': in_channels of {full_name} must be a positive integer, got "
                          f"{in_channels!r}")
    module = import_library(library, f"config key 'model': '{full_name}'")
    if library == "timm":
        names, known = module.list_models(), module.is_model(name)
        kwargs.pop("pretrained", None)  # False at most (refuse_downloads); gpucore passes it itself
        factory = functools.partial(module.create_model, name, pretrained=False)
        segmentation = False
        if in_channels is not None:
            kwargs["in_chans"] = in_channels
    else:
        names = module.models.list_models()
        known = name in names
        factory = functools.partial(module.models.get_model, name)
        segmentation = name in module.models.list_models(module=module.models.segmentation)
        if segmentation:
            kwargs["weights_backbone"] = None  # else torchvision downloads the backbone's ImageNet weights
    if not known:
        close = difflib.get_close_matches(name, names, n=5, cutoff=0.6)
        hint = f" Close names: {', '.join(close)}." if close else ""
        raise ConfigError(f"config key 'model': {library} has no model '{name}'.{hint} {library} lists "
                          f"{len(names)} models ({_LISTED_BY[library]})")
    model = _call_factory(full_name, factory, kwargs)
    if library == "torchvision" and in_channels is not None:
        set_input_channels(model, in_channels, full_name)
    if library == "torchvision" and segmentation:
        model = segmentation_models.with_tensor_output(model)  # {"out": ..., "aux": ...} -> the "out" logits
    return model
