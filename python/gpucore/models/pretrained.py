"""Config key `pretrained`: weights to start from, read from a local file with weights_only (nothing is
ever downloaded), fitted to the model and reported: what loaded, the replaced classifier head, the first
convolution adapted from RGB, and anything missing, unexpected or of another shape."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Dict, List

import torch
from torch import nn

from ..checkpoint import FORMAT, model_state
from ..errors import ConfigError
from .registry import LIBRARIES, import_library
from .surgery import adapt_input_conv, classifier_head, input_conv, is_under

LIBRARY_WEIGHTS = "true"  # pretrained: true, the library's own weights from its local cache
NO_WEIGHTS = "false"  # pretrained: false, as no key
_COUNTER_SUFFIX = ".num_batches_tracked"  # BatchNorm's step counter; old torchvision files lack it


@dataclass
class LoadReport:
    """What `load_pretrained` did with each tensor of the file and of the model."""

    path: str
    loaded: int = 0  # tensors copied into the model
    head: List[str] = field(default_factory=list)  # the classifier head's tensors, kept at their new initialisation
    adapted: List[str] = field(default_factory=list)  # the first convolution, adapted to the model's input channels
    missing: List[str] = field(default_factory=list)  # model tensors the file lacks (not the head's)
    unexpected: List[str] = field(default_factory=list)  # file tensors the model lacks
    mismatched: List[str] = field(default_factory=list)  # "name: file shape -> model shape" (not the head's)
    counters: List[str] = field(default_factory=list)  # BatchNorm counters the file lacks: they start at 0

    @property
    def problems(self) -> List[str]:
        return ([f"missing in the file: {name}" for name in self.missing]
                + [f"not in the model: {name}" for name in self.unexpected]
                + [f"shape mismatch: {entry}" for entry in self.mismatched])

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        parts = [f"pretrained weights '{self.path}': {self.loaded} tensors loaded"]
        if self.head:
            parts.append(f"classifier head replaced, newly initialised ({', '.join(self.head)})")
        if self.adapted:
            parts.append(f"first convolution adapted to the input channels ({', '.join(self.adapted)})")
        if self.counters:
            parts.append(f"{len(self.counters)} BatchNorm counters start at 0")
        parts += self.problems
        return "; ".join(parts)


def resolve_weights_path(setting: str, model_name: str, model: nn.Module) -> str:
    """The file config key `pretrained` names: a path, or for `true` where the model's library keeps its weights."""
    if setting != LIBRARY_WEIGHTS:
        return setting
    library, _, name = model_name.partition(":")
    if library not in LIBRARIES:
        raise ConfigError(f"config key 'pretrained': true means the library's own weights of a torchvision:NAME or "
                          f"timm:NAME model; model '{model_name}' is neither: give the weights file's path")
    if library == "timm":
        return _timm_weights(name, model)
    return _torchvision_weights(name)


def _torchvision_weights(name: str) -> str:
    models = import_library("torchvision", f"config key 'pretrained': torchvision:{name}").models
    try:
        weights = models.get_model_weights(name).DEFAULT
    except (ValueError, KeyError, AttributeError) as exc:
        raise ConfigError(f"config key 'pretrained': torchvision has no weights for '{name}'; give a weights "
                          "file's path") from exc
    path = os.path.join(torch.hub.get_dir(), "checkpoints", os.path.basename(weights.url))
    if not os.path.isfile(path):
        raise ConfigError(f"config key 'pretrained': torchvision's weights of '{name}' are not on this machine, and "
                          f"gpucore never downloads: download {weights.url} and put it at {path} (torch's hub cache, "
                          "$TORCH_HOME/hub/checkpoints), or set pretrained to the file's path")
    return path


def _timm_weights(name: str, model: nn.Module) -> str:
    config = dict(getattr(model, "pretrained_cfg", None) or {})
    hub_id = config.get("hf_hub_id")
    if hub_id:
        hub = import_library("huggingface_hub", f"config key 'pretrained': timm:{name}")
        cache = import_library("huggingface_hub.constants", f"config key 'pretrained': timm:{name}").HF_HUB_CACHE
        for filename in ("model.safetensors", "pytorch_model.bin"):
            cached = hub.try_to_load_from_cache(hub_id, filename)
            if isinstance(cached, str):
                return cached
        raise ConfigError(f"config key 'pretrained': timm's weights of '{name}' ({hub_id}) are not in the Hugging "
                          f"Face cache ({cache}), and gpucore never downloads: fetch them on a "
                          f"machine with network (hf download {hub_id}) and copy the cache, or download "
                          f"https://huggingface.co/{hub_id}/resolve/main/model.safetensors and set pretrained to "
                          "its path")
    if config.get("url"):
        path = os.path.join(torch.hub.get_dir(), "checkpoints", os.path.basename(config["url"]))
        if os.path.isfile(path):
            return path
        raise ConfigError(f"config key 'pretrained': timm's weights of '{name}' are not on this machine, and gpucore "
                          f"never downloads: download {config['url']} and put it at {path}, or set pretrained to "
                          "the file's path")
    raise ConfigError(f"config key 'pretrained': timm has no weights for '{name}'; give a weights file's path")


def _model_folder_files(folder: str) -> List[str]:
    """The weights files of a Hugging Face model folder (save_pretrained's layout): model.safetensors or
    pytorch_model.bin, or the shards their index.json lists."""
    import json

    for name in ("model.safetensors", "pytorch_model.bin"):
        if os.path.isfile(os.path.join(folder, name)):
            return [os.path.join(folder, name)]
        index = os.path.join(folder, name + ".index.json")
        if os.path.isfile(index):
            try:
                with open(index, encoding="utf-8") as handle:
                    shards = sorted(set(json.load(handle)["weight_map"].values()))
            except (OSError, ValueError, KeyError, AttributeError) as exc:
                raise ConfigError(f"config key 'pretrained': the shard index '{index}' cannot be read ({exc})") from exc
            return [os.path.join(folder, shard) for shard in shards]
    raise ConfigError(f"config key 'pretrained': folder '{folder}' holds no model.safetensors, pytorch_model.bin or "
                      "a sharded index of them (the layout save_pretrained writes)")


def read_state_dict(path: str) -> Dict[str, torch.Tensor]:
    """The tensors of a weights file: a state dict saved with torch.save (bare, or under 'state_dict' or 'model'
    as timm's and other training scripts save it), a gpucore checkpoint, or a .safetensors file; or of a Hugging
    Face model folder (save_pretrained). Prefixes that DistributedDataParallel ('module.') and torch.compile
    ('_orig_mod.') add are removed."""
    if os.path.isdir(path):
        merged: Dict[str, torch.Tensor] = {}
        for file in _model_folder_files(path):
            merged.update(read_state_dict(file))
        return merged
    if not os.path.isfile(path):
        raise ConfigError(f"config key 'pretrained': weights file '{path}' does not exist")
    try:
        if path.endswith(".safetensors"):
            safetensors = import_library("safetensors.torch", f"config key 'pretrained': '{path}'")
            payload = safetensors.load_file(path, device="cpu")
        else:
            payload = torch.load(path, map_location="cpu", weights_only=True)
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"config key 'pretrained': weights file '{path}' cannot be read ({type(exc).__name__}: "
                          f"{exc}); it must be a state dict saved with torch.save, a gpucore checkpoint or a "
                          ".safetensors file") from exc
    if isinstance(payload, dict) and payload.get("format") == FORMAT:
        payload = model_state(payload)[0]  # the EMA's weights when its run monitored them, as gpucore.load
    elif isinstance(payload, dict) and not _is_state_dict(payload):
        payload = next((payload[key] for key in ("state_dict", "model") if _is_state_dict(payload.get(key))), payload)
    if not _is_state_dict(payload):
        raise ConfigError(f"config key 'pretrained': '{path}' holds no state dict (a mapping of names to tensors)")
    for prefix in ("module.", "_orig_mod."):
        if all(key.startswith(prefix) for key in payload):
            payload = {key[len(prefix):]: value for key, value in payload.items()}
    return dict(payload)


def _is_state_dict(value) -> bool:
    return (isinstance(value, dict) and bool(value)
            and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items()))


def _transformers_folder_state(model: nn.Module, folder: str):
    """A transformers model's weights from a model folder, read by transformers itself (from_pretrained, local files
    only), which renames the keys of older checkpoints (the hub's SegFormer files) to the model's current names:
    the tensors that loaded, the file's keys the model lacks, and 'name: file shape -> model shape' for those of
    another shape."""
    library_class = next(cls for cls in type(model).__mro__ if cls.__module__.startswith("transformers."))
    try:
        loaded, info = library_class.from_pretrained(folder, config=model.config, local_files_only=True,
                                                     ignore_mismatched_sizes=True, output_loading_info=True)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"config key 'pretrained': transformers cannot read the model folder '{folder}' for "
                          f"{library_class.__name__}: {exc}") from exc
    mismatched = {name: (tuple(file_shape), tuple(model_shape)) for name, file_shape, model_shape in
                  info["mismatched_keys"]}
    state = {name: tensor for name, tensor in loaded.state_dict().items()
             if name not in info["missing_keys"] and name not in mismatched}
    return state, sorted(info["unexpected_keys"]), mismatched


def load_pretrained(model: nn.Module, path: str, strict: bool) -> LoadReport:
    """Copies the file's tensors into `model` where they fit. The classifier head's tensors that do not fit
    (num_classes replaced it) keep their new initialisation, and an RGB first convolution is adapted to the
    model's input channels (adapt_input_conv). Anything else missing, unexpected or of another shape is a
    ConfigError listing all of it when `strict`, else only reported."""
    own = model.state_dict()
    head, first_conv = classifier_head(model), input_conv(model)
    report, fitted = LoadReport(path), {}

    def other_shape(name: str, file_shape: tuple, model_shape: tuple) -> None:
        if head is not None and is_under(name, head):
            report.head.append(name)
        else:
            report.mismatched.append(f"{name}: {file_shape} in the file, {model_shape} in the model")

    mismatched = {}  # transformers' folder reader leaves these out of `state`: the file holds them in another shape
    if os.path.isdir(path) and any(cls.__module__.startswith("transformers.") for cls in type(model).__mro__):
        state, report.unexpected, mismatched = _transformers_folder_state(model, path)
        for name, (file_shape, model_shape) in mismatched.items():
            other_shape(name, file_shape, model_shape)
    else:
        state = read_state_dict(path)
    for name, tensor in state.items():
        target = own.get(name)
        if target is None:
            report.unexpected.append(name)
        elif target.shape == tensor.shape:
            fitted[name] = tensor
        elif (first_conv is not None and name == f"{first_conv}.weight" and tensor.dim() == 4 and tensor.shape[1] == 3
              and not (head is not None and is_under(name, head))
              and tensor.shape[:1] + tensor.shape[2:] == target.shape[:1] + target.shape[2:]):
            fitted[name] = adapt_input_conv(tensor, target.shape[1])
            report.adapted.append(f"{name}: 3 -> {target.shape[1]} channels")
        else:
            other_shape(name, tuple(tensor.shape), tuple(target.shape))
    for name in own:
        if name in state or name in mismatched:
            continue
        if head is not None and is_under(name, head):
            report.head.append(name)
        elif name.endswith(_COUNTER_SUFFIX):
            report.counters.append(name)
        else:
            report.missing.append(name)
    report.loaded = len(fitted)
    if not fitted:
        raise ConfigError(f"config key 'pretrained': no tensor of '{path}' fits {type(model).__name__} (the file has "
                          f"{', '.join(list(state)[:5])}{' ...' if len(state) > 5 else ''}; the model "
                          f"{', '.join(list(own)[:5])}{' ...' if len(own) > 5 else ''}): weights of another model?")
    if strict and report.problems:
        raise ConfigError(f"config key 'pretrained': '{path}' does not fit the model; set pretrained_strict: false "
                          "to load what fits and leave the rest as initialised:\n  " + "\n  ".join(report.problems))
    model.load_state_dict(fitted, strict=False)
    return report
