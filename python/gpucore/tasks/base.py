"""What every kind of model a run can train answers: how its outputs decode into predictions (by the rules the
engine's metrics score with), which predictions are right and how confident, per-sample losses, the columns of
`gpucore predict`'s rows, which of the report's sections apply, which metrics the engine reports and which way
each is better. One subclass per kind; tasks/__init__.py picks the one for a config."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import torch
from torch import nn

from .. import _C
from ..errors import ConfigError

# torch's cross_entropy ignore_index: the class id config key ignore_index stands for when unset on data that is not a
# segmentation folder's masks.
TORCH_IGNORE_INDEX = -100
# What a data set says of its targets when they carry each clip's frame count in column 0 before its labels (a
# sequence of video clips or keypoints for CTC): this attribute, True. Never guessed from the values.
SEQUENCE_LENGTHS_IN_TARGET = "sequence_lengths_in_target"
# The engine's metrics where lower is better (CTC's word error rate and its count of samples no alignment fits).
LOWER_IS_BETTER = ("loss", "wer", "ctc_unfit")

@dataclass(frozen=True)
class Metric:
    """One number the engine reports for a task (without the split prefix: loss, accuracy, iou, ...)."""

    name: str
    mode: str  # "min": lower is better; "max": higher is better


class Task:
    name = ""  # what the task is called in messages and docs
    losses: Sequence[str] = ()  # the built-in losses (config key loss) this task trains with
    report_sections = ""  # which prediction sections report.html draws (report/sections.py); "" for none
    keeps_outputs = True  # an evaluation keeps the raw outputs (not for masks: only the decoded ones are kept)
    reports_top_k = False  # the engine also reports top-k accuracy (config key top_k)
    labels_from_folders = False  # predict: the true class of inputs in class subfolders
    predicts_masks = False  # predict: one mask PNG per input
    trains_on_masks = False  # its targets may be masks (N x H x W class ids), a segmentation folder's
    primary_metric = "loss"  # what config key monitor: auto follows, on the validation data when there is some
    # What monitor: auto follows instead when the classes are imbalanced (config key class_weights or sampler set, or
    # the training classes' counts); None: the task has no such metric.
    balanced_metric: Optional[str] = None
    weighs_classes = False  # its loss takes a weight per class (config key class_weights)

    def primary_metrics(self, imbalanced: bool = False) -> Sequence[str]:
        """What monitor: auto follows: the first of these the validation reports (then val_loss); `imbalanced`: the
        run's classes are imbalanced (run_setup.py decides)."""
        return (self.balanced_metric if imbalanced and self.balanced_metric else self.primary_metric,)

    def __init__(self, loss: str, heads: int = 0, label_smoothing: float = 0.0, ignore_index: int = TORCH_IGNORE_INDEX):
        self.loss, self.heads, self.label_smoothing, self.ignore_index = loss, heads, label_smoothing, ignore_index
        self.class_weights: Optional[List[float]] = None  # one per class, in the loss: with_class_weights

    def with_ignore_index(self, ignore_index: int) -> "Task":
        """This task ignoring targets of `ignore_index` (config key ignore_index as the data step resolved it)."""
        task = copy.copy(self)
        task.ignore_index = ignore_index
        return task

    def with_class_weights(self, weights: Optional[Sequence[float]]) -> "Task":
        """This task with its loss weighing each class by `weights` (config key class_weights resolved; None: 1)."""
        if weights is not None:
            self.check_weighs_classes()
        task = copy.copy(self)
        task.class_weights = None if weights is None else [float(w) for w in weights]
        return task

    def __repr__(self) -> str:
        return f"{type(self).__name__}(loss={self.loss!r}, heads={self.heads})"

    def for_data(self, samples, model: nn.Module) -> "Task":
        """This task on `samples` (a data set as read) with `model`: CTC (CTCSequence.for_data) reads the clip lengths
        of data that carries them; no other task does.

        Raises:
            ConfigError: data whose targets carry clip lengths, for a task other than CTC.
        """
        if sequence_lengths_in_target(samples):
            raise ConfigError(f"the data's targets carry each clip's frame count before its labels "
                              f"({SEQUENCE_LENGTHS_IN_TARGET}), for CTC; loss '{self.loss}' ({self.name}) does not read "
                              f"them: set loss: ctc")
        return self

    @classmethod
    def handles(cls, loss: str, heads: int) -> bool:
        return loss in cls.losses and heads == 0

    def for_outputs(self, outputs: torch.Tensor) -> "Task":
        """The task whose rules fit outputs of this shape (a multi-label model with per-pixel outputs segments)."""
        return self

    def as_task(self, kind: type) -> "Task":
        """This task's loss settings under the rules of another kind of task."""
        return kind(self.loss, self.heads, self.label_smoothing, self.ignore_index)

    # ---- the engine ------------------------------------------------------------------------------
    def check_weighs_classes(self) -> None:
        """ConfigError unless this task's loss takes class weights (config key class_weights)."""
        if not self.weighs_classes:
            raise ConfigError(f"config key 'class_weights' weighs the classes of loss cross_entropy; loss '{self.loss}' "
                              f"({self.name}) takes no class weights: set class_weights: none")

    def loss_config(self, device: str = "cpu") -> "_C.LossConfig":
        """The engine's loss, its class weights (if any) on `device`, where the loss runs."""
        loss = _C.LossConfig()
        loss.kind = self.loss
        loss.label_smoothing = self.label_smoothing
        loss.heads = self.heads
        if self.class_weights is not None:
            loss.class_weights = torch.tensor(self.class_weights, dtype=torch.float32, device=device)
        loss.ignore_index = self.ignore_index
        return loss

    def metrics(self, top_k: int, training: bool = False) -> List[Metric]:
        """What the engine may report for this task, in its order (training: in the training split, without the
        class means, balanced accuracy and macro F1 only an evaluation reports); the names are the C++ engine's (_C.reported_metrics).
        The loss, error rates and counts of what is wrong are minimised: the others are shares of what is right."""
        return [Metric(name, "min" if name in LOWER_IS_BETTER else "max")
                for name in _C.reported_metrics(self.loss_config(), top_k, training)]

    def metric_modes(self, top_k: int, splits: Sequence[str]) -> Dict[str, str]:
        """Each metric as an epoch's record names it (SPLIT_NAME: train_loss, val_accuracy, ...) and its mode."""
        return {f"{split}_{metric.name}": metric.mode for split in splits
                for metric in self.metrics(top_k, training=split == "train")}

    # ---- predictions -----------------------------------------------------------------------------
    def decode(self, outputs: torch.Tensor, targets: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The predictions of `outputs`; `targets`: the batch's where known (an evaluation; CTC with per-clip lengths
        reads each clip's frame count there), None for new inputs."""
        raise NotImplementedError(f"{type(self).__name__} must say how its outputs decode")

    def correct(self, predicted: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Per sample: the prediction is right in full (every head, label or pixel)."""
        right = predicted == targets.reshape(predicted.shape).to(predicted.dtype)
        return right.reshape(predicted.shape[0], -1).all(1)

    def decoded_metrics(self, predicted: torch.Tensor, targets: torch.Tensor) -> Dict[str, float]:
        """Metrics an evaluation adds to the engine's from the whole pass's decoded predictions (none by default)."""
        return {}

    def confidence(self, outputs: torch.Tensor) -> Optional[torch.Tensor]:
        """How sure the model is of each prediction (per sample, or per head), or None where it has no such number."""
        return None

    def sample_losses(self, outputs: torch.Tensor, targets: torch.Tensor) -> Optional[torch.Tensor]:
        """Each sample's loss (their mean is the metrics' loss; with class weights each is w[target] * loss, and the
        metrics' loss their sum over the weights' sum), or None where the loss does not split by sample."""
        return None

    def target_text(self, targets: torch.Tensor, classes: Optional[List[str]]) -> List[str]:
        """A caption per target, for the report's training batch."""
        return [""] * targets.shape[0]

    def add_prediction_columns(self, rows: List[dict], outputs: torch.Tensor, predicted: torch.Tensor,
                               classes: Optional[List[str]], top_k: int) -> None:
        """Adds what `gpucore predict` writes for each input to `rows` (one dict per input)."""
        raise NotImplementedError(f"{type(self).__name__} must say what a prediction row holds")

    # ---- helpers ---------------------------------------------------------------------------------
    def expect_dims(self, outputs: torch.Tensor, dims: int, layout: str) -> None:
        if outputs.dim() != dims:
            raise ConfigError(f"loss '{self.loss}' ({self.name}) needs model outputs of {layout}, got shape "
                              f"{tuple(outputs.shape)}")


def sequence_lengths_in_target(samples) -> bool:
    """Whether a data set says its targets carry each clip's frame count in column 0 (SEQUENCE_LENGTHS_IN_TARGET)."""
    return getattr(samples, SEQUENCE_LENGTHS_IN_TARGET, False) is True


def names_for(classes: Optional[List[str]], count: int) -> List[str]:
    """The class names when there are `count` of them, else the indices as text."""
    return list(classes) if classes and len(classes) == count else [str(i) for i in range(count)]


def output_names(classes: Optional[List[str]], count: int) -> List[str]:
    """A classifier's `count` outputs by name: their class names, and output_INDEX for outputs beyond the class list
    (a head wider than it); the indices as text without class names."""
    if not classes:
        return [str(i) for i in range(count)]
    return [classes[i] if i < len(classes) else f"output_{i}" for i in range(count)]
