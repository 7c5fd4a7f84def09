"""A trained checkpoint for other runtimes: `gpucore.export(checkpoint, "onnx" | "safetensors")` and `gpucore export`.

ONNX: the model as torch.onnx exports it (torch.export, opset 18, a dynamic batch dimension), under its run's
test-time augmentation (config key tta: hflip exports the mean over each image and its mirror), taking inputs
already preprocessed (float32, standardised); the preprocessing is not baked in: it is in the model's
metadata (key `gpucore.preprocessing`) and in a JSON file beside it. The file is checked by running it
with onnxruntime against PyTorch on fresh random inputs; the largest absolute difference is reported and
must be at most 1e-4 (float32). torch.onnx has no translation of adaptive max pooling (fast_cnn's head), so the
exported copy computes each nn.AdaptiveMaxPool2d as the maxima of its fixed bins (the check compares it with the
original module).

safetensors: the weights only (the model's state_dict; `tta` in the JSON says what evaluation ran), the preprocessing and the model's name and
arguments in a JSON file beside it, also stored as the file's metadata.

The JSON file is named after the whole output file (`best.onnx.json`, `best.safetensors.json`), so exporting
both formats keeps both. The files are created with the mode new files get (0666 less the umask, usually 0644).
"""
from __future__ import annotations

import json
import os
import warnings
from typing import Optional, Union

import copy

import torch
from torch import nn

from ..errors import ConfigError, ExportError
from ..redact import masked_values
from .load import LoadedModel, load, loaded_model

FORMATS = ("onnx", "safetensors")
TOLERANCE = 1e-4
PIP = {"onnx": "pip install onnx onnxscript onnxruntime", "safetensors": "pip install safetensors"}


def preprocessing(model: LoadedModel) -> dict:
    """What a runtime needs besides the weights: the model, the input shape, the standardisation, the classes (the
    sidecar and the files' metadata are shared as the weights are: credentials in URIs masked)."""
    stats = model.input_stats or {}
    return masked_values({
        "model": model.config.model, "model_kwargs": model.config.model_kwargs, "loss": model.config.loss,
        "heads": model.config.heads, "input_shape": model.model_input_shape, "classes": model.classes,
        "tta": model.config.tta,
        "mean": stats.get("mean"), "std": stats.get("std"),
        "transforms": model.plan.transforms,
        "scaling": ("uint8 images go through `transforms` (torchvision.transforms.v2 names), are divided by 255, then "
                    "each channel c becomes (x - mean[c]) / std[c]; inputs are N x C x H x W float32"
                    if model.is_image_model else
                    "inputs become (x - mean[0]) / std[0], as float32"),
    })


def export(checkpoint: Union[str, os.PathLike, LoadedModel], format: str, out: Optional[str] = None, *,
           opset: int = 18, seed: int = 0) -> dict:
    """Write a checkpoint's model as ONNX or safetensors, with its preprocessing as JSON beside it.

    ONNX is checked: the file runs in onnxruntime on fresh random inputs of another batch size against PyTorch.

    Args:
        checkpoint: a gpucore checkpoint path or a gpucore.load result.
        format: "onnx" or "safetensors".
        out: the file to write (default: the checkpoint's path with the format's extension).
        opset: the ONNX opset.
        seed: the seed of the check's random inputs.

    Returns:
        What was written (paths, input shape, preprocessing); for ONNX also `max_abs_diff`, the largest difference
        between onnxruntime's and PyTorch's outputs.

    Raises:
        ExportError: torch.onnx failed, or the check's difference is above 1e-4.
        ConfigError: another format, a missing package (with the pip command), or a checkpoint that is neither a path
            nor a gpucore.load result.
    """
    if format not in FORMATS:
        raise ConfigError(f"export format '{format}' is not one of {', '.join(FORMATS)}")
    _require(format)
    model = loaded_model(checkpoint, "cpu", "gpucore.export's checkpoint")
    if model.device.type != "cpu":
        model = load(model.checkpoint, "cpu")
    if not model.input_shape:
        raise ConfigError(f"checkpoint '{model.checkpoint}' does not record the shape of its inputs (a run on a "
                          "torch Dataset, or a checkpoint from before gpucore recorded it); export needs it")
    if 0 in model.model_input_shape:
        raise ConfigError(f"the run of '{model.checkpoint}' read images of varying sizes (input shape "
                          f"{model.input_shape}) and its transforms bring them to no one size; export needs one: train "
                          "with data_kwargs size: [H, W], or a transforms list that starts with RandomResizedCrop or "
                          "Resize + CenterCrop")
    out = os.fspath(out) if out is not None else os.path.splitext(model.checkpoint)[0] + "." + format
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    info = preprocessing(model)
    if format == "safetensors":
        from safetensors.torch import save_file

        weights = {name: tensor.detach().contiguous().clone() for name, tensor in model.module.state_dict().items()}
        save_file(weights, out, metadata={"gpucore.preprocessing": json.dumps(info)})
        written = {"tensors": len(weights)}
    else:
        written = _onnx(model, out, info, opset, seed)
    sidecar = out + ".json"  # written once the export passed its check; one per format: both can sit side by side
    with open(sidecar, "w", encoding="utf-8") as handle:
        json.dump(dict(info, weights=os.path.basename(out)), handle, indent=2)
    _usual_mode(out)  # safetensors writes its file 0600
    return dict({"format": format, "out": os.path.abspath(out), "preprocessing": os.path.abspath(sidecar)}, **written)


class AdaptiveMaxPool2dByBins(nn.Module):
    """nn.AdaptiveMaxPool2d without indices as the maxima of its bins, which torch.onnx exports (it has no translation
    of aten.adaptive_max_pool2d): output row i takes input rows floor(i * H / h) to ceil((i + 1) * H / h), as PyTorch's
    kernel does, and the columns alike; the maximum over a box is the maximum over its rows' maxima."""

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size if isinstance(output_size, (tuple, list)) else (output_size, output_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for dim, size in ((-2, self.output_size[0]), (-1, self.output_size[1])):
            length = x.shape[dim]
            size = size or length  # None keeps the input's size
            x = torch.cat([x.narrow(dim, i * length // size, -(-(i + 1) * length // size) - i * length // size)
                           .amax(dim, keepdim=True) for i in range(size)], dim)
        return x


def exportable(module: nn.Module) -> nn.Module:
    """`module`, or a copy of it whose nn.AdaptiveMaxPool2d layers (without indices) compute by AdaptiveMaxPool2dByBins,
    the same values in operations torch.onnx translates."""
    if not any(isinstance(m, nn.AdaptiveMaxPool2d) and not m.return_indices for m in module.modules()):
        return module
    module = copy.deepcopy(module)
    for parent in list(module.modules()):
        for name, child in parent.named_children():
            if isinstance(child, nn.AdaptiveMaxPool2d) and not child.return_indices:
                setattr(parent, name, AdaptiveMaxPool2dByBins(child.output_size))
    return module


def _onnx(model: LoadedModel, out: str, info: dict, opset: int, seed: int) -> dict:
    import onnx
    import onnxruntime

    generator = torch.Generator().manual_seed(seed)
    example = torch.randn(2, *model.model_input_shape, generator=generator)
    try:
        with warnings.catch_warnings():
            # torch's deprecations of the internals torch.onnx.export itself calls (`isinstance(treespec, LeafSpec)` of
            # torch.utils._pytree, raised at copyreg's line): nothing the user can change, shown as gpucore's otherwise.
            for category in (DeprecationWarning, FutureWarning):
                warnings.simplefilter("ignore", category)
            program = torch.onnx.export(exportable(model.inference_module), (example,), dynamo=True, verbose=False,
                                        opset_version=opset, input_names=["inputs"], output_names=["outputs"],
                                        dynamic_shapes=({0: torch.export.Dim("batch")},))
    except Exception as exc:  # torch.export and the ONNX translation raise many kinds
        raise ExportError(f"torch.onnx could not export model '{model.config.model}' of '{model.checkpoint}': "
                          f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
    program.save(out)
    proto = onnx.load(out)
    entry = proto.metadata_props.add()
    entry.key, entry.value = "gpucore.preprocessing", json.dumps(info)
    onnx.save(proto, out)

    fresh = torch.randn(3, *model.model_input_shape, generator=generator)  # another batch size: the batch is dynamic
    session = onnxruntime.InferenceSession(out, providers=["CPUExecutionProvider"])
    theirs = torch.from_numpy(session.run(None, {session.get_inputs()[0].name: fresh.numpy()})[0])
    with torch.no_grad():
        ours = model.inference_module(fresh)
    ours = ours[0] if isinstance(ours, (tuple, list)) else ours
    if theirs.shape != ours.shape:
        raise ExportError(f"the ONNX model's outputs are {tuple(theirs.shape)}, PyTorch's {tuple(ours.shape)}")
    difference = (theirs - ours.float()).abs().max().item()
    if not difference <= TOLERANCE:
        raise ExportError(f"the ONNX model's outputs differ from PyTorch's by up to {difference:.3g} on fresh "
                                  f"inputs (tolerance {TOLERANCE:g}); '{out}' is not to be trusted")
    return {"opset": opset, "max_abs_diff": difference, "checked_inputs": list(fresh.shape)}


def _usual_mode(path: str) -> None:
    """Gives `path` the mode a new file gets from open(): 0666 less the process's umask."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def _require(format: str) -> None:
    modules = ("onnx", "onnxscript", "onnxruntime") if format == "onnx" else ("safetensors",)
    missing = []
    for module in modules:
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise ConfigError(f"{format} export needs {', '.join(missing)}, not installed in this environment: "
                          f"{PIP[format]}  (or pip install 'gpucore[export]')")

