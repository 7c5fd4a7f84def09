"""The first training batch's diagnosis: when the model fails before any step of the run has trained, the error most
likely means the model does not fit the data, and says which config keys decide that (with the size config key
transforms turns the images into, when it changes it); or, with config key compile, that torch.compile's backend
could not compile it; or, with config key deterministic, which operation has no deterministic implementation."""
from __future__ import annotations

import re
from typing import Optional

from ..errors import TrainingError
from ..models.registry import fixed_input_size


def diagnosis(config, data, exc: RuntimeError, nothing_trained: bool) -> Optional[TrainingError]:
    """The TrainingError to raise from `exc` instead, when `nothing_trained` (no optimizer step of the run yet, this
    process's first epoch), for the run of `config` on `data` (setup_data.RunData); None to let `exc` through."""
    if isinstance(exc, TrainingError) or not nothing_trained:
        return None
    if config.compile and _is_compiler_failure(exc):
        return TrainingError(f"config key 'compile': torch.compile could not compile the model ({exc}); on the CPU "
                             "its inductor backend needs a working C++ compiler (g++ or clang, as torch documents); "
                             "install one, or set compile: false")
    if config.deterministic and (operation := _nondeterministic_operation(exc)):
        return TrainingError(f"config key 'deterministic' is true, and the model runs {operation}, which has no "
                             "deterministic implementation on this device (torch.use_deterministic_algorithms lists "
                             "them): set deterministic: false, or replace the layer that runs it")
    resized = _transformed_size(config, data)
    keys = "model, model_kwargs, data, data_kwargs" + (", transforms" if "config key transforms" in resized else "")
    return TrainingError(
        f"the model failed on the first training batch ({data.train_set.description}): {exc}\n{resized}"
        f"Check that the model fits the data: input channels, image size, number of classes (config keys {keys})")


# What torch.compile's errors say when its backend failed, rather than the model: dynamo's BackendCompilerFailed
# ("backend='inductor' raised: ..."), inductor's InvalidCxxCompiler. The engine hands a Python error back as text.
_BACKEND_FAILURES = ("BackendCompilerFailed", "backend='", "InvalidCxxCompiler")


def _is_compiler_failure(exc: BaseException) -> bool:
    """Whether `exc` is torch.compile's backend failing, not the model itself."""
    return any(marker in f"{type(exc).__name__}: {exc}" for marker in _BACKEND_FAILURES)


def _nondeterministic_operation(exc: BaseException) -> Optional[str]:
    """The operation torch refused under use_deterministic_algorithms(True) ("adaptive_max_pool2d_backward_cuda does
    not have a deterministic implementation, but you set ..."), or None for any other error."""
    found = re.search(r"(\S+) does not have a deterministic implementation", str(exc))
    return found.group(1) if found else None


def _transformed_size(config, data) -> str:
    """A sentence for the first batch's error when config key transforms (with crop_padding and hflip) changes the
    images' size, which the model then gets: "" when it keeps it, or the inputs are not images. Images of their own
    sizes are brought to one by the list's first transforms; a model that needs other inputs is then named."""
    plan = data.train_set.plan
    try:
        after = plan.output_size
    except Exception:  # noqa: BLE001 - the config was checked; this is only a hint
        return ""
    if after is None:
        return ""
    own_sizes, (_, height, width) = plan.own_sizes, plan.input_shape
    model, takes = "", fixed_input_size(config.model)
    if takes is not None and after != takes:
        model = (f" Config key model is {config.model}, made for {takes[0]} x {takes[1]} images: name one for "
                 "your images, e.g. model: fast_cnn (any size) or torchvision:resnet18.")
    if own_sizes:
        return (f"config key transforms brings each image to {after[0]} x {after[1]}, the size the model gets: make "
                f"the model take {after[0]} x {after[1]} inputs.{model}\n")
    if after == (height, width):
        return f"{model.strip()}\n" if model else ""
    return (f"config key transforms turns the {height} x {width} images into {after[0]} x {after[1]}, the size the "
            f"model gets: make the model take {after[0]} x {after[1]} inputs, or choose transforms that keep "
            f"{height} x {width} (RandomCrop: {{size: {height}, padding: 4}} crops with padding to the same size)."
            f"{model}\n")
