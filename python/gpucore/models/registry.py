"""Models by name: the built-ins (the seeds' small CNNs), torchvision's and timm's (`torchvision:resnet18`,
`timm:convnext_tiny`), the segmentation libraries' (`transformers:...`, `smp:...`, segmentation_models.py) and
`package.module:factory`; and what fine-tuning needs to know of a model: its
classifier head, its first convolution and the blocks of its backbone."""
from __future__ import annotations

import difflib
import functools
import importlib
import inspect
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

import torch
from torch import nn
from torch.nn.modules import module as torch_module

from ..errors import ConfigError
from ..redact import holds_mask, masked_value_message
from ..values import is_int
from . import segmentation_models
from .downloads import refuse_downloads
from .fused_blocks import conv_fusable, conv_pool_norm_relu, pool_norm_fusable, pool_norm_relu, traced
from .torchvision_build import mismatch_message


class FashionMnistCNN(nn.Module):
    """The Fashion-MNIST network of the usual mnist-gpu.py script: two conv blocks and a classifier, 1x28x28 in."""

    input_size = (28, 28)  # the (height, width) its classifier's 64 x 7 x 7 inputs need (fixed_input_size)

    def __init__(self, num_classes: int = 10, in_channels: int = 1, dropout: float = 0.25):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Dropout(dropout), nn.Linear(64 * 7 * 7, 128), nn.ReLU(inplace=True), nn.Linear(128, num_classes)
        )

    def forward(self, x):
        return self.classifier(self.features(x))


class CaptchaCNN(nn.Module):
    """The captcha recogniser of captcha-trainer scripts: a conv stack and one classifier head per character.

    Returns logits of shape (N, heads * classes), the layout MultiLabelSoftMarginLoss expects.
    """

    def __init__(self, heads: int = 4, classes: int = 36, in_channels: int = 3, height: int = 60, width: int = 160):
        super().__init__()
        layers, channels = [], in_channels
        for out in (32, 64, 128):
            layers += [nn.Conv2d(channels, out, 3, padding=1), nn.BatchNorm2d(out), nn.ReLU(inplace=True), nn.MaxPool2d(2)]
            channels = out
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d((max(height // 8, 1), max(width // 8, 1)))
        flat = channels * max(height // 8, 1) * max(width // 8, 1)
        self.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(0.3), nn.Linear(flat, 512), nn.ReLU(inplace=True),
                                        nn.Linear(512, heads * classes))

    def forward(self, x):
        return self.classifier(self.pool(self.features(x)))


# Whether FastCNN's blocks run gpucore::maxpool_bn_relu by default (model_kwargs fused: true or false).
FUSED_POOL_NORM = True


class FastCNN(nn.Module):
    """The speedrun's network (examples/configs/fashion_mnist_speedrun.yaml): one block per width, each a 3x3
    convolution, a 2x2 max-pool, then BatchNorm and ReLU (airbench's order: the norm and the activation run on a
    quarter of the pixels, and pooling first is the same as pooling after a ReLU), then `extra[i]` more 3x3
    conv-BN-ReLU layers at the pooled size; a max-pool to 3x3 and a linear head on all 9 positions (28x28 in: 14, 7
    and 3 pixels wide, so that pool changes nothing; seed 0 of the speedrun: 92.77% against 92.58% with a global
    max-pool). The layers are torch's in any case (their indices, state_dict keys and hooks are the same with and
    without fused). fused (model_kwargs, default FUSED_POOL_NORM): the forward runs each block's max-pool, BatchNorm
    and ReLU as one op, and the first block's convolution with them (its full-size output never written), where
    models/fused_blocks.py's checks allow (under a CPU autocast the first block's op runs in float32: faster there
    than in bf16, and more exact); a block with a hook on any of its layers, or a hook on `features`, runs layer by
    layer, so every hook sees its own layer's output."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1, widths: Sequence[int] = (32, 64, 128),
                 extra: Sequence[int] = (0, 1, 0), fused: bool = FUSED_POOL_NORM):
        super().__init__()
        if not isinstance(fused, bool):
            raise ConfigError(f"model_kwargs of fast_cnn: fused must be true or false, got {fused!r}")
        if len(widths) != len(extra) or not widths or not all(is_int(n) and n > 0 for n in widths) \
                or not all(is_int(n) and n >= 0 for n in extra):
            raise ConfigError(f"model_kwargs of fast_cnn: widths (positive integers, one per block) and extra (as many "
                              f"integers >= 0) are needed, got widths {list(widths)} and extra {list(extra)}")
        layers, channels, pooled = [], in_channels, []
        for width, more in zip(widths, extra):
            pooled.append(len(layers))
            layers += [nn.Conv2d(channels, width, 3, padding=1, bias=False), nn.MaxPool2d(2), nn.BatchNorm2d(width),
                       nn.ReLU(inplace=True)]
            for _ in range(more):
                layers += [nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width),
                           nn.ReLU(inplace=True)]
            channels = width
        self.features = nn.Sequential(*layers)
        self.fused, self._pooled = fused, frozenset(pooled)  # the blocks' first layers' indices
        self.classifier = nn.Sequential(nn.AdaptiveMaxPool2d(3), nn.Flatten(), nn.Linear(channels * 9, num_classes))

    def forward(self, x):
        features = self.features
        if not self.fused or _hooked(features):
            return self.classifier(features(x))
        layers, index = list(features), 0
        while index < len(layers):
            if index in self._pooled:
                x = _pooled_block(*layers[index:index + 4], x)
                index += 4
            else:
                x = layers[index](x)
                index += 1
        return self._head(x)

    def _head(self, x):
        """The classifier on a feature map already 3 x 3 (28-px images): its max-pool to 3 x 3 changes nothing there
        and is skipped, and a channels-last map meets the linear layer's weight permuted to its own order, where
        flattening it would copy it into torch's order (and its gradient back): the same values up to float
        rounding. Hooks on the classifier, other sizes and traced() forwards run the torch layers."""
        pool, flatten, linear = self.classifier
        if traced(x) or x.shape[-2:] != (3, 3) or _hooked(self.classifier, pool, flatten, linear):
            return self.classifier(x)
        if x.is_contiguous() or not x.is_contiguous(memory_format=torch.channels_last):
            return linear(flatten(x))
        weight = linear.weight.unflatten(1, (x.shape[1], 3, 3)).permute(0, 2, 3, 1).flatten(1)
        return nn.functional.linear(x.permute(0, 2, 3, 1).flatten(1), weight, linear.bias)


def _pooled_block(conv, pool, norm, relu, x):
    """FastCNN's conv -> max-pool -> BatchNorm -> ReLU block in as few ops as its hooks and `x` allow: all four as
    one (fused_blocks.conv_pool_norm_relu, the first block's), the last three as one, else layer by layer (a layer
    inside a fused op would not run its hooks, and a hook must see that layer's own output)."""
    if not _hooked(conv, pool, norm, relu) and conv_fusable(conv, norm, x):
        return conv_pool_norm_relu(conv, norm, x)
    x = conv(x)
    if not _hooked(pool, norm, relu) and pool_norm_fusable(norm, x):
        return pool_norm_relu(norm, x)
    return relu(norm(pool(x)))


def _hooked(*modules: nn.Module) -> bool:
    """Whether calling any of these modules runs a hook (its own or a global one): a layer run inside a fused op
    would not run its hooks."""
    if any(getattr(torch_module, name, None) for name in (
            "_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
            "_global_backward_pre_hooks")):
        return True
    return any(m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks
               for m in modules)


BUILTIN = {"fashion_mnist_cnn": FashionMnistCNN, "fast_cnn": FastCNN, "captcha_cnn": CaptchaCNN}

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


def output_count(model: nn.Module) -> Optional[int]:
    """The number of outputs of the model's classifier head (classifier_head: a Linear's out_features, a
    convolution's out_channels), or None when it has none that gpucore finds."""
    name = classifier_head(model)
    if name is None:
        return None
    head = model.get_submodule(name)
    if isinstance(head, nn.Linear):
        return head.out_features
    if isinstance(head, nn.modules.conv._ConvNd):
        return head.out_channels
    return None


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
        _set_input_channels(model, in_channels, full_name)
    if library == "torchvision" and segmentation:
        model = segmentation_models.with_tensor_output(model)  # {"out": ..., "aux": ...} -> the "out" logits
    return model


def input_conv(model: nn.Module) -> Optional[str]:
    """The name of the model's first convolution (the one that sees the image), or None."""
    return next((name for name, module in model.named_modules() if isinstance(module, nn.Conv2d)), None)


def _set_input_channels(model: nn.Module, in_channels: int, full_name: str) -> None:
    """Replaces the first convolution by one taking in_channels (PyTorch's default initialisation; pretrained
    RGB weights are adapted to it when loaded)."""
    name = input_conv(model)
    if name is None:
        raise ConfigError(f"config key 'model_kwargs': {full_name} has no convolution whose input channels "
                          "in_channels could set")
    conv = model.get_submodule(name)
    if conv.in_channels == in_channels:
        return
    if conv.groups != 1:
        raise ConfigError(f"config key 'model_kwargs': the first convolution of {full_name} ('{name}') is grouped; "
                          "in_channels cannot be changed")
    replacement = nn.Conv2d(in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                            conv.dilation, bias=conv.bias is not None, padding_mode=conv.padding_mode)
    parent, _, attribute = name.rpartition(".")
    setattr(model.get_submodule(parent), attribute, replacement)


def adapt_input_conv(weight: torch.Tensor, in_channels: int) -> torch.Tensor:
    """RGB weights of a first convolution (out, 3, kh, kw) for `in_channels` inputs, as timm adapts them: summed
    over the colours for 1 channel (a grey image gives what the RGB model gives for it in three equal channels),
    else repeated over the channels and scaled by 3 / in_channels."""
    if in_channels == 1:
        return weight.float().sum(dim=1, keepdim=True).to(weight.dtype)
    repeats = -(-in_channels // 3)
    return (weight.float().repeat(1, repeats, 1, 1)[:, :in_channels] * (3 / in_channels)).to(weight.dtype)


# ---- the classifier head and the backbone ---------------------------------------------------------------

HEAD_ATTRIBUTES = ("fc", "classifier", "head", "heads", "segmentation_head", "decode_head.classifier")


def classifier_head(model: nn.Module) -> Optional[str]:
    """The name of the model's classifier head, the layer num_classes replaces: timm's get_classifier(), else the
    last module with weights of the model's attribute fc, classifier, head, heads, segmentation_head or
    decode_head.classifier (a ResNet's fc, the last Linear of a ConvNeXt's, EfficientNet's or MobileNet's classifier,
    a ViT's heads.head, the built-ins' last Linear, smp's segmentation head, SegFormer's last 1x1 convolution,
    torchvision's segmentation classifier's last convolution)."""
    names = {module: name for name, module in model.named_modules()}
    get_classifier = getattr(model, "get_classifier", None)
    if callable(get_classifier):
        head = get_classifier()
        if isinstance(head, nn.Module) and names.get(head) and any(True for _ in head.parameters()):
            return names[head]
    for attribute in HEAD_ATTRIBUTES:
        try:
            module = model.get_submodule(attribute)
        except AttributeError:
            continue
        if isinstance(module, nn.Module):
            with_weights = [name for name, sub in module.named_modules(prefix=attribute)
                            if any(True for _ in sub.parameters(recurse=False))]
            if with_weights:
                return with_weights[-1]
    return None


def is_under(name: str, module_name: str) -> bool:
    """Whether parameter or module `name` belongs to module `module_name`."""
    return name == module_name or name.startswith(module_name + ".")


@dataclass
class BackboneSplit:
    """A model cut into the part that trains at the full rate (a classifier's head; a segmentation model's decoder
    and head) and the backbone before it, as fine-tuning treats them."""

    head: List[str]  # the names of the modules outside the backbone
    head_params: List[nn.Parameter]
    blocks: List[Tuple[str, List[nn.Parameter]]]  # the backbone's blocks, input first (see backbone_split)

    @property
    def backbone_params(self) -> List[nn.Parameter]:
        return [param for _, params in self.blocks for param in params]

    def in_head(self, name: str) -> bool:
        """Whether parameter or module `name` is outside the backbone."""
        return any(is_under(name, head) for head in self.head)


_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


def backbone_split(model: nn.Module, needed_for: str) -> BackboneSplit:
    """The head and the backbone's blocks. A segmentation model's backbone is its encoder
    (segmentation_models.segmentation_encoder) and everything else (decoder, head) its head. Otherwise the head is
    classifier_head's, and the blocks are the model's top-level modules with nn.Sequential, nn.ModuleList and
    nn.ModuleDict containers opened, recursively (a ResNet's conv1, bn1, layer1.0, ... layer4.1; a ConvNeXt's
    stages), less the head; the model's own parameters (a ViT's class token) go with the first block. Parameters
    with requires_grad=False are left out. needed_for: the config key that asks, for the error message."""
    encoder = segmentation_models.segmentation_encoder(model)
    if encoder is not None:
        head = [name for name, _ in model.named_children() if name != encoder]
        root, prefix = model.get_submodule(encoder), encoder
    else:
        classifier = classifier_head(model)
        if classifier is None:
            raise ConfigError(f"config key '{needed_for}' needs the model's classifier head, and "
                              f"{type(model).__name__} has none that gpucore finds: timm's get_classifier(), or a "
                              f"layer with weights in an attribute {', '.join(HEAD_ATTRIBUTES)}. Give the model such "
                              "an attribute")
        head, root, prefix = [classifier], model, ""
    split = BackboneSplit(head, [], [])
    seen = set()

    def trainable(named) -> List[nn.Parameter]:
        params = []
        for name, param in named:
            if param.requires_grad and id(param) not in seen and not split.in_head(name):
                seen.add(id(param))
                params.append(param)
        return params

    def opened(prefix: str, module: nn.Module):
        for name, child in module.named_children():
            name = f"{prefix}.{name}" if prefix else name
            if isinstance(child, _CONTAINERS):
                yield from opened(name, child)
            else:
                yield name, child

    own = trainable(root.named_parameters(prefix=prefix, recurse=False))
    blocks = [(name, trainable(module.named_parameters(prefix=name))) for name, module in opened(prefix, root)]
    blocks = [(name, params) for name, params in blocks if params]
    if own and blocks:
        blocks[0] = (blocks[0][0], own + blocks[0][1])
    elif own:
        blocks = [(prefix, own)]
    split.blocks = blocks
    split.head_params = [param for name, param in model.named_parameters()
                         if param.requires_grad and split.in_head(name) and id(param) not in seen]
    return split
