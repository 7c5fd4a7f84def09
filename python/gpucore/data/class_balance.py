"""Class imbalance: the training data's class labels and counts, config key class_weights resolved to one weight per
class, and config key sampler balanced's weight per sample."""
from __future__ import annotations

from typing import List, Optional, Sequence

import torch

from ..errors import ConfigError
from .image_files import ImageFiles
from .torch_samples import DatasetSamples


def class_labels(data, key: str) -> torch.Tensor:
    """Every training sample's class index (int64, in the data's order) of `data` as a run trains on it: image files,
    (inputs, targets) tensors or a torch Dataset's samples. `key` names the config key that needs them, for errors."""
    if isinstance(data, ImageFiles):
        labels = data.targets
    elif isinstance(data, tuple) and len(data) == 2 and isinstance(data[1], torch.Tensor):
        labels = data[1]
    elif isinstance(data, DatasetSamples):
        labels = data.labels()
    else:
        raise ConfigError(f"config key '{key}' needs the training data's class labels, which a "
                          f"{type(data).__name__} does not give before it is iterated: pass its Dataset as train_data "
                          "(or tensors), or leave the key out")
    labels = torch.as_tensor(labels)
    if labels.dim() != 1 or labels.is_floating_point() or labels.is_complex():
        raise ConfigError(f"config key '{key}' needs one integer class label per training sample, got targets of "
                          f"shape {tuple(labels.shape)} ({labels.dtype})")
    if labels.numel() and int(labels.min()) < 0:
        raise ConfigError(f"config key '{key}': a training target is {int(labels.min())}, not a class index")
    return labels.to(torch.int64).cpu()


def class_count(labels: torch.Tensor, classes: Optional[Sequence[str]], outputs: Optional[int]) -> int:
    """How many classes there are: the data's class names, else the model's outputs, else the largest label + 1."""
    if classes:
        return len(classes)
    if outputs is not None:
        return outputs
    return int(labels.max()) + 1 if labels.numel() else 0


def resolve_class_weights(setting, labels: torch.Tensor, n_classes: int,
                          classes: Optional[Sequence[str]]) -> Optional[List[float]]:
    """Config key class_weights as one weight per class (None for none). balanced is scikit-learn's
    compute_class_weight('balanced'): n_samples / (n_classes * the class's count)."""
    if setting == "none":
        return None
    names = list(classes) if classes and len(classes) == n_classes else [str(i) for i in range(n_classes)]
    if setting == "balanced":
        counts = _counts(labels, n_classes, "class_weights")
        empty = [names[i] for i in range(n_classes) if counts[i] == 0]
        if empty:
            raise ConfigError(f"config key 'class_weights' is balanced, but class {', '.join(empty)} has no training "
                              "samples (its weight would be infinite): give the weights as a list, or add samples")
        return (labels.numel() / (n_classes * counts.double())).tolist()
    if len(setting) != n_classes:
        raise ConfigError(f"config key 'class_weights' has {len(setting)} weights, but the data has {n_classes} "
                          f"classes ({', '.join(names[:10])}{', ...' if n_classes > 10 else ''}): give one per class, "
                          "in the classes' order")
    return [float(w) for w in setting]


def balanced_sampling_weights(labels: torch.Tensor, n_classes: int) -> torch.Tensor:
    """Config key sampler balanced: float64 per sample, 1 / its class's count, so that each class is drawn equally
    often in expectation."""
    counts = _counts(labels, n_classes, "sampler")
    return 1.0 / counts.double()[labels]


def _counts(labels: torch.Tensor, n_classes: int, key: str) -> torch.Tensor:
    if labels.numel() and int(labels.max()) >= n_classes:
        raise ConfigError(f"config key '{key}': a training target is {int(labels.max())}, but there are {n_classes} "
                          "classes")
    return torch.bincount(labels, minlength=n_classes)
