"""gpucore's errors and warnings, in one place. The C++ core raises the first three itself."""
import torch

from . import _C

ConfigError = _C.ConfigError  # a bad config key, argument or input file (a ValueError)
DeviceUnavailableError = _C.DeviceUnavailableError  # a demanded device cannot be used (a RuntimeError)
TrainingError = _C.TrainingError  # training cannot go on: non-finite steps, out of memory (a RuntimeError)
OutOfMemoryError = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)


class DeviceFallbackWarning(UserWarning):
    """`device: auto` passed over a device that exists but cannot be used."""


class ExportError(RuntimeError):
    """torch.onnx could not export the model, or the exported model's outputs differ from PyTorch's by more
    than the tolerance."""
