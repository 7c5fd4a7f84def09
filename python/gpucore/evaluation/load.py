"""A trained model back from its checkpoint, with the preprocessing of its run: `gpucore.load(path)`.

The checkpoint holds the config (model name and arguments), the weights, the input statistics the run
standardised with, the shape of one input and the class names; nothing else is needed to use the model.
"""
from __future__ import annotations

import copy
import functools
import json
import os
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from ..cam import PhotoGeometry
from ..checkpoint import load_checkpoint, model_state
from ..config import load_config
from ..data.identity import vocabulary_changes
from ..data.image_files import DEFAULT_MAX_RESOLUTION
from ..data.input_files import images_from_list, read_size
from ..data.tensor_inputs import as_images, model_inputs, prepare_inputs
from ..device.select import select_device
from .. import transforms
from ..errors import ConfigError
from ..models.tta import with_tta
from ..models.registry import build_model, is_python_model, python_model_error
from ..run_files import CHECKPOINTS, CONFIG
from ..tasks import task_of


@dataclass(frozen=True)
class InferencePlan:
    """How a loaded model's inputs are prepared, settled once from its checkpoint (one _C.transform_plan call), as a
    data set's plan (data/plan.py) settles a run's data: evaluate, predict, export and Grad-CAM read it."""

    forms: transforms.ListPlan  # its run's `transforms` list planned; inference runs the deterministic form
    reads_own_sizes: bool  # LoadedModel.reads_own_sizes
    model_input_shape: Optional[List[int]]  # LoadedModel.model_input_shape

    @property
    def transforms(self) -> List[dict]:
        """The deterministic form of the run's `transforms` (Resize, CenterCrop, Normalize kept)."""
        return self.forms.validation


def inference_plan(config, input_shape: Optional[List[int]]) -> InferencePlan:
    """The InferencePlan of a run's config and input shape (its training set's: [C, H, W] for images, H and W 0 for
    images read at their own sizes)."""
    forms = transforms.plan(config.transforms)
    images = input_shape is not None and len(input_shape) == 3
    own_sizes = images and not input_shape[1] and forms.validation_per_image
    shape = input_shape
    if images and (input_shape[1] or own_sizes):  # a Resize or CenterCrop changes the size
        channels, height, width = input_shape
        shape = [channels, *transforms.output_size(forms.validation, height, width)]
    return InferencePlan(forms=forms, reads_own_sizes=own_sizes, model_input_shape=shape)


class LoadedModel:
    """A model in eval mode on its device, and what its run fed it (gpucore.load returns it).

    Calling it on raw inputs (uint8 images N x C x H x W or N x H x W, as training read them) returns the outputs
    (raw logits) without gradients, batch by batch.

    Args:
        model: the model (`.module`).
        config: the run's TrainConfig.
        classes: class names, or None.
        input_stats: {"mean", "std"} the run standardised with, or None.
        input_shape: one input's shape as training read it ([C, H, W] for images).
        device: where the model is.
        checkpoint: the checkpoint's path.
        weights: "ema" (the run's moving average) or "raw".
        class_weights: the loss's weight per class the run trained with (config key class_weights resolved), or
            None.
        data_identity: what the run's training and validation data were ({"train", "val"}: data/identity.py), or
            None for a checkpoint that does not record it.
    """

    def __init__(self, model: nn.Module, config, classes: Optional[List[str]], input_stats: Optional[dict],
                 input_shape: Optional[List[int]], device: torch.device, checkpoint: str, weights: str = "raw",
                 class_weights: Optional[List[float]] = None, data_identity: Optional[dict] = None):
        self.module, self.config, self.classes = model, config, classes
        self.weights = weights  # "ema": the run's exponential moving average (it monitored an EMA metric), else "raw"
        # What kind of model it is (its run's loss and heads): how its outputs decode; its loss weighs the classes as
        # the run's did (config key class_weights resolved on the run's training data, which the checkpoint holds).
        self.task = task_of(config).with_class_weights(class_weights)
        self.input_stats, self.input_shape, self.device, self.checkpoint = input_stats, input_shape, device, checkpoint
        self.data_identity = data_identity

    def __repr__(self) -> str:
        return (f"LoadedModel({self.config.model} from '{self.checkpoint}'"
                f"{' (EMA weights)' if self.weights == 'ema' else ''} on {self.device}, inputs "
                f"{self.input_shape or 'of any shape'}, {len(self.classes) if self.classes else 'no'} class names)")

    @property
    def normalization(self) -> Optional[Tuple[list, list]]:
        """(mean, std) the run standardised its inputs with, or None."""
        return (self.input_stats["mean"], self.input_stats["std"]) if self.input_stats else None

    @functools.cached_property
    def plan(self) -> InferencePlan:
        """How its inputs are prepared, made at its first use and kept."""
        return inference_plan(self.config, self.input_shape)

    @property
    def model_input_shape(self) -> Optional[List[int]]:
        """One input as the model itself takes it: input_shape, for images after the deterministic form of the run's
        `transforms` (a Resize or CenterCrop changes the size)."""
        return self.plan.model_input_shape

    @property
    def reads_own_sizes(self) -> bool:
        """Whether the run read its images at their own sizes (no size given), each brought to one size by the
        per-image transforms of its list's deterministic form (Resize + CenterCrop): inputs of mixed sizes then go
        one image at a time through them (preprocess takes a list of images)."""
        return self.plan.reads_own_sizes

    def read_images(self, images: Sequence, size: Optional[Tuple[int, int]] = None):
        """In-memory images (PIL images, uint8 tensors or arrays, of any sizes) as the model's raw inputs, each read as
        an image file of the same pixels would be: resized to the size the run read its images at (or `size`), or, for
        a run that read them at their own sizes, kept so (shorter side at most max_resolution) for preprocess.

        Args:
            images: the images.
            size: (height, width) to read them at instead of the run's.

        Returns:
            uint8 N x C x H x W, or a list of uint8 C x H x W (reads_own_sizes).

        Raises:
            ConfigError: a model that does not take images; an element that is not an image (naming its index).
        """
        return images_from_list(images, self.image_channels("images"), *self._read_sizes(size)).images

    def photo_geometry(self, height: int, width: int, size: Optional[Tuple[int, int]] = None) -> PhotoGeometry:
        """Where the pixels of a height x width photo land on the model's input grid: the reader's resize (read_images;
        `size` as there), then the deterministic form of the run's transforms (Resize scales, CenterCrop shifts).

        Args:
            height: the photo's height.
            width: the photo's width.
            size: (height, width) it was read at instead of the run's.

        Returns:
            A PhotoGeometry (gpucore.cam), for PhotoCams' maps and overlays on the whole photo.

        Raises:
            ConfigError: a model that does not take images.
        """
        self.image_channels("photos")
        read = read_size(height, width, *self._read_sizes(size))
        scale, shift = [read[0] / height, read[1] / width], [0.0, 0.0]
        for entry in self.plan.transforms:
            name = next(iter(entry))
            after = transforms.output_size([entry], *read)
            if name == "Resize":
                factor = [after[0] / read[0], after[1] / read[1]]
                scale = [s * f for s, f in zip(scale, factor)]
                shift = [t * f for t, f in zip(shift, factor)]
            elif name == "CenterCrop":  # the crop's corner as the transform itself draws it (negative: zero padding)
                _, drawn = transforms.Compose([entry])(torch.zeros(1, 1, *read, dtype=torch.uint8), return_params=True)
                corner = drawn[0][1][0][0].tolist()
                shift = [t - c for t, c in zip(shift, corner)]
            elif after != tuple(read):  # Normalize moves no pixel; a transform that does, unknown here, is refused
                raise ConfigError(f"transform {name} of '{self.checkpoint}' moves pixels in a way photo_geometry does "
                                  "not know; overlay the maps on the model's inputs instead")
            read = after
        return PhotoGeometry(tuple(scale), tuple(shift), tuple(read))

    def _read_sizes(self, size: Optional[Tuple[int, int]]) -> Tuple[Optional[Tuple[int, int]], Optional[int]]:
        """(size, max_resolution) images are read at for this model: `size` or the run's, else its max_resolution
        where the run read them at their own sizes."""
        _, height, width = self.input_shape
        size = tuple(size) if size is not None else ((height, width) if height else None)
        return size, (self.max_resolution if size is None and self.reads_own_sizes else None)

    def image_channels(self, what: str = "images") -> int:
        """The channels of the images the model takes.

        Args:
            what: what the caller gave, for the error ("images", "photos").

        Returns:
            1 or 3.

        Raises:
            ConfigError: a model that takes no images.
        """
        if not self.is_image_model:
            raise ConfigError(f"the model of '{self.checkpoint}' takes inputs of shape "
                              f"{self.input_shape or 'unknown'}, not {what}")
        return self.input_shape[0]

    @property
    def max_resolution(self) -> int:
        """The longest shorter side its run kept an image at its own size with (data_kwargs max_resolution)."""
        return int((self.config.data_kwargs or {}).get("max_resolution", DEFAULT_MAX_RESOLUTION))

    @property
    def exif_orientation(self) -> bool:
        """Whether its run turned images upright by their EXIF orientation (data_kwargs exif_orientation)."""
        return bool((self.config.data_kwargs or {}).get("exif_orientation", True))

    @property
    def is_image_model(self) -> bool:
        return self.input_shape is not None and len(self.input_shape) == 3

    def preprocess(self, inputs: torch.Tensor) -> torch.Tensor:
        """Raw inputs as the model saw them in training: standardised with the run's statistics, images through the
        deterministic form of its `transforms`, on the device.

        Args:
            inputs: uint8 images N x C x H x W or N x H x W (or other raw inputs as training read them); for a run
                that read images at their own sizes (reads_own_sizes), also a list of C x H x W images of any sizes.

        Returns:
            The model's inputs, float, on its device.

        Raises:
            ConfigError: inputs of another shape than the model was trained on (naming both).
        """
        if isinstance(inputs, (list, tuple)) and self.reads_own_sizes:
            # images of their own sizes (uint8 C x H x W each), each through the deterministic form's per-image
            # transforms as validation brought them to one size
            if not inputs:
                raise ConfigError("no inputs given")
            return torch.cat([self.preprocess(as_images(image.unsqueeze(0)) if isinstance(image, torch.Tensor)
                                              else image) for image in inputs])
        if not isinstance(inputs, torch.Tensor):
            raise ConfigError(f"inputs must be a tensor{' or a list of C x H x W images of their own sizes' if self.reads_own_sizes else ''}, got {type(inputs).__name__}")
        if not self.is_image_model:
            stats = (self.input_stats["mean"], self.input_stats["std"]) if self.input_stats else None
            return prepare_inputs(inputs, stats).to(self.device)
        images = as_images(inputs)
        channels, height, width = self.input_shape
        wanted = f"{channels} x {height if height else 'H'} x {width if width else 'W'}"
        if images.dim() != 4 or images.shape[1] != channels or (height and tuple(images.shape[2:]) != (height, width)):
            raise ConfigError(f"the model of '{self.checkpoint}' was trained on images of {wanted} (channels x height x "
                              f"width), got inputs of shape {tuple(inputs.shape)}; read them with the same channels "
                              "and size")
        return model_inputs(images.to(self.device), self.input_stats, self.plan.transforms)

    @property
    def inference_module(self) -> nn.Module:
        """What predictions and the ONNX export run: the module, under its run's test-time augmentation (config
        key tta)."""
        return with_tta(self.module, self.config.tta)

    def __call__(self, inputs: torch.Tensor, batch_size: Optional[int] = None) -> torch.Tensor:
        """The model's outputs for raw `inputs` (see preprocess), in batches of `batch_size` (default: the run's
        eval_batch_size), under the run's test-time augmentation (config key tta)."""
        size = batch_size or self.config.eval_batch_size
        outputs = []
        module = self.inference_module
        with torch.no_grad():
            for start in range(0, len(inputs), size):
                output = module(self.preprocess(inputs[start:start + size]))
                outputs.append((output[0] if isinstance(output, (tuple, list)) else output).float())
        if not outputs:
            raise ConfigError("no inputs given")
        return torch.cat(outputs)


def load(checkpoint: Union[str, os.PathLike], device: str = "auto",
         model: Union[None, str, nn.Module] = None) -> LoadedModel:
    """The model of a gpucore checkpoint, in eval mode, with the preprocessing of its run.

    A run with ema_decay that monitored an EMA metric (val_ema_accuracy, ...) gives its EMA weights.

    Args:
        checkpoint: best.pt, last.pt, ... of a run.
        device: auto, cpu, cuda, cuda:N or mps.
        model: the model to load the weights into, for a run whose model its config cannot rebuild (one given to
            gpucore.train in Python whose class is not importable and built with no arguments: its config.json
            says model: 'python:...'): an nn.Module (a copy takes the weights), or a model name as config key
            model takes it ('package.module:factory', built with the run's model_kwargs). Default: the
            checkpoint's own config key model.

    Returns:
        A LoadedModel.

    Raises:
        ConfigError: a checkpoint that is not a path, a file that is not a gpucore checkpoint, a model it cannot
            rebuild (saying what to pass), or weights that do not fit the model (naming the missing, unexpected and
            mis-shaped keys).
    """
    path = path_argument(checkpoint, "gpucore.load's checkpoint", "a checkpoint file's path (str or os.PathLike)")
    return from_payload(load_checkpoint(path), path, select_device(device).device, model)


def path_argument(value, what: str, valid: str) -> str:
    """`value` (a checkpoint's, a run directory's) as a path string, else a ConfigError saying that `what` must be
    `valid` (all the caller takes)."""
    if not isinstance(value, (str, os.PathLike)):
        shown = type(value).__name__ + (" (a gpucore.load result)" if isinstance(value, LoadedModel) else "")
        raise ConfigError(f"{what} must be {valid}, got {shown}")
    return os.fspath(value)


def loaded_model(checkpoint, device: str, what: str, model: Union[None, str, nn.Module] = None) -> LoadedModel:
    """A gpucore.load result as it is (on its own device; `model` must then be None), or the checkpoint at a path
    loaded onto `device` (into `model`, as gpucore.load takes it): what gpucore.predict, export and evaluate take.

    Raises:
        ConfigError: any other value, or a LoadedModel with `model`, naming what `what` takes.
    """
    if isinstance(checkpoint, LoadedModel):
        if model is not None:
            raise ConfigError(f"{what} is a gpucore.load result, which holds its model already: model is for a "
                              "checkpoint path (pass gpucore.load(path, model=...) instead)")
        return checkpoint
    return load(path_argument(checkpoint, what, "a checkpoint file's path (str or os.PathLike) or a gpucore.load "
                                              "result (LoadedModel)"), device, model)


def check_run_vocabulary(path: str, classes: Optional[List[str]]) -> None:
    """A checkpoint in a run directory's checkpoints/ folder is read as that run's: the gloss vocabulary its
    config.json records (config key vocabulary) must be the checkpoint's class names, in their order, else every
    decoded id would be named by the wrong gloss.

    Raises:
        ConfigError: the two disagree, naming the glosses only one of them has, or the first id whose gloss moved.
    """
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.basename(folder) != CHECKPOINTS:
        return
    config_path = os.path.join(os.path.dirname(folder), CONFIG)
    try:
        with open(config_path, encoding="utf-8") as handle:
            recorded = json.load(handle).get("vocabulary")
    except (OSError, ValueError, AttributeError):  # no config.json, or not a run's: nothing recorded to check
        return
    found = vocabulary_changes(recorded, classes or [], f"only {CONFIG} has", "only the checkpoint has") \
        if recorded else []
    if found:
        raise ConfigError(f"checkpoint '{path}' names {len(classes or [])} glosses, but its run's '{config_path}' "
                          f"records a gloss vocabulary of {len(recorded)} (config key vocabulary): " + "; ".join(found)
                          + ". The checkpoint is not this run's: use the checkpoint its run wrote, or move it out of "
                            "the run directory to read it by its own vocabulary")


def from_payload(payload: dict, path: str, device: torch.device,
                 module: Union[None, str, nn.Module] = None) -> LoadedModel:
    """A checkpoint's contents, already read from `path`, as a LoadedModel on `device`. The model is built from the
    checkpoint's config, or from `module`: a copy of a model the config cannot name (e.g. the one a training
    process was given) that takes the checkpoint's weights, or a model name to build instead of the config's."""
    check_run_vocabulary(path, payload.get("classes"))
    config = load_config(payload["config"])
    if isinstance(module, str):
        name = module
        model = build_model(module, {} if is_python_model(config.model) else config.model_kwargs, config.pretrained)
    elif module is not None:
        if not isinstance(module, nn.Module):
            raise ConfigError(f"model must be a torch.nn.Module or a model name ('package.module:factory'), got "
                              f"{type(module).__name__}")
        name = f"{type(module).__qualname__} (given)"
        model = copy.deepcopy(module)
    else:
        name = config.model
        if is_python_model(config.model):
            raise ConfigError(python_model_error(config.model, path))
        model = build_model(config.model, config.model_kwargs, config.pretrained)
    model.float()
    state, weights = model_state(payload)
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        raise ConfigError(f"checkpoint '{path}' does not fit model '{name}'"
                          f"{'' if module is not None else ' built from its config'}: "
                          f"{state_mismatch(model, state, exc)}") from exc
    model.to(device=device, dtype=torch.float32).eval()
    return LoadedModel(model, config, payload.get("classes"), payload.get("input_stats"), payload.get("input_shape"),
                       device, path, weights, payload.get("class_weights"), payload.get("data"))


def state_mismatch(model: nn.Module, state: dict, error: Exception, shown: int = 5) -> str:
    """What of checkpoint weights `state` does not fit `model`, on one line: the missing keys, the unexpected ones
    and those of another shape (the first `shown` of each, and how many), else torch's own message."""
    own = model.state_dict()
    missing = [key for key in own if key not in state]
    unexpected = [key for key in state if key not in own]
    shapes = [f"{key} (checkpoint {list(state[key].shape)}, model {list(own[key].shape)})" for key in own
              if key in state and hasattr(state[key], "shape") and tuple(state[key].shape) != tuple(own[key].shape)]

    def listed(what, keys):
        more = f" and {len(keys) - shown} more" if len(keys) > shown else ""
        return f"{len(keys)} {what}: {', '.join(keys[:shown])}{more}"

    parts = [listed(what, keys) for what, keys in (("missing keys", missing), ("unexpected keys", unexpected),
                                                   ("keys of another shape", shapes)) if keys]
    if not parts:
        return " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    return ("; ".join(parts) + "; load it into the model the run trained (gpucore.load(path, model=...), --model "
            "package.module:factory)")
