"""Class imbalance: the training data's class labels and counts, config key class_weights resolved to one weight per
class, config key sampler balanced's weight per sample, and whether the classes are imbalanced enough for monitor:
auto to follow balanced accuracy."""
from __future__ import annotations

from typing import List, Optional, Sequence

import torch

from ..errors import ConfigError
from .image_files import ImageFiles
from .torch_samples import DatasetSamples

# monitor: auto follows balanced accuracy from this ratio of the largest training class's samples to the smallest's on.
# 10:1 is the mildest imbalance of the long-tailed benchmarks (CIFAR-10-LT's ratio 10), where predicting the largest
# class alone already scores an accuracy of 0.91 on two classes; the curated sets scored by plain accuracy stay well
# below it (ImageNet-1k 1300:732, Oxford Flowers-102 258:40), while Caltech-101 (800:40), conventionally scored by the
# mean per-class accuracy, is above.
IMBALANCE_RATIO = 10


def class_labels(data, key: str) -> torch.Tensor:
    """Every training sample's class index (int64, in the data's order) of `data` as a run trains on it: image files,
    (inputs, targets) tensors or a torch Dataset's samples. `key` names the config key that needs them, for errors."""
    labels = _targets(data, read_samples=True)
    if labels is None:
        raise ConfigError(f"config key '{key}' needs the training data's class labels, which a "
                          f"{type(data).__name__} does not give before it is iterated: pass its Dataset as train_data "
                          "(or tensors), or leave the key out")
    problem = _not_class_indices(labels)
    if problem:
        raise ConfigError(f"config key '{key}' {problem}")
    return labels.to(torch.int64).cpu()


def known_class_labels(data) -> Optional[torch.Tensor]:
    """The training data's class index per sample (int64) when it is known without reading a sample (image files,
    tensors, a torch Dataset's `targets` list) and is one class per sample; None otherwise (masks, several labels
    per sample, soft targets, a data set that would have to be read)."""
    labels = _targets(data, read_samples=False)
    return None if labels is None or _not_class_indices(labels) else labels.to(torch.int64).cpu()


def imbalance(labels: torch.Tensor, classes: Optional[Sequence[str]]) -> Optional[str]:
    """Why the training classes of `labels` are imbalanced (the largest has at least IMBALANCE_RATIO times the
    samples of the smallest, among the classes with samples), or None when they are not."""
    counts = torch.bincount(labels)
    present = counts.nonzero().flatten()
    if present.numel() < 2:
        return None
    largest, smallest = (int(present[counts[present].argmax()]), int(present[counts[present].argmin()]))
    ratio = int(counts[largest]) / int(counts[smallest])
    if ratio < IMBALANCE_RATIO:
        return None
    name = lambda k: repr(classes[k]) if classes and k < len(classes) else f"class {k}"  # noqa: E731
    return (f"the training classes are imbalanced: {name(largest)} has {int(counts[largest])} samples, "
            f"{name(smallest)} {int(counts[smallest])} ({ratio:.3g}:1, at least {IMBALANCE_RATIO}:1)")


def _targets(data, read_samples: bool) -> Optional[torch.Tensor]:
    """The targets of image files, (inputs, targets) tensors or a torch Dataset's samples (those read one by one only
    when `read_samples`), else None."""
    if isinstance(data, ImageFiles):
        return torch.as_tensor(data.targets)
    if isinstance(data, tuple) and len(data) == 2 and isinstance(data[1], torch.Tensor):
        return data[1]
    if isinstance(data, DatasetSamples):
        labels = data.labels(read_samples)
        return None if labels is None else torch.as_tensor(labels)
    return None


def _not_class_indices(labels: torch.Tensor) -> Optional[str]:
    """What keeps `labels` from being one class index per sample, as the end of a message; None when they are."""
    if labels.dim() != 1 or labels.is_floating_point() or labels.is_complex():
        return (f"needs one integer class label per training sample, got targets of shape {tuple(labels.shape)} "
                f"({labels.dtype})")
    if labels.numel() and int(labels.min()) < 0:
        return f"needs class indices, but a training target is {int(labels.min())}"
    return None


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
        counts = class_counts(labels, n_classes, "class_weights")
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
    counts = class_counts(labels, n_classes, "sampler")
    return 1.0 / counts.double()[labels]


def class_counts(labels: torch.Tensor, n_classes: int, key: str) -> torch.Tensor:
    """Training samples per class of `n_classes`; ConfigError naming config key `key` for a label past them."""
    if labels.numel() and int(labels.max()) >= n_classes:
        raise ConfigError(f"config key '{key}': a training target is {int(labels.max())}, but there are {n_classes} "
                          "classes")
    return torch.bincount(labels, minlength=n_classes)
