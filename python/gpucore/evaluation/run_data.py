"""The data `gpucore evaluate` and `gpucore report` run a finished run's model on: a name or path as config key `data`
takes it (the run's own, or another read as the run read its own), or a gpucore data set given in Python."""
from __future__ import annotations

import os
from typing import Optional, Tuple

import torch

from ..data.builtin import BUILTIN, check_fits_task, check_model_segments, is_python_data, load_data
from ..data.image_files import ImageFiles
from ..data.label_files import LABEL_FILE_EXTENSIONS
from ..data.labeled_data import LabeledData
from ..data.plan import is_native
from ..errors import ConfigError
from ..tasks import Classification, MultiLabel

# What data= takes besides a name or a path, for messages.
DATA_SET_OBJECTS = ("a gpucore data set (gpucore.data.read_segmentation(...), read_image_folder(...), "
                    "from_tensors(...), ...) or an (inputs, targets) pair of tensors")
# The image readers' data_kwargs, which carry over to data other than the run's own.
_READER_KEYS = ("channels", "size", "threads", "on_error", "exif_orientation")


def is_named(data) -> bool:
    """Whether `data` names data as config key `data` does (None: the run's own) rather than being a data set."""
    return data is None or isinstance(data, (str, os.PathLike))


def read_named(model, data, val_fraction: Optional[float]) -> Tuple[str, object, object]:
    """(name, train, val) of data named as config key `data` names it (None: the run's), for LoadedModel `model`:
    read with the run's data_kwargs, or for another name with its image readers' keys and, for a folder, the
    channels and size the model was trained at where those do not give them (a run given its data in Python
    records no data_kwargs); val is the held-out split, else the seeded share `val_fraction` of train (0: None)."""
    config = model.config
    name = config.data if data is None else os.fspath(data)
    if data is None:
        _check_recorded_path(name, model)
    if name == config.data:
        kwargs = config.data_kwargs
    else:
        kwargs = {key: value for key, value in config.data_kwargs.items() if key in _READER_KEYS}
        shape = model.input_shape
        path = os.path.expanduser(name)
        images = os.path.isdir(path) or path.lower().endswith(LABEL_FILE_EXTENSIONS)  # a folder or a label file
        if images and shape is not None and len(shape) == 3:
            kwargs.setdefault("channels", shape[0])
            if shape[1] and shape[2]:  # 0: the run read its images at their own sizes
                kwargs.setdefault("size", list(shape[1:]))
    # folders and label files labelled by its class names (a multi-label file's targets in its order)
    classes = model.classes if isinstance(model.task, (Classification, MultiLabel)) else None
    train, val = load_data(name, kwargs, val_fraction, config.seed, classes=classes,
                           multi_label=True if isinstance(model.task, MultiLabel) else None)
    check_fits_task(name, model.task, train, val)
    _check_model_segments(name, model, train, val)
    return name, train, val


def given_data_set(data, model, what: str):
    """A gpucore data set given in Python as a data set the evaluation serves (ImageFiles as they are, other
    LabeledData as their (inputs, targets) tensors), checked against `model`'s task; ConfigError for anything else."""
    if isinstance(data, LabeledData) and not isinstance(data, ImageFiles):
        data = (data.inputs, data.targets)
    if not (isinstance(data, ImageFiles) or is_native(data)):
        raise ConfigError(f"{what}: got a value of type {type(data).__name__}; expected a data set name or path as "
                          "config key data takes it (a built-in data set, a folder, a .npz file), or "
                          f"{DATA_SET_OBJECTS}")
    check_fits_task(describe(data), model.task, data)
    _check_model_segments(describe(data), model, data)
    return data


def _check_model_segments(name: str, model, *data_sets) -> None:
    """A checkpoint whose model classifies (one row of outputs per image) takes no masks."""
    shape = model.input_shape

    def classifier_evidence():
        if not model.is_image_model or not all(shape or ()):
            return None  # images at their own sizes, or not images: nothing to probe with
        outputs = model(torch.zeros(1, *shape, dtype=torch.uint8))
        return f"outputs of shape {tuple(outputs.shape)}: one row per image" if outputs.dim() == 2 else None

    check_model_segments(name, model.task, classifier_evidence, f"the model of '{model.checkpoint}'", *data_sets)


def describe(data) -> str:
    """A data set given in Python, in a few words (evaluation.json's data, the report's titles)."""
    if isinstance(data, ImageFiles):
        kind = "images and masks" if data.mask_paths is not None else "images"
        return f"{len(data)} {kind} from '{data.origin}'"
    return f"{data[0].shape[0]} samples of tensors {tuple(data[0].shape[1:])}"


def _check_recorded_path(name: str, model) -> None:
    """The run's own data, as its checkpoint records it, must still be where it was: else a ConfigError saying where
    the path came from and how to name the data instead (runs before 2026-11-27 recorded a relative path, relative to
    the directory they were started in)."""
    if name in BUILTIN or is_python_data(name) or os.path.exists(os.path.expanduser(name)):
        return
    relative = "" if os.path.isabs(os.path.expanduser(name)) else (
        f", a path relative to the directory that run was started in (this is {os.getcwd()})")
    raise ConfigError(f"data '{name}' recorded by checkpoint '{model.checkpoint}' (its config key data{relative}) is "
                      "not a folder or file here: pass the data, --data FOLDER on the command line (data=... in "
                      "Python)")
