"""Sequences of classes per input: a fixed number of heads (loss multilabel_soft_margin with config key heads,
the captcha's characters) or a sequence of any length read by CTC (loss ctc): a line of characters, or a video
clip's glosses whose targets carry the clip's frame count (the data's sequence_lengths_in_target)."""
from __future__ import annotations

import copy
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

from .. import _C
from ..errors import ConfigError
from .base import Task, names_for, sequence_lengths_in_target
from .decode import as_text, ctc_beam_search, ctc_greedy

# A gloss vocabulary's first and last entries: the CTC blank (class 0), and the id a dev or test gloss that the
# training split never had is encoded as (no training target has it, so decoding never emits it).
BLANK, UNKNOWN = "<blank>", "<unk>"


def is_gloss_vocabulary(classes: Optional[Sequence[str]]) -> bool:
    """Whether class names are a gloss vocabulary (a model trained with CTC on gloss-labelled clips): entry 0 is the
    blank."""
    return bool(classes) and classes[0] == BLANK


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

    def labels(self, targets: torch.Tensor) -> torch.Tensor:
        """The class sequences of `targets` (N, ...), as the decodings are."""
        return targets

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

    def decode(self, outputs: torch.Tensor, targets: Optional[torch.Tensor] = None) -> torch.Tensor:
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
    """A sequence read step by step, padded with -1 (N x steps): greedy decoding (best class per step, repeats
    collapsed, blanks (0) dropped) or, with config key beam_width > 1, a CTC prefix beam search. With per-clip lengths
    (with_sequence_lengths: the data's targets carry each clip's frame count in column 0) decoding stops at each clip's
    output steps, ceil(frames / temporal_stride), and the glosses are the targets' columns 1 on."""

    name = "CTC sequence"
    losses = ("ctc",)
    sequence_lengths = False  # the targets' column 0 is each clip's frame count
    temporal_stride = 1  # the model's output steps per frame: one per this many frames
    beam_width = 1  # config key beam_width: 1 decodes greedily
    undecoded_class: Optional[int] = None  # a gloss vocabulary's UNKNOWN: scored as an error, never decoded

    def for_data(self, samples, model: nn.Module) -> "CTCSequence":
        """With per-clip lengths where `samples` carry them (SEQUENCE_LENGTHS_IN_TARGET), at `model`'s
        temporal_stride attribute (1 where it has none); plain CTC otherwise."""
        if not sequence_lengths_in_target(samples):
            return self
        return self.with_sequence_lengths(getattr(model, "temporal_stride", 1))

    def with_sequence_lengths(self, temporal_stride: int) -> "CTCSequence":
        """This task on targets that carry each clip's frame count in column 0, for a model of `temporal_stride`."""
        if isinstance(temporal_stride, bool) or not isinstance(temporal_stride, int) or temporal_stride < 1:
            raise ConfigError(f"the model's temporal_stride must be an int >= 1 (its output steps per frame: one per "
                              f"temporal_stride frames), got {temporal_stride!r}")
        task = copy.copy(self)
        task.sequence_lengths, task.temporal_stride = True, temporal_stride
        return task

    def with_beam_width(self, width: int) -> "CTCSequence":
        task = copy.copy(self)
        task.beam_width = width
        return task

    def with_vocabulary(self, vocabulary: Optional[Sequence[str]]) -> "CTCSequence":
        """This task for a gloss vocabulary (config key vocabulary; None: none recorded): its UNKNOWN, which stands
        for every dev or test gloss the training split never had, is never decoded, so such a gloss always scores as
        an error, in the engine's val_wer as in evaluate's."""
        task = copy.copy(self)
        task.undecoded_class = list(vocabulary).index(UNKNOWN) if vocabulary and UNKNOWN in vocabulary else None
        return task

    def loss_config(self, device: str = "cpu") -> "_C.LossConfig":
        loss = super().loss_config(device)
        loss.sequence_lengths, loss.temporal_stride = self.sequence_lengths, self.temporal_stride
        loss.undecoded_class = -1 if self.undecoded_class is None else self.undecoded_class
        return loss

    def primary_metrics(self, imbalanced: bool = False) -> Sequence[str]:
        """Clips with lengths: the word (gloss) error rate first, as CSLR is scored."""
        return ("wer", "seq_accuracy") if self.sequence_lengths else ("seq_accuracy",)

    def labels(self, targets: torch.Tensor) -> torch.Tensor:
        """The target sequences (N, S) padded with -1, without the frame counts of per-clip lengths."""
        return targets[:, 1:] if self.sequence_lengths else targets

    def output_lengths(self, targets: Optional[torch.Tensor], steps: int) -> Optional[torch.Tensor]:
        """Each clip's output steps, min(ceil(frames / temporal_stride), steps), as the loss counts them; None
        without per-clip lengths (or targets): every sample has all `steps`."""
        if not self.sequence_lengths or targets is None:
            return None
        frames = targets[:, 0].long()
        return torch.div(frames + self.temporal_stride - 1, self.temporal_stride, rounding_mode="floor").clamp(0, steps)

    def decode(self, outputs: torch.Tensor, targets: Optional[torch.Tensor] = None) -> torch.Tensor:
        """`targets`: the batch's, where known (with per-clip lengths, decoding stops at each clip's output steps)."""
        self.expect_dims(outputs, 3, "N x steps x classes")
        lengths = self.output_lengths(targets, outputs.shape[1])
        if self.undecoded_class is not None:
            outputs = outputs.clone()
            outputs[..., self.undecoded_class] = float("-inf")
        if self.beam_width > 1:
            return ctc_beam_search(outputs.float().log_softmax(-1), lengths, self.beam_width)
        return ctc_greedy(outputs.argmax(-1), lengths)

    def correct(self, predicted: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The whole sequence, as the engine's seq_accuracy: both padded with -1 to one width."""
        labels = self.labels(targets)
        width = max(predicted.shape[1], labels.shape[1])
        return (pad_sequences(predicted, width) == pad_sequences(labels, width)).all(1)

    def class_count(self, outputs: torch.Tensor) -> int:
        return outputs.shape[-1]

    def decoded_metrics(self, predicted: torch.Tensor, targets: torch.Tensor) -> Dict[str, float]:
        """The edits (substitutions, deletions, insertions) of every sample's decoding against its target, summed, over
        the target words summed, as jiwer and torchmetrics pool them: wer with per-clip lengths (a word is a gloss),
        cer without (a word is a character). The engine's wer decodes greedily; this one as config key beam_width says."""
        errors = word_errors(predicted, self.labels(targets))
        return {"wer" if self.sequence_lengths else "cer": errors.rate} if errors.words else {}

    def target_text(self, targets: torch.Tensor, classes: Optional[List[str]]) -> List[str]:
        return super().target_text(targets if targets.is_floating_point() else self.labels(targets), classes)

    def alphabet(self, classes: Optional[List[str]], count: int) -> List[str]:
        return names_for(classes, count) if classes else ["-"] + [str(i) for i in range(1, count)]  # 0: the blank

    def aligned(self, targets: torch.Tensor, predicted: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, str]:
        """Position by position where the lengths agree."""
        targets = self.labels(targets)
        same = (targets >= 0).sum(1) == (predicted >= 0).sum(1)
        width = min(targets.shape[1], predicted.shape[1])
        return targets[same][:, :width], predicted[same][:, :width], " (sequences of the right length)"


def ctc_fits(frames: int, glosses: Sequence[int], stride: int = 1) -> bool:
    """Whether a clip of `frames` frames can carry `glosses` under CTC with a model of temporal stride `stride`: its
    ceil(frames / stride) output steps must hold every gloss and a blank between each pair of equal neighbours. A clip
    that does not fit has no alignment: its loss counts as 0 and the epoch's ctc_unfit counts it; refuse it first."""
    repeats = sum(a == b for a, b in zip(glosses, glosses[1:]))
    return math.ceil(frames / stride) >= len(glosses) + repeats


@dataclass
class WordErrors:
    """Decoded sequences against their targets: per sample the substitutions, deletions and insertions of a minimal
    alignment (Levenshtein; an (N, 3) tensor) and the target's words; counted over all samples, which target word was
    replaced by which decoded one, which target words were deleted and which decoded words inserted."""

    per_sample: torch.Tensor
    target_words: torch.Tensor
    substitutions: Counter = field(default_factory=Counter)  # (target word, decoded word) -> times
    deleted: Counter = field(default_factory=Counter)  # target word -> times deleted
    inserted: Counter = field(default_factory=Counter)  # decoded word -> times inserted

    @property
    def substituted(self) -> Counter:
        """Target word -> times it was substituted (by any decoded word)."""
        counts = Counter()
        for (truth, _), times in self.substitutions.items():
            counts[truth] += times
        return counts

    @property
    def words(self) -> int:
        return int(self.target_words.sum())

    @property
    def rate(self) -> float:
        """(S + D + I) / target words, over all samples (jiwer's wer)."""
        return float(self.per_sample.sum()) / self.words


def word_errors(predicted: torch.Tensor, targets: torch.Tensor) -> WordErrors:
    """The word errors of (N, L) decoded sequences against (N, S) targets, both padded with -1 (a word is a class
    id: a gloss, a character)."""
    per_sample = torch.zeros(len(targets), 3, dtype=torch.int64)
    target_words = torch.zeros(len(targets), dtype=torch.int64)
    substitutions, deleted, inserted = Counter(), Counter(), Counter()
    for i, (guess, truth) in enumerate(zip(predicted.tolist(), targets.tolist())):
        guess, truth = [c for c in guess if c >= 0], [c for c in truth if c >= 0]
        target_words[i] = len(truth)
        for kind, at, decoded_at in _C.word_edits(truth, guess):
            per_sample[i, "sdi".index(kind)] += 1
            if kind == "s":
                substitutions[truth[at], guess[decoded_at]] += 1
            elif kind == "d":
                deleted[truth[at]] += 1
            else:
                inserted[guess[decoded_at]] += 1
    return WordErrors(per_sample, target_words, substitutions, deleted, inserted)


def pad_sequences(sequences: torch.Tensor, width: int) -> torch.Tensor:
    """(N, L) class indices padded with -1 to (N, width); negative entries are padding already."""
    sequences = sequences.long()
    sequences = torch.where(sequences >= 0, sequences, torch.full_like(sequences, -1))
    return nn.functional.pad(sequences, (0, width - sequences.shape[1]), value=-1)
