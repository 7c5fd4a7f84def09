"""One data set's plan: how gpucore serves it, every fact decided once when the plan is made and read from it by
everything after (the epochs' batches, validation, evaluate, the report, the first batch's diagnosis, the out-of-memory
rebuild, gpucore.DataLoader). timm resolves a data config, then creates the data set, the transform and the loader,
each once; a plan also records what the data set was (identity.py), so that a resume can check it.

The chain: data set (readers.py, builtin.py, synthetic.py; a torch Dataset's samples: torch_samples.py) -> plan_data
(here) -> EpochData and its C++ batch source (epoch_data.py).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple, Union

import torch

from .. import transforms as transforms_list
from ..config import KEY_BY_NAME
from ..device.select import memory_stats
from ..errors import ConfigError
from .clip_sequences import ClipSequences
from .identity import identity_of
from .image_files import ImageFiles
from .tensor_inputs import as_images, input_stats
from .torch_samples import DatasetSamples, dataset_samples, is_hf_dataset


@dataclass(frozen=True)
class DataPlan:
    """How one data set is served, settled once."""

    data: Any  # (inputs, targets) tensors, ImageFiles, a torch Dataset's samples (DatasetSamples) or a DataLoader
    training: bool  # the training form (shuffled, augmented) or the deterministic one
    device: torch.device  # where its batches are made
    cache: Optional[str]  # device, host or none (choose_cache); None: a torch Dataset or DataLoader (torch's loader)
    transforms: List[Any]  # the transforms list this set runs: the training form, or the deterministic one
    own_sizes: bool  # images at their own sizes, each through the list's first (per-image) transforms
    # (a torch Dataset's images each go through the whole list: torch_samples.ServedSamples)
    normalization: Optional[Tuple[list, list]]  # per-channel (mean, std) the batches are standardised with
    identity: Optional[dict]  # what the data set is (identity.py), where asked for
    description: str  # the data set in words (describe_data), for messages and the report
    # One input as the set reads it, before the transforms (images: [C, H, W], H and W 0 for images read at their own
    # sizes); None where the data does not say (a DataLoader). A run's checkpoints record its training set's.
    input_shape: Optional[List[int]]

    @property
    def native(self) -> bool:
        """Served by gpucore's C++ sources (tensors, image files), not a torch loader."""
        return self.cache is not None

    @property
    def output_size(self) -> Optional[Tuple[int, int]]:
        """(height, width) of one image after the set's transforms, the size the model gets (images at their own
        sizes: what the list's first transforms bring each to); None for inputs that are not images, or images of
        sizes that no transform brings to one.

        Raises:
            ConfigError: a list whose parameters cannot be drawn for images of this size.
        """
        shape = self.input_shape
        if not shape or len(shape) != 3 or not (self.own_sizes or (shape[1] and shape[2])):
            return None
        return tuple(transforms_list.output_size(self.transforms, shape[1], shape[2]))


def plan_data(data, *, device: torch.device, training: bool, transforms: Any = (), crop_padding: int = 0,
              hflip: bool = False, cache: str = "auto", normalize: Union[bool, Tuple[list, list], None] = True,
              identify: bool = False) -> DataPlan:
    """The plan of `data`.

    Args:
        data: (inputs, targets) tensors, ImageFiles, a torch Dataset (its samples as DatasetSamples read them; a
            dict sample's keys the defaults, unless given as DatasetSamples) or a DataLoader.
        device: the training device (the cache choice depends on its free memory).
        training: the training form (crop_padding, hflip and transforms' random draws) or the deterministic one.
        transforms: config key `transforms`; crop_padding and hflip its shorthands (training only). For the
            deterministic form, also that list already planned (transforms.ListPlan: a loaded model's).
        cache: config key `cache`.
        normalize: True: this set's per-channel statistics; (mean, std): those (a validation set takes its training
            set's; an evaluation the checkpoint's); False or None: none.
        identify: record the data set's identity (a training run's checkpoints hold it).

    Raises:
        ConfigError: transforms for data gpucore does not serve, a bad cache, data of no kind gpucore takes.
    """
    data = dataset_samples(data)
    identity = identity_of(data) if identify else None  # before any decoding leaves unreadable files out
    if isinstance(data, ClipSequences):
        return _clip_plan(data, device=device, training=training, transforms=transforms, crop_padding=crop_padding,
                          hflip=hflip, normalize=normalize, identity=identity)
    if isinstance(data, DatasetSamples):
        return _dataset_plan(data, device=device, training=training, transforms=transforms,
                             crop_padding=crop_padding, hflip=hflip, normalize=normalize, identity=identity)
    if not is_native(data):
        if not isinstance(data, torch.utils.data.DataLoader):
            stream = isinstance(data, torch.utils.data.IterableDataset)
            raise ConfigError("training data must be (inputs, targets) tensors, a gpucore data set, a torch Dataset "
                              "(read by index: __len__ and __getitem__) or a DataLoader, got "
                              + (f"a torch IterableDataset ({type(data).__name__}): wrap it in a DataLoader with a "
                                 "length" if stream else type(data).__name__))
        if _augments(training, crop_padding, hflip, transforms):
            raise ConfigError("crop_padding, hflip and transforms apply to images, and a DataLoader batches itself: "
                              "transform its samples yourself, or pass its Dataset as train_data to have gpucore "
                              "transform them")
        return DataPlan(data=data, training=training, device=device, cache=None, transforms=[], own_sizes=False,
                        normalization=None, identity=identity, description=describe_data(data),
                        input_shape=None)
    cache = choose_cache(data, cache, device)
    files = isinstance(data, ImageFiles)
    images = files or as_images(data[0]).dim() == 4
    run, own_sizes = [], False
    if images:
        run, per_image = _list_form(transforms, training, crop_padding, hflip,
                                    lambda: data.image_shape()[1:] if files else as_images(data[0]).shape[2:])
        own_sizes = files and data.size == (0, 0) and data.mask_paths is None and bool(transforms) and per_image
    elif _augments(training, crop_padding, hflip, transforms):
        raise ConfigError(f"crop_padding, hflip and transforms need N x C x H x W images, got inputs "
                          f"{tuple(as_images(data[0]).shape)}")
    normalization = _normalization(normalize, lambda: data_stats(data, cache, own_sizes))
    shape = [data.channels, *data.size] if files else list(as_images(data[0]).shape[1:])
    return DataPlan(data=data, training=training, device=device, cache=cache, transforms=run, own_sizes=own_sizes,
                    normalization=normalization, identity=identity, description=describe_data(data, own_sizes),
                    input_shape=shape)


def _dataset_plan(data: DatasetSamples, *, device: torch.device, training: bool, transforms: Any, crop_padding: int,
                  hflip: bool, normalize, identity: Optional[dict]) -> DataPlan:
    """The plan of a torch Dataset's samples (torch_samples.py): images go through the transforms list one by one (each
    at its own size, so a list that starts by bringing them to one size takes images of mixed sizes), then are scaled
    and normalised as image tensors are; float inputs go to the model as they are."""
    if not data.images:
        if _augments(training, crop_padding, hflip, transforms):
            raise ConfigError(f"crop_padding, hflip and transforms apply to images, and the torch Dataset's inputs are "
                              f"float tensors (the first two samples: {data.first}): return uint8 images (PIL images, "
                              "PILToTensor, decode_image) to have gpucore transform them, or transform them yourself")
        return DataPlan(data=data, training=training, device=device, cache=None, transforms=[], own_sizes=False,
                        normalization=None, identity=identity, description=describe_data(data, False), input_shape=None)
    run, own_sizes = _list_form(transforms, training, crop_padding, hflip, lambda: data.image_shape()[1:])
    if not own_sizes and not data.same_size:
        raise ConfigError(f"the torch Dataset's images are of mixed sizes (the first two samples: {data.first}): start "
                          "config key transforms with RandomResizedCrop: {size: N} (or Resize + CenterCrop), which "
                          "brings each image to one size, or return images of one size")
    normalization = _normalization(normalize, data.normalization_stats)
    channels, height, width = data.image_shape()
    return DataPlan(data=data, training=training, device=device, cache=None, transforms=run, own_sizes=own_sizes,
                    normalization=normalization, identity=identity, description=describe_data(data, own_sizes),
                    input_shape=[channels, 0, 0] if own_sizes else [channels, height, width])


def _clip_plan(data: ClipSequences, *, device: torch.device, training: bool, transforms: Any, crop_padding: int,
               hflip: bool, normalize, identity: Optional[dict]) -> DataPlan:
    """The plan of gloss-labelled clips (clip_sequences.py), served by torch's loader: each clip's frames through the
    transforms list, one draw per clip, and normalised (the training form with the set's temporal rescaling; else the
    deterministic form, without it); keypoint sequences as they are."""
    if data.kind == "keypoints":
        if _augments(training, crop_padding, hflip, transforms):
            raise ConfigError("crop_padding, hflip and transforms apply to video frames, and these clips are keypoint "
                              "sequences: leave them out (data_kwargs rescale draws their temporal rescaling)")
        run, normalization = [], None
    else:
        run, _ = _list_form(transforms, training, crop_padding, hflip, lambda: data.size)
        normalization = _normalization(normalize, data.normalization_stats)
    served = data if training else data.deterministic()
    return DataPlan(data=served, training=training, device=device, cache=None, transforms=run, own_sizes=False,
                    normalization=normalization, identity=identity, description=describe_data(served),
                    input_shape=data.frame_shape())


def _augments(training: bool, crop_padding: int, hflip: bool, transforms: Any) -> bool:
    """Whether a training set is asked for random augmentation (crop_padding, hflip or a transforms list)."""
    return training and (crop_padding > 0 or hflip or bool(transforms))


def _list_form(transforms: Any, training: bool, crop_padding: int, hflip: bool,
               image_size: Callable[[], Tuple[int, int]]) -> Tuple[List[Any], bool]:
    """The transforms list a set runs (the training form with its shorthands, or the deterministic form) and whether
    its first transforms run on each image at its own size; `image_size()` is read only for crop_padding's
    RandomCrop, of the images' one size. A list planned already (a loaded model's) gives its deterministic form."""
    padding = crop_padding if training else 0
    if isinstance(transforms, transforms_list.ListPlan) and not training:
        forms = transforms
    else:
        forms = transforms_list.plan(transforms, padding, hflip and training,
                                     tuple(image_size()) if padding else (0, 0))
    if training:
        return forms.training, forms.training_per_image
    return forms.validation, forms.validation_per_image


def _normalization(normalize: Union[bool, Tuple[list, list], None],
                   own_statistics: Callable[[], Tuple[list, list]]) -> Optional[Tuple[list, list]]:
    """plan_data's `normalize` resolved: the set's own statistics (True), the (mean, std) given, or None."""
    if normalize is True:
        return own_statistics()
    return tuple(normalize) if normalize else None


def is_native(data) -> bool:
    """Data gpucore's C++ sources serve: (inputs, targets) tensors or image files."""
    return isinstance(data, ImageFiles) or (isinstance(data, (tuple, list)) and len(data) == 2
                                            and all(isinstance(t, torch.Tensor) for t in data))


def choose_cache(data, cache: str, device: torch.device) -> str:
    """device, host or none for `data` ((inputs, targets) tensors or ImageFiles) and config `cache`.

    auto: on the device when the decoded data takes at most a quarter of its free memory (host memory
    for CPU training), else in host memory when image files fit in half of the available memory, else
    streamed from the files. In-memory tensors are never "none".
    """
    caches = KEY_BY_NAME["cache"].choices
    if cache not in caches:
        raise ConfigError(f"cache must be one of {', '.join(caches)}, got '{cache}'")
    files = isinstance(data, ImageFiles)
    if cache == "none" and not files:
        raise ConfigError("cache 'none' streams image files from disk (ImageFolder, Files, CSV or an image-folder "
                          "'data'); this data set is already in memory: use auto, device or host")
    if cache != "auto":
        return cache
    nbytes = data.nbytes() if files else sum(t.numel() * t.element_size() for t in data)
    in_memory = not files or data.decoded or nbytes <= (memory_stats("cpu")["free"] or 0) // 2
    if device.type == "cuda":
        if nbytes <= torch.cuda.mem_get_info(device)[0] // 4:
            return "device"
        return "host" if in_memory else "none"
    return "device" if in_memory else "none"


def data_stats(data, cache: str, own_sizes: bool = False) -> Tuple[list, list]:
    """Per-channel (mean, std) of a data set placed by `cache`, for normalisation: exact for data in
    memory, from a sample of the files when streaming. `own_sizes`: images kept at their own sizes."""
    if isinstance(data, ImageFiles):
        if own_sizes and cache != "none":
            data.images_at_own_size()  # decoded once, as the batches will read them: exact statistics
        return data.sample_stats(own_sizes=own_sizes) if cache == "none" or own_sizes else input_stats(data.inputs)
    return input_stats(data[0])


def describe_data(data, own_sizes: Optional[bool] = None) -> str:
    """A data set in words, in one format for every message, evaluation.json and report title: how many samples, what
    one is, where they come from: "40 images (3 x 32 x 32 uint8) from 'photos'", "6 images and masks (3-channel uint8,
    each at its own size) from 'seg/images'", "64 samples of tensors (1, 28, 28) torch.float32, targets ()", "40
    samples of a Photos (3-channel images of 24 x 24)". `own_sizes`: images kept at their own sizes, as the data's
    plan decided; None for data not planned (no image is decoded to say its shape)."""
    if isinstance(data, ImageFiles):
        kind = "images and masks" if data.mask_paths is not None else "images"
        if own_sizes:
            shape = f"{data.channels}-channel uint8, each at its own size"
        elif own_sizes is None and data.size == (0, 0) and not data.decoded:
            shape = f"{data.channels}-channel uint8"
        else:
            shape = " x ".join(map(str, data.image_shape())) + " uint8"
        return f"{len(data)} {kind} ({shape}) from '{data.origin}'"
    if isinstance(data, ClipSequences):
        frames = ("features" if data.kind == "keypoints" else "uint8 frames") + " " + " x ".join(
            map(str, data.frame_shape()))
        root = os.path.commonpath([os.path.abspath(clip.path) for clip in data.clips])
        return (f"{len(data)} {data.kind} clips (T x {frames}; glosses of a {len(data.vocabulary)}-entry vocabulary) "
                f"from '{root}'")
    if isinstance(data, DatasetSamples):
        source = type(data.dataset).__name__ + (" (Hugging Face)" if is_hf_dataset(data.dataset) else "")
        if own_sizes is None or not data.images:
            return f"{len(data)} samples of a {source}"
        channels, height, width = data.image_shape()
        size = "their own sizes" if own_sizes else f"{height} x {width}"
        return f"{len(data)} samples of a {source} ({channels}-channel images of {size})"
    if isinstance(data, (tuple, list)) and len(data) == 2 and isinstance(data[0], torch.Tensor):
        return (f"{data[0].shape[0]} samples of tensors {tuple(data[0].shape[1:])} {data[0].dtype}, targets "
                f"{tuple(data[1].shape[1:])}")
    return f"batches from a {type(data).__name__}"
