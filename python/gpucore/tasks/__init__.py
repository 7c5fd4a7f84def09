"""What kind of model a run trains, decided once from config keys loss and heads: one class per kind
(classification.py, sequences.py: multi-head and CTC, multi_label.py, segmentation.py), each owning its
decoding, correctness, confidence, per-sample losses, prediction rows, report sections and metrics (names,
directions, the primary one).
A new loss or kind of model is one class here, listed in TASKS."""
from __future__ import annotations

from ..errors import ConfigError
from .base import TORCH_IGNORE_INDEX, Metric, Task
from .classification import Classification
from .multi_label import MultiLabel
from .segmentation import Segmentation
from .sequences import CTCSequence, MultiHead, SequenceTask

TASKS = (Classification, MultiHead, CTCSequence, MultiLabel, Segmentation)  # asked in this order


def task_for(loss: str, heads: int = 0, label_smoothing: float = 0.0, ignore_index: int = TORCH_IGNORE_INDEX) -> Task:
    """The task that trains with built-in loss `loss` and `heads` heads."""
    for task in TASKS:
        if task.handles(loss, heads):
            return task(loss, heads, label_smoothing, ignore_index)
    if heads > 0:
        with_heads = sorted(name for task in TASKS for name in task.losses if task.handles(name, heads))
        raise ConfigError(f"config key 'heads' ({heads}) is used by loss {', '.join(with_heads)} only; loss "
                          f"'{loss}' would ignore it: set heads: 0, or loss: {with_heads[0]}")
    losses = sorted({name for task in TASKS for name in task.losses})
    raise ConfigError(f"config key 'loss': no task trains with '{loss}'; built-in losses: {', '.join(losses)}")


def task_of(config) -> Task:
    """The task of a TrainConfig (config keys loss, heads, label_smoothing, ignore_index; unset: torch's default, until a
    run resolves it from its data; beam_width, CTC's decoding).

    Raises:
        ConfigError: beam_width set for a loss other than ctc.
    """
    ignore_index = config.ignore_index if config.ignore_index is not None else TORCH_IGNORE_INDEX
    task = task_for(config.loss, config.heads, config.label_smoothing, ignore_index)
    if isinstance(task, CTCSequence):
        return task.with_beam_width(config.beam_width).with_vocabulary(config.vocabulary)
    if config.beam_width != 1:
        raise ConfigError(f"config key 'beam_width' ({config.beam_width}) decodes CTC outputs (loss ctc); loss "
                          f"'{config.loss}' ({task.name}) would ignore it: set beam_width: 1, or loss: ctc")
    return task


__all__ = ["CTCSequence", "Classification", "Metric", "MultiHead", "MultiLabel", "Segmentation", "SequenceTask",
           "TASKS", "Task", "task_for", "task_of"]
