"""A set of labels per input (loss bce_with_logits, or multilabel_soft_margin without heads): each label whose
logit is positive (sigmoid > 0.5), the rule the engine's iou, dice, element accuracy, subset accuracy and macro F1
score with."""
from __future__ import annotations

from typing import Optional

import torch

from .base import Task, names_for


class MultiLabel(Task):
    name = "multi-label classification"
    losses = ("bce_with_logits", "multilabel_soft_margin")
    report_sections = "multi_label"
    primary_metric = "accuracy"  # of the labels

    @property
    def trains_on_masks(self) -> bool:
        """bce_with_logits with per-pixel outputs segments (for_outputs)."""
        return self.loss == "bce_with_logits"

    def for_outputs(self, outputs: torch.Tensor) -> Task:
        """Per-pixel outputs (N x K x H x W) are masks: segmentation's rules and rows."""
        from .segmentation import Segmentation

        return self.as_task(Segmentation) if outputs.dim() == 4 else self

    def decode(self, outputs: torch.Tensor, targets: Optional[torch.Tensor] = None) -> torch.Tensor:
        return outputs > 0

    def correct(self, predicted: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return super().correct(predicted, targets > 0.5)

    def add_prediction_columns(self, rows, outputs, predicted, classes, top_k) -> None:
        """The labels whose probability is above 0.5, and every label's sigmoid probability."""
        self.expect_dims(outputs, 2, "N x labels")
        names = names_for(classes, outputs.shape[1])
        for row, p in zip(rows, torch.sigmoid(outputs).tolist()):
            row["labels"] = ";".join(name for name, value in zip(names, p) if value > 0.5)
            for name, value in zip(names, p):
                row[f"probability_{name}"] = round(value, 6)
