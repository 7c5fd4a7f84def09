"""A torch Dataset's samples as gpucore reads them (DatasetSamples): each sample split into (input, target), from a
pair or a dict (Hugging Face `datasets` rows among them), and its image brought to a uint8 C x H x W tensor (PIL images,
uint8 tensors and arrays), which gpucore then transforms, scales and normalises as it does image tensors and folders;
float tensors go to the model as they are. What a data set returns is decided once, from its first two samples, and
every error about its samples says what they were and what gpucore takes."""
from __future__ import annotations

import copy
import hashlib
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .. import _C
from .. import transforms as transforms_list
from ..errors import ConfigError
from ..tasks.base import SEQUENCE_LENGTHS_IN_TARGET, sequence_lengths_in_target
from .labeled_data import LabeledData
from .tensor_inputs import pixel_stats

IMAGE_KEYS = ("image", "img", "pixel_values", "input")  # a dict sample's image, the first found (data_kwargs image_key)
LABEL_KEYS = ("label", "labels", "target")  # its target (data_kwargs label_key)
ACCEPTED = ("a torch Dataset's sample may be an (image, target) pair or a dict with an image key "
            f"({', '.join(IMAGE_KEYS)}) and a label key ({', '.join(LABEL_KEYS)}; data_kwargs image_key and label_key "
            "name others); the image a PIL image, a uint8 tensor (C x H x W or H x W) or a uint8 numpy array "
            "(H x W x C or H x W), which gpucore transforms, scales to [0, 1] and normalises, or a float tensor, which "
            "the model gets as it is (float samples of one shape)")
STATS_SAMPLES = 1024  # the most samples read for a data set's normalisation statistics (all of a smaller one)


class DatasetSamples(torch.utils.data.Dataset):
    """A torch Dataset (or a Hugging Face datasets.Dataset) whose samples gpucore reads as (input, target): images as
    uint8 C x H x W tensors (`images`), or float inputs as they are. Decided once from its first two samples.

    Args:
        dataset: the data set: dataset[i] is a sample, len(dataset) its length.
        image_key, label_key: a dict sample's keys; None: the first of IMAGE_KEYS and LABEL_KEYS it has.

    Raises:
        ConfigError: an empty data set, or samples of a form gpucore does not take (naming the first two).
    """

    def __init__(self, dataset, image_key: Optional[str] = None, label_key: Optional[str] = None):
        self.dataset = dataset
        if len(dataset) == 0:
            raise ConfigError(f"the torch Dataset ({type(dataset).__name__}) has no samples")
        first = [dataset[i] for i in range(min(2, len(dataset)))]
        self.first = describe_samples(first)  # what its first two samples are, for every message about them
        self.keys = _keys(first[0], image_key, label_key, self.first) if isinstance(first[0], dict) else None
        pairs = [self._pair(sample) for sample in first]
        inputs = [pair[0] for pair in pairs]
        for _, target in pairs:
            _as_target(target, self.first)
        self.images = not all(isinstance(x, torch.Tensor) and x.is_floating_point() for x in inputs)
        self.channels = _channels(inputs[0], self.first) if self.images else None  # every image is given these
        shapes = [tuple((self._image(x) if self.images else x).shape) for x in inputs]
        self.first_shape = shapes[0]
        self.same_size = len(set(shapes)) == 1  # of the first two: mixed sizes need per-image transforms
        self.classes = _class_names(dataset, self.keys[1] if self.keys else None)
        # Clips of any length whose targets carry their frame count (CTC): a batch pads them (ServedSamples.collate).
        self.sequence_lengths_in_target = sequence_lengths_in_target(dataset)
        if self.sequence_lengths_in_target and self.images:
            raise ConfigError(f"the torch Dataset says its targets carry each clip's frame count "
                              f"({SEQUENCE_LENGTHS_IN_TARGET}), but its inputs are not float tensors (the first two "
                              f"samples: {self.first}): give each clip as a float tensor, T x C x H x W or T x F")

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index):
        """Sample `index` as (input, target): images uint8 C x H x W."""
        inputs, target = self._pair(self.dataset[index])
        return (self._image(inputs) if self.images else inputs), target

    def subset(self, index: Sequence[int]) -> "DatasetSamples":
        """The samples at `index`, read as this set reads them (a val_fraction split)."""
        part = copy.copy(self)
        part.dataset = torch.utils.data.Subset(self.dataset, list(index))
        return part

    def labels(self, read_samples: bool = True) -> Optional[torch.Tensor]:
        """Every sample's target, in order (config keys class_weights and sampler count classes): the data set's own
        `targets` list (ImageFolder, CIFAR10; through torch Subsets) without reading a sample, else each sample's
        (None instead when not `read_samples`: monitor: auto does not read a data set to count its classes)."""
        dataset, index = self.dataset, None
        while isinstance(dataset, torch.utils.data.Subset):
            inner = torch.as_tensor(dataset.indices, dtype=torch.int64)
            index, dataset = (inner if index is None else inner[index]), dataset.dataset
        targets = getattr(dataset, "targets", None) if self.keys is None else None
        if isinstance(targets, (list, torch.Tensor)) and len(targets) == len(dataset):
            labels = torch.as_tensor(targets)
            return labels if index is None else labels[index]
        if not read_samples:
            return None
        return torch.stack([_as_target(self._pair(self.dataset[i])[1], self.first) for i in range(len(self))])

    def image_shape(self) -> Tuple[int, ...]:
        """(channels, height, width) of the first image."""
        return self.first_shape

    def normalization_stats(self) -> Tuple[list, list]:
        """Per-channel (mean, std) of the images scaled to [0, 1], from up to STATS_SAMPLES samples spread evenly over
        the set (all of a smaller one), each at its own size, as a folder's statistics are taken."""
        step = max(1, len(self) // STATS_SAMPLES)
        return pixel_stats(self[i][0].reshape(self.channels, -1) for i in range(0, len(self), step)[:STATS_SAMPLES])

    def served(self, transforms: list, normalization: Optional[Tuple[list, list]], seed: int) -> "ServedSamples":
        """These samples as a run's epochs serve them: images through `transforms` (a `transforms` list) and
        normalised; float inputs as they are."""
        return ServedSamples(self, transforms, normalization, seed)

    def _pair(self, sample) -> Tuple[Any, Any]:
        """(input, target) of a sample: a pair (or a longer tuple's first two), or a dict's image and label."""
        if self.keys is not None:
            if not isinstance(sample, dict) or any(key not in sample for key in self.keys):
                raise ConfigError(f"a sample of the torch Dataset is {describe(sample)}, without the keys "
                                  f"{list(self.keys)} its first sample has ({self.first}); {ACCEPTED}")
            return sample[self.keys[0]], sample[self.keys[1]]
        if isinstance(sample, (tuple, list)) and len(sample) >= 2:
            return sample[0], sample[1]
        raise ConfigError(f"a sample of the torch Dataset is {describe(sample)} (the first two: {self.first}); "
                          f"{ACCEPTED}")

    def _image(self, image) -> torch.Tensor:
        """A sample's image as uint8 C x H x W with the data set's channels (grey ones repeated to 3, RGBA and
        palette images converted to RGB)."""
        try:
            image = _uint8_image(image, self.channels)
        except ConfigError as error:
            raise ConfigError(f"{error} (the first two samples: {self.first}); {ACCEPTED}") from None
        if image.shape[0] != self.channels:
            if image.shape[0] != 1:
                raise ConfigError(f"an image of {image.shape[0]} channels among the data set's {self.channels}-channel "
                                  f"ones (the first two samples: {self.first}); give every image the same channels")
            image = image.expand(self.channels, -1, -1)
        return image


class ServedSamples(torch.utils.data.Dataset):
    """A DatasetSamples as an epoch serves it: each image through the `transforms` list and normalised (as float32,
    C x h x w), with its own random draws from (seed, epoch, sample), so an epoch's batches, and a resume's, are the
    same whatever the batch size or the order; float inputs as they are. EpochData sets `epoch` before each epoch."""

    def __init__(self, samples: DatasetSamples, transforms: list, normalization: Optional[Tuple[list, list]],
                 seed: int):
        self.samples, self.seed, self.epoch = samples, seed, 0
        self.specs = transforms_list.specs(transforms)
        self.mean, self.std = (list(v) for v in normalization) if normalization else ([], [])

    def __len__(self) -> int:
        return len(self.samples)

    def collate(self, batch: List[Tuple[Any, Any]]) -> Tuple[torch.Tensor, torch.Tensor]:
        """A batch of served samples as (inputs, targets) tensors (the DataLoader's collate_fn); inputs or targets of
        different shapes are a ConfigError naming them (images of mixed sizes need a list that brings each to one).
        Clips whose targets carry their frame count are padded instead (padded_clips)."""
        if self.samples.sequence_lengths_in_target:
            return padded_clips([sample[0] for sample in batch],
                                [_as_target(sample[1], self.samples.first) for sample in batch])
        parts = []
        for what, values in (("inputs", [sample[0] for sample in batch]), ("targets", [sample[1] for sample in batch])):
            values = [_as_target(value, self.samples.first) for value in values] if what == "targets" else values
            shapes = sorted({tuple(value.shape) for value in values})
            if len(shapes) > 1:
                raise ConfigError(f"a batch of the torch Dataset holds {what} of shapes "
                                  f"{', '.join(map(str, shapes[:3]))} (the first two samples: {self.samples.first}): "
                                  "every sample's must have one shape" + (
                                      "; for images of mixed sizes start config key transforms with "
                                      "RandomResizedCrop: {size: N} (or Resize + CenterCrop), which brings each to one "
                                      "size" if what == "inputs" and self.samples.images else ""))
            parts.append(torch.stack(values))
        return parts[0], parts[1]

    def __getitem__(self, index):
        inputs, target = self.samples[index]
        if not self.samples.images:
            return inputs, target
        out, _ = _C.apply_transforms(inputs.unsqueeze(0), self.specs, self.mean, self.std,
                                     sample_seed(self.seed, self.epoch, index), 0, torch.float32)
        return out[0], target


def padded_clips(clips: List[torch.Tensor], targets: List[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    """A batch of clips of any length (T x ..., one shape past T) and their targets (frame count, then the labels) as
    (N, T_max, ...) inputs padded with zeros past each clip's end and (N, 1 + S_max) targets padded with -1.

    Raises:
        ConfigError: clips of different shapes past their length, a target that is not 1-D integers with its clip's
            frame count first (between 0 and the clip's length).
    """
    frames_shapes = sorted({tuple(clip.shape[1:]) for clip in clips})
    if len(frames_shapes) > 1 or clips[0].dim() < 2:
        raise ConfigError(f"a batch of clips whose frames have shapes {', '.join(map(str, frames_shapes[:3]))}: each "
                          "clip must be T x C x H x W or T x F with one frame shape in the data set")
    for clip, target in zip(clips, targets):
        if target.dim() != 1 or target.is_floating_point() or len(target) < 1 or not 0 <= int(target[0]) <= len(clip):
            raise ConfigError(f"a clip of {len(clip)} frames has the target {target.tolist()}: with "
                              f"{SEQUENCE_LENGTHS_IN_TARGET} a target is integers, the clip's frame count "
                              f"(0..{len(clip)}) then its labels")
    return (torch.nn.utils.rnn.pad_sequence(clips, batch_first=True),
            torch.nn.utils.rnn.pad_sequence([t.long() for t in targets], batch_first=True, padding_value=-1))


def sample_seed(seed: int, epoch: int, sample: int) -> int:
    """The seed of one sample's transform draws in an epoch of a run seeded `seed` (a 64-bit hash of the three)."""
    return int.from_bytes(hashlib.blake2b(f"{seed}:{epoch}:{sample}".encode(), digest_size=8).digest(), "little")


def _as_target(target, first: str) -> torch.Tensor:
    """A sample's target as a tensor: a class (int), a number, or numbers (a tensor, an array, a list)."""
    try:
        tensor = torch.as_tensor(target)
    except (TypeError, ValueError, RuntimeError):
        tensor = None
    if tensor is None or not (tensor.is_floating_point() or tensor.dtype in (torch.int64, torch.int32, torch.int16,
                                                                            torch.int8, torch.uint8, torch.bool)):
        raise ConfigError(f"a sample's target is {_part(target)} (the first two samples: {first}); a target must be a "
                          "class index (int), a number, or numbers (a tensor, numpy array or list)")
    return tensor


def is_hf_dataset(data) -> bool:
    """A Hugging Face datasets.Dataset (map-style rows as dicts), found without importing `datasets`."""
    return type(data).__module__.split(".")[0] == "datasets" and hasattr(data, "features") \
        and hasattr(data, "__getitem__") and hasattr(data, "__len__")


def describe(sample) -> str:
    """What one sample is: its type, and each part's type, dtype and shape (a PIL image's mode and size)."""
    if isinstance(sample, dict):
        return "{" + ", ".join(f"{key!r}: {_part(value)}" for key, value in sample.items()) + "}"
    if isinstance(sample, (tuple, list)):
        return f"a {type(sample).__name__} (" + ", ".join(_part(value) for value in sample) + ")"
    return _part(sample)


def describe_samples(samples: list) -> str:
    return "; ".join(describe(sample) for sample in samples)


def _part(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor {value.dtype} {tuple(value.shape)}"
    if isinstance(value, np.ndarray):
        return f"ndarray {value.dtype} {value.shape}"
    if _is_pil(value):
        return f"PIL image {value.mode} {value.size[1]} x {value.size[0]}"
    return type(value).__name__ if not isinstance(value, (int, float, str)) else f"{type(value).__name__} {value!r}"


def _is_pil(value) -> bool:
    return type(value).__module__.startswith("PIL.") and hasattr(value, "mode") and hasattr(value, "convert")


def _keys(sample: dict, image_key: Optional[str], label_key: Optional[str], first: str) -> Tuple[str, str]:
    """(image key, label key) of dict samples: those given, else the first of IMAGE_KEYS and LABEL_KEYS present."""
    keys = []
    for given, defaults, what in ((image_key, IMAGE_KEYS, "image_key"), (label_key, LABEL_KEYS, "label_key")):
        found = [key for key in ([given] if given else defaults) if key in sample]
        if not found:
            wanted = f"'{given}'" if given else f"one of {', '.join(defaults)}"
            raise ConfigError(f"the torch Dataset's samples are dicts with keys {list(sample)}, none of them {wanted} "
                              f"(the first two samples: {first}): name the key with data_kwargs {what}")
        keys.append(found[0])
    return keys[0], keys[1]


def _channels(image, first: str) -> int:
    """The channels of a data set whose first image is `image`: a PIL image's mode (L: 1, else 3), a tensor's or an
    array's own."""
    if _is_pil(image):
        return 1 if image.mode in ("L", "1", "I", "I;16", "F") else 3
    return int(_uint8_image(image, None).shape[0]) if _is_image(image) else _not_an_image(image, first)


def _is_image(image) -> bool:
    if isinstance(image, torch.Tensor):
        return image.dtype == torch.uint8 and image.dim() in (2, 3)
    if isinstance(image, np.ndarray):
        return image.dtype == np.uint8 and image.ndim in (2, 3)
    return _is_pil(image)


def _not_an_image(image, first: str):
    raise ConfigError(f"the torch Dataset's inputs are {_part(image)} (the first two samples: {first}); {ACCEPTED}")


def _uint8_image(image, channels: Optional[int]) -> torch.Tensor:
    """A PIL image (converted to `channels`: L or RGB), a uint8 tensor (C x H x W, H x W) or a uint8 array (H x W x C,
    H x W) as a uint8 C x H x W tensor."""
    if _is_pil(image):
        mode = "L" if channels == 1 else "RGB"
        image = np.array(image if image.mode == mode else image.convert(mode))  # a writable copy, as torch wants
    if not _is_image(image):
        raise ConfigError(f"a sample's input is {_part(image)}, not an image")
    if isinstance(image, np.ndarray):
        tensor = torch.from_numpy(np.ascontiguousarray(image) if image.flags.writeable else image.copy())
        return tensor.unsqueeze(0) if tensor.dim() == 2 else tensor.permute(2, 0, 1)
    return image.unsqueeze(0) if image.dim() == 2 else image


def _class_names(dataset, label_key: Optional[str]) -> Optional[List[str]]:
    """The data set's class names: its `classes` (ImageFolder, CIFAR10), a Hugging Face ClassLabel's names, else one
    per label in its `targets` (0 to the largest); looked for through torch Subsets. None when it names none."""
    while isinstance(dataset, torch.utils.data.Subset):
        dataset = dataset.dataset
    classes = getattr(dataset, "classes", None)
    if is_hf_dataset(dataset) and label_key is not None:
        classes = getattr(dataset.features.get(label_key), "names", None)
    if isinstance(classes, (list, tuple)) and classes:
        return [str(name) for name in classes]
    targets = getattr(dataset, "targets", None)
    labels = torch.as_tensor(targets) if isinstance(targets, (list, torch.Tensor)) and len(targets) else None
    if labels is None or labels.dim() != 1 or labels.is_floating_point():
        return None
    return [str(label) for label in range(int(labels.max()) + 1)]


def dataset_samples(data, data_kwargs: Optional[dict] = None):
    """`data` as gpucore reads it: a torch Dataset (not a gpucore data set, not an IterableDataset) or a Hugging Face
    datasets.Dataset as DatasetSamples, a dict sample's keys from config key data_kwargs (image_key, label_key);
    anything else as it is. Gloss-labelled clips (ClipSequences), which serve their own epochs' samples, as they
    are."""
    from .clip_sequences import ClipSequences  # here: clip_sequences imports this module

    if isinstance(data, (DatasetSamples, LabeledData, ClipSequences, torch.utils.data.IterableDataset)):
        return data
    if is_hf_dataset(data) or isinstance(data, torch.utils.data.Dataset):
        kwargs = data_kwargs or {}
        return DatasetSamples(data, kwargs.get("image_key"), kwargs.get("label_key"))
    return data
