"""The data step of a run's set-up, the first of three (run_setup.py: data here -> model: setup_model.py -> engine:
engine_config.py): the data read (the caller's, else what config key `data` names, and its validation split), config
key ignore_index resolved from it, its class names and count, one input's shape, the class labels config keys
class_weights and sampler weigh, and the training and validation sets' plans (data/plan.py) as EpochData. Everything
here is known before any model exists; what needs the model (its outputs against these classes) is the model step's."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import List, Optional

import torch

from ..data.builtin import DATA_VAL_FRACTION, class_names, read_data
from ..data.class_balance import (balanced_sampling_weights, class_count, class_labels, imbalance,
                                  known_class_labels)
from ..data.clip_sequences import ClipSequences
from ..data.epoch_data import EpochData, training_and_validation_sets
from ..data.fits import check_class_count, check_fits_task
from ..data.identity import vocabulary_changes
from ..data.image_files import MASK_VOID, ImageFiles, read_masks_alike
from ..data.labeled_data import LabeledData
from ..data.sign_layouts import BLANK
from ..data.split import split
from ..data.torch_samples import DatasetSamples, dataset_samples
from ..errors import ConfigError
from ..tasks import TORCH_IGNORE_INDEX, Classification, CTCSequence, MultiLabel, Task
from ..tasks.sequences import is_gloss_vocabulary
from . import distributed


@dataclass
class RunData:
    """A run's data part: what it trains and validates on, and what the data says of itself."""

    train_set: EpochData  # the training set, this process's shard (an out-of-memory retry re-batches it)
    val_set: Optional[EpochData]  # None: the run does not validate
    validation: Optional[dict]  # where the validation data came from, for training_stats.json (None: no validation)
    classes: Optional[List[str]]  # class names, when the data has them
    class_count: Optional[int]  # outputs the data's classes take (None where the data does not say: masks, ...)
    given: bool  # the data was given to train() in Python, not named by config key `data`
    labels: Optional[torch.Tensor]  # each training sample's class, where class_weights or sampler weigh them
    imbalance: Optional[str]  # why monitor: auto follows the balanced metric (None: it does not)

    @property
    def samples(self) -> tuple:
        """(training data, validation data or None) as read: tensors, image files or a torch Dataset's samples."""
        return self.train_set.data, self.val_set.data if self.val_set is not None else None

    @property
    def input_shape(self) -> Optional[List[int]]:
        """One input as the model takes it (C, H, W for images; H, W 0 when they vary): the training set's plan's."""
        return self.train_set.plan.input_shape

    @property
    def normalization(self) -> Optional[tuple]:
        """Per-channel (mean, std) of the training inputs the batches are standardised with, or None."""
        return self.train_set.plan.normalization

    @property
    def identity(self) -> dict:
        """What the training and validation data are (data/identity.py): checkpoints record it, a resume checks it."""
        return {"train": self.train_set.plan.identity, "val": self.val_set.plan.identity if self.val_set else None}

    def close(self) -> None:
        """The data sets' reader threads joined: they serve no batches after this."""
        for data_set in (self.train_set, self.val_set):
            if data_set is not None:
                data_set.close()


def setup_data(config, task: Task, world: distributed.World, device: torch.device, train_data=None, val_data=None):
    """(config, task, data part): the run's data as `config` says for `task`, with config keys ignore_index and (CTC on
    gloss-labelled clips) vocabulary resolved from it: the config and the task returned hold them (the task is
    task_of(the config returned), decided once before the data and brought up to it here); `train_data` and
    `val_data` the caller's, if given.

    Raises:
        ConfigError: data that does not fit the task (masks for a classifier, one class), or that gpucore cannot
            serve as asked (the plans' checks).
    """
    given, caller_data = train_data is not None, train_data  # a gpucore data set given keeps its class names
    train_data, val_data, validation = _training_data(config, task, train_data, val_data)
    config = _resolved_ignore_index(config, train_data)
    task = task.with_ignore_index(config.ignore_index)
    if not given:
        check_fits_task(config.data, task, train_data, val_data)
    read_masks_alike(train_data, val_data)
    classes = _classes(config, caller_data, train_data)
    count = _class_count(task, classes, train_data, val_data)
    where = "train_data" if given else f"config key 'data' ('{config.data}')"
    check_class_count(task, classes, count, where)
    config = _recorded_vocabulary(config, task, classes, where)
    if isinstance(task, CTCSequence):
        task = task.with_vocabulary(config.vocabulary)
    labels, train_set, val_set = _epoch_sets(config, world, device, train_data, val_data, classes)
    return config, task, RunData(train_set=train_set, val_set=val_set, validation=validation, classes=classes,
                                 class_count=count, given=given, labels=labels,
                                 imbalance=_balanced_monitor_reason(config, task, train_data, classes,
                                                                    val_set is not None))


def _epoch_sets(config, world: distributed.World, device: torch.device, train_data, val_data, classes):
    """(labels, training set, validation set or None): the data sets as a run's epochs serve them."""
    labels, sampling_weights = _weighed_labels(config, train_data, classes)
    train_set, val_set = training_and_validation_sets(train_data, val_data, config, device, rank=world.rank,
                                                      world_size=world.size, sampling_weights=sampling_weights)
    distributed.check_same(train_set.total_batches(), "the number of batches per epoch (data length)")
    return labels, train_set, val_set


def rebuild_epoch_sets(data: RunData, config, world: distributed.World, device: torch.device) -> None:
    """`data`'s epoch sets made again from its data sets, after the model's set-up left samples out of them (clips too
    short for its temporal_stride: setup_model.py), so that batches, lengths and the data's identity count only
    the samples kept."""
    data.close()
    data.labels, data.train_set, data.val_set = _epoch_sets(config, world, device, *data.samples, data.classes)


def _resolved_ignore_index(config, train_data):
    """Config key ignore_index, unset: MASK_VOID (255) for a segmentation folder's masks, whose void pixels read as it
    (image_files.mask_table), else torch's -100. The resolved value is what config.json and the checkpoints record, so
    evaluate and the report ignore what training ignored."""
    if config.ignore_index is not None:
        return config
    masks = isinstance(train_data, ImageFiles) and train_data.mask_paths is not None
    return dataclasses.replace(config, ignore_index=MASK_VOID if masks else TORCH_IGNORE_INDEX)


def _weighed_labels(config, train_data, classes: Optional[List[str]]):
    """(labels, sampling weights): each training sample's class where config key class_weights or sampler weighs
    them (else None), and config key sampler balanced's weight per sample (else None). The weights count the classes
    the data names (the model step checks the labels against the model's outputs: setup_model.py)."""
    if config.class_weights == "none" and config.sampler == "none":
        return None, None
    labels = class_labels(train_data, "sampler" if config.class_weights == "none" else "class_weights")
    if config.sampler != "balanced":
        return labels, None
    return labels, balanced_sampling_weights(labels, class_count(labels, classes, None))


def _balanced_monitor_reason(config, task: Task, train_data, classes: Optional[List[str]],
                             has_val: bool) -> Optional[str]:
    """Why monitor: auto follows the task's balanced metric (balanced accuracy) rather than its primary one (accuracy,
    which predicting the largest class alone scores high on imbalanced data): config key class_weights or sampler
    set, or training classes imbalanced beyond IMBALANCE_RATIO (counted when known without reading the data); None
    when it does not (another monitor, no validation, a task without such a metric, balanced classes)."""
    if config.monitor != "auto" or not has_val or task.balanced_metric is None:
        return None
    if config.class_weights != "none":
        return "config key class_weights is set"
    if config.sampler == "balanced":
        return "config key sampler is balanced"
    labels = known_class_labels(train_data)
    return None if labels is None else imbalance(labels, classes)


def _training_data(config, task: Task, train_data, val_data):
    """(train, val, validation): the caller's data, else what config key `data` names, and where the validation data
    came from (training_stats.json's "validation"; None: the run does not validate). Data sets read by gpucore's
    readers are served like tensors; image files may also be streamed. Without validation data (val_data, or the
    held-out split of config key `data`), config key val_fraction holds out a seeded share of the training data
    (unset: DATA_VAL_FRACTION of config key `data`, none of the caller's data); never when val_data is given. A label
    file holds several labels per row for a multi-label task."""
    train_data, val_data = ((d.inputs, d.targets) if isinstance(d, LabeledData) and not isinstance(d, ImageFiles)
                            else dataset_samples(d, config.data_kwargs) for d in (train_data, val_data))
    given = train_data is not None
    if not given:
        train_data, own_split = read_data(config.data, config.data_kwargs,
                                          multi_label=True if isinstance(task, MultiLabel) else None)
        if val_data is None and own_split is not None:
            return train_data, own_split, {"source": "held_out_split", "of": f"data: {config.data}"}
    if val_data is not None:
        return train_data, val_data, {"source": "val_data"}
    if given:
        fraction, whose = config.val_fraction or 0.0, "train_data"
    else:
        fraction = DATA_VAL_FRACTION if config.val_fraction is None else config.val_fraction
        whose = f"data: {config.data}"
    train_data, val_data, held_out = split(train_data, fraction, config.seed)
    if held_out is None:
        return train_data, None, None
    return train_data, val_data, dict(source="val_fraction", of=whose, **held_out.to_dict())


def _classes(config, given, train_data) -> Optional[List[str]]:
    """Class names: those of the caller's gpucore data set or torch Dataset (its `classes`: torch_samples.py), else of
    config key `data` (image folders, built-in sets)."""
    data = train_data if isinstance(train_data, (DatasetSamples, ClipSequences)) else given if given is not None \
        else train_data
    if isinstance(data, (LabeledData, DatasetSamples, ClipSequences)):  # clips: their gloss vocabulary
        return list(data.classes) if data.classes else None
    return class_names(config.data, config.data_kwargs) if given is None else None


def _recorded_vocabulary(config, task: Task, classes: Optional[List[str]], where: str):
    """The config with key vocabulary: a CTC run's gloss vocabulary (its class names, entry 0 the blank) as its
    training data gives it, recorded by config.json and every checkpoint. A vocabulary set (config.json's, on gpucore
    train --resume RUN_DIR) must be the data's: the model's outputs are those glosses, in that order.

    Raises:
        ConfigError: a vocabulary set for data without one, or another than the data's (naming the glosses).
    """
    glosses = isinstance(task, CTCSequence) and is_gloss_vocabulary(classes)
    if config.vocabulary is None:
        return dataclasses.replace(config, vocabulary=list(classes)) if glosses else config
    if not glosses:
        raise ConfigError(f"config key 'vocabulary' is set ({len(config.vocabulary)} entries), but {where} gives no "
                          f"gloss vocabulary (loss ctc on gloss-labelled clips, class names starting with '{BLANK}'); "
                          "remove the key")
    found = vocabulary_changes(config.vocabulary, classes)
    if found:
        raise ConfigError(f"config key 'vocabulary' ({len(config.vocabulary)} entries, as the run's config.json "
                          f"records it) is not the gloss vocabulary of the training split of {where} "
                          f"({len(classes)} entries): " + "; ".join(found) + ". The model's outputs are the recorded "
                          "glosses: train on the labels the run was trained on, or leave the key out (a new run) to "
                          "take the data's")
    return config


def _class_count(task: Task, classes: Optional[List[str]], train_data, val_data) -> Optional[int]:
    """How many outputs the data's classes take: for classification its class names, else its integer labels' largest
    + 1 (training and validation data: a class only the validation data has still needs its output); for multi-label
    its targets' width; for CTC its class names (a vocabulary with the blank first). None where the data does not say (masks, a torch Dataset without class names, other tasks)."""
    if isinstance(task, Classification):
        if classes:
            return len(classes)
        labels = [t for t in map(_label_targets, (train_data, val_data))
                  if t is not None and t.dim() == 1 and not t.is_floating_point() and t.numel()]
        return max(int(t.max()) for t in labels) + 1 if labels else None
    if isinstance(task, MultiLabel):
        targets = _label_targets(train_data)
        return int(targets.shape[1]) if targets is not None and targets.dim() == 2 else None
    if isinstance(task, CTCSequence) and classes:
        return len(classes)  # a vocabulary whose entry 0 is the blank: one output per entry
    return None


def _label_targets(data) -> Optional[torch.Tensor]:
    """The targets of image files (not masks) or (inputs, targets) tensors, read without decoding an image."""
    if isinstance(data, ImageFiles):
        return data.targets if data.mask_paths is None else None
    if isinstance(data, tuple) and len(data) == 2 and isinstance(data[1], torch.Tensor):
        return data[1]
    return None
