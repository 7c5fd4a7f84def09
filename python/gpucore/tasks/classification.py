"""One class per input (loss cross_entropy): the class with the highest logit. Per-pixel outputs (N x C x H x W, with
masks of class ids) follow segmentation's rules (for_outputs)."""
from __future__ import annotations

from typing import List, Optional

import torch
from torch import nn

from .base import Task, output_names


class Classification(Task):
    name = "classification"
    losses = ("cross_entropy",)
    report_sections = "classification"
    reports_top_k = True
    labels_from_folders = True
    trains_on_masks = True  # masks of class ids: multi-class segmentation
    primary_metric = "accuracy"
    balanced_metric = "balanced_accuracy"  # the mean of the classes' recalls: predicting the largest class scores 1/C
    weighs_classes = True

    def primary_metrics(self, imbalanced: bool = False):
        """The classes' mean IoU where the outputs are per pixel (segmentation; the engine's evaluation reports it only
        then), else accuracy, or balanced accuracy when the classes are imbalanced."""
        return ("miou", self.balanced_metric if imbalanced else self.primary_metric)

    def for_outputs(self, outputs: torch.Tensor) -> Task:
        """Per-pixel outputs (N x C x H x W) are masks: segmentation's rules and rows."""
        from .segmentation import Segmentation

        return self.as_task(Segmentation) if outputs.dim() == 4 else self

    def correct(self, predicted: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Right, or a target of ignore_index (scored in no metric)."""
        return super().correct(predicted, targets) | (targets.reshape(predicted.shape) == self.ignore_index)

    def decode(self, outputs: torch.Tensor, targets: Optional[torch.Tensor] = None) -> torch.Tensor:
        self.expect_dims(outputs, 2, "N x classes")
        return outputs.argmax(1)

    def confidence(self, outputs: torch.Tensor) -> Optional[torch.Tensor]:
        return outputs.softmax(1).amax(1)

    def sample_losses(self, outputs: torch.Tensor, targets: torch.Tensor) -> Optional[torch.Tensor]:
        if targets.dim() != 1:
            return None  # soft labels
        weight = None if self.class_weights is None else torch.tensor(self.class_weights, device=outputs.device)
        return nn.functional.cross_entropy(outputs, targets.long(), weight=weight, reduction="none",
                                           label_smoothing=self.label_smoothing, ignore_index=self.ignore_index)

    def target_text(self, targets: torch.Tensor, classes: Optional[List[str]]) -> List[str]:
        if targets.dim() != 1:
            return super().target_text(targets, classes)
        names = output_names(classes, int(max(targets.max().item() + 1, len(classes or []))))
        return [names[int(t)] if t != self.ignore_index else "(ignored)" for t in targets]

    def add_prediction_columns(self, rows, outputs, predicted, classes, top_k) -> None:
        """The top-k classes with their softmax probabilities. An output without a class name (a head wider than the
        checkpoint's class list) is named output_INDEX; without any class names, an output is its index."""
        probabilities, indices = torch.softmax(outputs, 1).topk(min(top_k, outputs.shape[1]), dim=1)
        names = output_names(classes, outputs.shape[1])
        for row, p, index in zip(rows, probabilities.tolist(), indices.tolist()):
            for rank, (value, i) in enumerate(zip(p, index), start=1):
                row[f"class_{rank}"] = names[i]
                row[f"index_{rank}"] = i
                row[f"probability_{rank}"] = round(value, 6)
