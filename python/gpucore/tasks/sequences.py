"""Sequences of classes per input: a fixed number of heads (loss multilabel_soft_margin with config key heads,
the captcha's characters) or a sequence of any length read by CTC (loss ctc)."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch
from torch import nn

from ..errors import ConfigError
from .base import Task, names_for
from .decode import as_text, ctc_greedy


class SequenceTask(Task):
    """What multi-head and CTC share: text per input, per-character confusion in the report."""

    report_sections = "sequences"
    primary_metric = "seq_accuracy"  # whole sequences right

    def class_count(self, outputs: torch.Tensor) -> int:
        """The classes each position chooses among."""
        raise NotImplementedError

    def alphabet(self, classes: Optional[List[str]], count: int) -> List[str]:
        return names_for(classes, count)

    def aligned(self, targets: torch.Tensor, predicted: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, str]:
        """Targets and predictions compared character by character, and what was left out (for the heading)."""
        return targets, predicted, ""

    def target_text(self, targets: torch.Tensor, classes: Optional[List[str]]) -> List[str]:
        if targets.is_floating_point():
            return super().target_text(targets, classes)
        names = classes or [str(i) for i in range(int(targets.max()) + 1)]
        return as_text(targets.reshape(len(targets), -1), names)

    def add_prediction_columns(self, rows, outputs, predicted, classes, top_k) -> None:
        for row, text in zip(rows, as_text(predicted, classes)):
            row["text"] = text


class MultiHead(SequenceTask):
    """`heads` independent classifications per input, each the class with the highest logit of its share."""

    name = "multi-head classification"
    losses = ("multilabel_soft_margin",)

    @classmethod
    def handles(cls, loss: str, heads: int) -> bool:
        return loss in cls.losses and heads > 0

    def decode(self, outputs: torch.Tensor) -> torch.Tensor:
        self.expect_dims(outputs, 2, "N x (heads x classes)")
        if outputs.shape[1] % self.heads:
            raise ConfigError(f"{outputs.shape[1]} outputs do not split into {self.heads} heads (config key 'heads')")
        return outputs.reshape(outputs.shape[0], self.heads, -1).argmax(-1)

    def correct(self, predicted: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        truth = targets.reshape(targets.shape[0], self.heads, -1).argmax(-1) if targets.is_floating_point() else targets
        return super().correct(predicted, truth)

    def confidence(self, outputs: torch.Tensor) -> Optional[torch.Tensor]:
        return outputs.reshape(outputs.shape[0], self.heads, -1).softmax(-1).amax(-1)

    def class_count(self, outputs: torch.Tensor) -> int:
        return outputs.shape[-1] // self.heads


class CTCSequence(SequenceTask):
    """A sequence read step by step: greedy decoding, best class per step, repeats collapsed, blanks (0) dropped,
    padded with -1 (N x steps)."""

    name = "CTC sequence"
    losses = ("ctc",)

    def decode(self, outputs: torch.Tensor) -> torch.Tensor:
        self.expect_dims(outputs, 3, "N x steps x classes")
        return ctc_greedy(outputs.argmax(-1))

    def correct(self, predicted: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The whole sequence, as the engine's seq_accuracy: both padded with -1 to one width."""
        width = max(predicted.shape[1], targets.shape[1])
        return (pad_sequences(predicted, width) == pad_sequences(targets, width)).all(1)

    def class_count(self, outputs: torch.Tensor) -> int:
        return outputs.shape[-1]

    def decoded_metrics(self, predicted: torch.Tensor, targets: torch.Tensor) -> Dict[str, float]:
        """cer: the character error rate, edit distances (insertions, deletions, substitutions) summed over all
        samples over the target characters summed, as torchmetrics' CharErrorRate pools them."""
        edits = characters = 0
        for guess, truth in zip(predicted.tolist(), targets.tolist()):
            truth = [c for c in truth if c >= 0]
            edits += edit_distance([c for c in guess if c >= 0], truth)
            characters += len(truth)
        return {"cer": edits / characters} if characters else {}

    def alphabet(self, classes: Optional[List[str]], count: int) -> List[str]:
        return names_for(classes, count) if classes else ["-"] + [str(i) for i in range(1, count)]  # 0: the blank

    def aligned(self, targets: torch.Tensor, predicted: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, str]:
        """Position by position where the lengths agree."""
        same = (targets >= 0).sum(1) == (predicted >= 0).sum(1)
        width = min(targets.shape[1], predicted.shape[1])
        return targets[same][:, :width], predicted[same][:, :width], " (sequences of the right length)"


def edit_distance(a: List[int], b: List[int]) -> int:
    """Levenshtein distance: the fewest insertions, deletions and substitutions that turn `a` into `b`."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def pad_sequences(sequences: torch.Tensor, width: int) -> torch.Tensor:
    """(N, L) class indices padded with -1 to (N, width); negative entries are padding already."""
    sequences = sequences.long()
    sequences = torch.where(sequences >= 0, sequences, torch.full_like(sequences, -1))
    return nn.functional.pad(sequences, (0, width - sequences.shape[1]), value=-1)
