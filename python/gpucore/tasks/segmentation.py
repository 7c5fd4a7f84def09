"""A mask per input (loss dice_bce; bce_with_logits or cross_entropy with per-pixel outputs): N x H x W, each pixel's
class: with one output channel the foreground where the logit is positive (the engine's iou and dice), else the
channel with the highest logit (cross_entropy's masks of class ids; targets of ignore_index are scored in no metric)."""
from __future__ import annotations

from typing import Optional

import torch

from .base import Task

IGNORED = -1  # class_masks' id of the pixels no metric counts (config key ignore_index), outside every class


class Segmentation(Task):
    name = "segmentation"
    losses = ("dice_bce",)
    report_sections = "segmentation"
    keeps_outputs = False
    predicts_masks = True
    trains_on_masks = True
    # The foreground's intersection over union: pixel accuracy rewards predicting all background on small objects.
    primary_metric = "iou"

    def decode(self, outputs: torch.Tensor, targets: Optional[torch.Tensor] = None) -> torch.Tensor:
        self.expect_dims(outputs, 4, "N x K x H x W")
        return (outputs[:, 0] > 0).long() if outputs.shape[1] == 1 else outputs.argmax(1)

    def correct(self, predicted: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Every counted pixel right (ignore_index pixels are not counted)."""
        truth = self.class_masks(targets)
        right = (predicted == truth) | (truth == IGNORED)
        return right.reshape(right.shape[0], -1).all(1)

    def class_masks(self, targets: torch.Tensor) -> torch.Tensor:
        """Targets as N x H x W class ids, IGNORED where they are ignore_index: a one-channel float mask's
        foreground (> 0.5) is 1."""
        truth = targets[:, 0] if targets.dim() == 4 else targets
        if truth.is_floating_point():
            return (truth > 0.5).long()
        return torch.where(truth == self.ignore_index, IGNORED, truth.long())

    def add_prediction_columns(self, rows, outputs, predicted, classes, top_k) -> None:
        """The share of the image predicted as foreground (class > 0)."""
        for index, row in enumerate(rows):
            row["foreground"] = round((predicted[index] != 0).float().mean().item(), 6)
