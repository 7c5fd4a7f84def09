"""The data `gpucore evaluate` and `gpucore report` run a finished run's model on, and which part of it (`split`): a
name or path as config key `data` takes it (the run's own, or another read as the run read its own), or a data set
given in Python (a gpucore data set, (inputs, targets) tensors, a torch Dataset or a Hugging Face dataset, read as
gpucore.train reads them).

The splits: all (every sample; the default for data given), val (the samples the run validated on: the data's
held-out split, else the seeded val_fraction share; checked against the identity its checkpoint records), test (the
data's own held-out split) and train (the data's own training split, else the share the run trained on)."""
from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch

from ..data.builtin import (BUILTIN, DATA_VAL_FRACTION, HELD_OUT_FOLDERS, class_names, held_out_folders, is_python_data,
                            read_data)
from ..data.clip_sequences import ClipSequences
from ..data.fits import check_fits_task, check_model_segments, probe_output
from ..data.identity import changes, identity_of, vocabulary_changes
from ..data.image_files import ImageFiles
from ..data.label_files import LABEL_FILE_EXTENSIONS
from ..data.labeled_data import LabeledData
from ..data.plan import describe_data, is_native
from ..data.readers import DECODE_KEYWORDS
from ..data.split import split as held_out_share
from ..data.torch_samples import DatasetSamples, dataset_samples
from ..errors import ConfigError
from ..tasks import Classification, MultiLabel
from ..tasks.sequences import is_gloss_vocabulary

# What data= takes besides a name or a path, for messages.
DATA_SET_OBJECTS = ("a gpucore data set (gpucore.data.read_segmentation(...), read_image_folder(...), "
                    "from_tensors(...), ...), an (inputs, targets) pair of tensors, a torch Dataset or a Hugging Face "
                    "dataset (read as gpucore.train reads them)")
# gpucore evaluate's and gpucore report's --split, each in words.
SPLITS = {"all": "every sample of the data (the default for data given)",
          "val": "the samples the run validated on (the default without data)",
          "test": "the data's own held-out split (test/, else validation/, val/ or valid/, beside train/; t10k-* IDX "
                  "files; x_test/x_val arrays)",
          "train": "the data's own training split (train/ beside a held-out folder), else the share the run trained "
                   "on"}


@dataclass(frozen=True)
class ChosenData:
    """What an evaluation scores: `data`, served whole, and where its samples come from."""

    name: str  # the data: a built-in set's name, an absolute path, or a data set given in Python in a few words
    split: str  # one of SPLITS
    data: object  # the samples scored: (inputs, targets) tensors, ImageFiles or a torch Dataset's samples
    train: object  # the same data's training part, for a report's training batch
    label: str  # in file names, evaluate-LABEL/ and report-LABEL.html: the data's file or folder name (-SPLIT for a
    # split other than all), the split alone for the run's own data and for a data set given in Python
    where: str  # how many samples, of what, in words (evaluation.json's scored, the report's table)


def is_named(data) -> bool:
    """Whether `data` names data as config key `data` does (None: the run's own) rather than being a data set."""
    return data is None or isinstance(data, (str, os.PathLike))


def chosen_data(model, data, split: Optional[str], what: str) -> ChosenData:
    """The samples of `data` (None: the run's own) that split `split` picks (None: val for the run's own data, all
    for data given) for LoadedModel `model`; `what` names the argument in errors.

    Raises:
        ConfigError: an unknown split, or one that does not apply to the data (naming those that do); a run whose
            data came from Python and no data given; data that does not fit the model.
    """
    split = ("val" if data is None else "all") if split is None else split
    if split not in SPLITS:
        raise ConfigError(f"split '{split}' is not one of {', '.join(SPLITS)} ("
                          + "; ".join(f"{name}: {meaning}" for name, meaning in SPLITS.items()) + ")")
    config = model.config
    if data is None and is_python_data(config.data):
        raise ConfigError(f"checkpoint '{model.checkpoint}' was trained on data given to gpucore.train in Python (its "
                          f"config says data: {config.data}), which cannot be read back: pass the data, --data DATA "
                          "(a built-in data set, a folder or a .npz file; in Python data=... also takes "
                          f"{DATA_SET_OBJECTS})")
    source = _Source(model, data, what)
    try:
        scored, train, where = source.part(split)
    except _NotApplicable as refusal:
        valid = [name for name in SPLITS if name != split and source.applies(name)]
        raise ConfigError(f"split '{split}' does not apply to data {source.shown}: {refusal}; splits that do: "
                          f"{', '.join(valid)}") from None
    label = split if source.label is None or data is None else source.label + ("" if split == "all" else f"-{split}")
    return ChosenData(source.data, split, scored, train, label, where)


class _NotApplicable(Exception):
    """Why a split does not apply to a data set."""


class _Source:
    """A data set an evaluation is asked for, read once, with its parts by split."""

    def __init__(self, model, data, what: str):
        self.model, self.given = model, data
        config = model.config
        if is_named(data):
            self.name, self.kwargs, self.classes, self.multi_label = _reading(model, data)
            self.train, self.held = self._read()
            builtin = self.name in BUILTIN
            self.data = self.name if builtin else os.path.abspath(os.path.expanduser(self.name))
            self.shown = self.data if builtin else f"'{self.data}'"
            stem = os.path.splitext(os.path.basename(os.path.normpath(self.data)))[0]
            self.label = re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("._") or "data"
            self.runs_own = data is None or self.name == config.data or _same_path(self.name, config.data)
            self.extra_folders = held_out_folders(self.name)[1:]  # held-out folders besides the one read as held
        else:  # a data set given in Python: no name; its files are labelled by the split alone
            self.name, self.label = None, None
            self.train, self.held = given_data_set(data, model, what), None
            self.data = self.shown = describe_data(self.train)
            self.runs_own, self.extra_folders = False, []

    def _read(self, held_out: Tuple[str, ...] = HELD_OUT_FOLDERS):
        """(train, held-out split or None) of the named data (a folder's held-out split: the first of `held_out`
        beside train/), checked against the model."""
        train, held = read_data(self.name, self.kwargs, self.classes, self.multi_label, held_out)
        check_fits_task(self.name, self.model.task, train, held)
        _check_model_vocabulary(f"'{self.name}'", self.model, train)
        _check_model_segments(self.name, self.model, train, held)
        return train, held

    def applies(self, split: str) -> bool:
        try:
            self.part(split)
        except (_NotApplicable, ConfigError):
            return False
        return True

    def part(self, split: str):
        """(samples scored, training part, where in words) of split `split`; _NotApplicable says why not."""
        if split == "all":
            parts = [self.train] + ([self.held] if self.held is not None else [])
            # test/ beside val/ too (not a Kaggle layout's unlabelled test/, which reads as nothing held out)
            parts += [part for part in (self._read((folder,))[1] for folder in self.extra_folders) if part is not None]
            scored = _joined(parts)
            return scored, self.train, (f"all {len(scored)} samples of {self.shown}"
                                        + (f" ({len(parts)} splits: training and held-out)" if len(parts) > 1 else ""))
        if split == "test":  # beside val/, the test/ folder
            held = self._read(("test",))[1] if "test" in self.extra_folders else self.held
            if held is None:
                raise _NotApplicable("it has no held-out split of its own (a test/, validation/, val/ or valid/ "
                                     "folder beside train/, t10k-* IDX files, x_test/x_val arrays)")
            return held, self.train, f"the held-out split of {self.shown}: {len(held)} samples"
        if split == "train" and self.held is not None:
            return self.train, self.train, f"the training split of {self.shown}: {len(self.train)} samples"
        return self._runs_part(split)

    def _runs_part(self, split: str):
        """The samples the run validated (split val) or trained (train) on, drawn from this data as the run drew them
        from its own: its held-out split, else the seeded val_fraction share; the run's identity of them (its
        checkpoint's) must agree."""
        config = self.model.config
        if self.held is not None:  # split val: the data's own held-out split, as the run validated on its own
            part, train, how = self.held, self.train, "its held-out split"
        else:
            fraction = _run_val_fraction(config)
            train, val, record = held_out_share(self.train, fraction, config.seed)
            if record is None:  # the run held nothing out: it was given its validation data apart
                part, how = self.train, "all of it, as the run was given it"
            else:
                part = val if split == "val" else train
                how = (f"the share val_fraction {fraction} held out with seed {config.seed}"
                       + ("" if split == "val" else ", the rest"))
        self._check_identity(split, part)
        whose = "validated" if split == "val" else "trained"
        return part, train, f"the {len(part)} samples the run {whose} on: {how} of {self.shown}"

    def _check_identity(self, split: str, part) -> None:
        """`part` must be what the run's checkpoint records as its validation (training) data; for the run's own data
        named by its config a difference is a warning (the data changed since), for data given a refusal. A
        checkpoint without the record is trusted for its own data only."""
        recorded = self.model.data_identity
        key = "val" if split == "val" else "train"
        whose = "validation" if split == "val" else "training"
        if recorded is None:
            if self.runs_own:
                return
            raise _NotApplicable(f"its checkpoint records no identity of the run's {whose} data to match it against")
        if recorded.get(key) is None:
            raise _NotApplicable(f"the run had no {whose} data")
        found = changes(recorded[key], identity_of(dataset_samples(part, self.model.config.data_kwargs)))
        if not found:
            return
        if self.given is None:
            warnings.warn(f"the run's {whose} data has changed since it trained ({'; '.join(found)}): scoring it as it "
                          "is now", RuntimeWarning, stacklevel=5)
            return
        raise _NotApplicable(f"its {split} part is not the run's {whose} data ({'; '.join(found)})")


def _run_val_fraction(config) -> float:
    """The share of its training data a run held out for validation where the data had no held-out split: config key
    val_fraction, for config key `data` DATA_VAL_FRACTION when unset (as training decides it)."""
    if is_python_data(config.data):
        return config.val_fraction or 0.0
    return DATA_VAL_FRACTION if config.val_fraction is None else config.val_fraction


def _same_path(name: str, other: str) -> bool:
    paths = [os.path.realpath(os.path.expanduser(n)) for n in (name, other)]
    return os.path.exists(paths[0]) and paths[0] == paths[1]


def _joined(parts: List[object]):
    """Splits of one data set as one: image files and clips joined, tensors concatenated."""
    if len(parts) == 1:
        return parts[0]
    if len({type(part) for part in parts}) == 1 and isinstance(parts[0], (ImageFiles, ClipSequences)):
        joined = parts[0]
        for part in parts[1:]:
            joined = joined.joined(part)
        return joined
    inputs, targets = ([part[k] for part in parts] for k in (0, 1))
    if len({tuple(x.shape[1:]) for x in inputs}) > 1 or len({tuple(y.shape[1:]) for y in targets}) > 1:
        raise ConfigError(f"the splits of the data hold inputs of shapes {sorted({tuple(x.shape) for x in inputs})}: "
                          "they cannot be scored as one; evaluate one split (--split train, test)")
    return torch.cat(inputs), torch.cat(targets)


def _reading(model, data) -> Tuple[str, dict, Optional[List[str]], Optional[bool]]:
    """(name, data_kwargs, class names, multi_label) to read data named as config key `data` names it (None: the run's), for
    LoadedModel `model`: the run's data_kwargs, or for another name its image readers' keys and, for a folder, the
    channels and size the model was trained at where those do not give them (a run given its data in Python records
    no data_kwargs); image folders are labelled by the model's class names."""
    config = model.config
    name = config.data if data is None else os.fspath(data)
    if data is None:
        _check_recorded_path(name, model)
    if name == config.data:
        kwargs = config.data_kwargs
    else:
        kwargs = {key: value for key, value in config.data_kwargs.items() if key in DECODE_KEYWORDS}
        shape = model.input_shape
        path = os.path.expanduser(name)
        images = os.path.isdir(path) or path.lower().endswith(LABEL_FILE_EXTENSIONS)  # a folder or a label file
        if images and shape is not None and len(shape) == 3:
            kwargs.setdefault("channels", shape[0])
            if shape[1] and shape[2]:  # 0: the run read its images at their own sizes
                kwargs.setdefault("size", list(shape[1:]))
    # folders and label files labelled by its class names (a multi-label file's targets in its order)
    classes = model.classes if isinstance(model.task, (Classification, MultiLabel)) else None
    return name, kwargs, classes, True if isinstance(model.task, MultiLabel) else None


def given_data_set(data, model, what: str):
    """A data set given in Python as a data set the evaluation serves (ImageFiles as they are, other LabeledData as
    their (inputs, targets) tensors, a torch Dataset or Hugging Face dataset as a run reads it: DatasetSamples with
    the run's data_kwargs image_key and label_key), checked against `model`'s task; ConfigError for anything else."""
    if isinstance(data, LabeledData) and not isinstance(data, ImageFiles):
        data = (data.inputs, data.targets)
    elif not is_native(data) and not isinstance(data, torch.utils.data.DataLoader):
        data = dataset_samples(data, model.config.data_kwargs)
    if not (isinstance(data, (ImageFiles, DatasetSamples)) or is_native(data)):
        raise ConfigError(f"{what}: got a value of type {type(data).__name__}; expected a data set name or path as "
                          "config key data takes it (a built-in data set, a folder, a .npz file), or "
                          f"{DATA_SET_OBJECTS}")
    check_fits_task(describe_data(data), model.task, data)
    _check_model_segments(describe_data(data), model, data)
    return data


def check_classes(name: str, data, model) -> None:
    """A classifier's data must name its classes as the checkpoint does, in the same order. Image folders are
    labelled by the checkpoint's class names as they are read (a folder may lack a class; one the model lacks is
    refused there); built-in sets and torch Datasets (their `classes`, a Hugging Face ClassLabel's names) carry their
    own list, which must be the checkpoint's."""
    config = model.config
    classes = getattr(data, "classes", None) or class_names(name, config.data_kwargs if name == config.data else {})
    if not isinstance(model.task, Classification) or not model.classes or not classes:
        return
    if list(classes) != list(model.classes):
        raise ConfigError(f"data {name} has classes {', '.join(map(str, classes))}, but the model of "
                          f"'{model.checkpoint}' was trained on {', '.join(map(str, model.classes))}: evaluate on data "
                          "with the same classes (every class, the same names, in the same order)")


def _check_model_vocabulary(shown: str, model, train) -> None:
    """Gloss-labelled clips are scored by the vocabulary of their training split, which must be the one the model was
    trained with (its class names, in their order): another would name each of its output ids by the wrong gloss.
    Glosses of the scored split that training never saw are <unk>, each counted and named (encode_glosses).

    Raises:
        ConfigError: another vocabulary, naming the glosses only the model has, those only the data has, or the
            first id whose gloss moved.
    """
    if not isinstance(train, ClipSequences) or not is_gloss_vocabulary(model.classes):
        return
    found = vocabulary_changes(model.classes, train.classes, "the model was trained with that the data's training "
                               "split lacks", "the data's training split has that the model was not trained with")
    if found:
        raise ConfigError(f"data {shown} has a gloss vocabulary of {len(train.classes)} entries (from its training "
                          f"split), but the model of '{model.checkpoint}' was trained with {len(model.classes)}: "
                          + "; ".join(found) + ". Its outputs are those glosses: evaluate on data whose training split "
                          "gives the model's vocabulary (the run's own data, or a copy with the same training labels)")


def _check_model_segments(name: str, model, *data_sets) -> None:
    """A checkpoint whose model classifies (one row of outputs per image, or a Linear head) takes no masks: its output
    for an image of zeros of its input shape, read as it reads images."""
    def probe():
        return probe_output(model, model.input_shape, torch.uint8) if model.is_image_model else None

    check_model_segments(name, model.task, f"the model of '{model.checkpoint}'", model.module, probe, *data_sets)


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
