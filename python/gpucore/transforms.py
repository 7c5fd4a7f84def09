"""The `transforms` config list: torchvision.transforms.v2 names and arguments, applied per sample to image
batches by gpucore's C++ pipeline (csrc/batches/transforms). Each entry is a name alone (`RandomHorizontalFlip`)
or a one-key mapping of the name to its arguments (`RandomResizedCrop: {size: 224}`); argument names,
defaults and validity rules are torchvision's, and the C++ registry checks them.

crop_padding: p and hflip: true are shorthands for `RandomCrop: {size: the image size, padding: p}` and
`RandomHorizontalFlip`, prepended to the list. Validation, evaluation and prediction use the deterministic
form (validation_form).

`Compose` applies such a list to a batch in your own loop, with the kernels training uses:

    >>> t = gpucore.transforms.Compose(["RandomHorizontalFlip", {"RandomResizedCrop": {"size": 24}}])
    >>> out = t(images, seed=0, epoch=3)          # uint8 N x C x H x W in, uint8 N x C x 24 x 24 out
    >>> out, params = t(images, seed=0, return_params=True)
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

import torch

from . import _C
from .errors import ConfigError
from .values import is_number


def entries(value: Any) -> List[Tuple[str, dict]]:
    """The list as (name, arguments) pairs; a ConfigError names a malformed entry."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"config key 'transforms' must be a list of transforms, got {type(value).__name__}")
    result = []
    for index, entry in enumerate(value):
        if isinstance(entry, str):
            result.append((entry.strip(), {}))
        elif isinstance(entry, dict) and len(entry) == 1 and isinstance(next(iter(entry)), str):
            name, arguments = next(iter(entry.items()))
            if arguments is None:
                arguments = {}
            if not isinstance(arguments, dict) or not all(isinstance(key, str) for key in arguments):
                raise ConfigError(f"transforms[{index}] {name}: arguments must be a mapping of names to values "
                                  f"({{size: 224}}), got {arguments!r}")
            result.append((name.strip(), dict(arguments)))
        else:
            raise ConfigError(f"transforms[{index}]: each entry is a name (RandomHorizontalFlip) or a one-key "
                              f"mapping of a name to its arguments (RandomResizedCrop: {{size: 224}}), got {entry!r}; "
                              f"supported names: {', '.join(_C.transform_names())}")
        _check_name(index, result[-1][0])
    return result


# torchvision's conversions to tensors and dtypes, which a list copied from a torchvision pipeline holds: gpucore's
# batches are tensors already, and it scales uint8 images to floats (and normalises them) itself.
CONVERSIONS = ("ToTensor", "PILToTensor", "ToImage", "ToDtype", "ConvertImageDtype", "ToPureTensor")


def _check_name(index: int, name: str) -> None:
    """A ConfigError for a name the C++ registry does not know, with the closest valid name (difflib)."""
    names = list(_C.transform_names())
    if name in names:
        return
    if name in CONVERSIONS:
        raise ConfigError(f"transforms[{index}] {name}: not needed, leave it out: gpucore's batches are tensors "
                          "already, and it scales uint8 images to floats in [0, 1] itself (then normalises them: "
                          "config key normalize, or a Normalize entry)")
    by_lower = {known.lower(): known for known in names}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    hint = f". Did you mean '{by_lower[close[0]]}'?" if close else ""
    raise ConfigError(f"transforms[{index}] {name}: unknown transform; supported: {', '.join(names)}{hint}")


def specs(value: Any) -> list:
    """A `transforms` list as the C++ TransformSpecs: numbers (a bool as 0/1, a scalar as one value) and words;
    None keeps torchvision's default."""
    result = []
    for index, (name, arguments) in enumerate(entries(value)):
        spec = _C.TransformSpec()
        spec.name = name
        numbers, words = {}, {}
        for argument, value in arguments.items():
            if value is None:
                continue
            if isinstance(value, str):
                words[argument] = value.strip()
            elif isinstance(value, bool):
                numbers[argument] = [1.0 if value else 0.0]
            elif is_number(value):
                numbers[argument] = [float(value)]
            elif isinstance(value, (list, tuple)) and value and all(is_number(v) and not isinstance(v, bool)
                                                                     for v in value):
                numbers[argument] = [float(v) for v in value]
            else:
                raise ConfigError(f"transforms[{index}] {name}: argument '{argument}' must be a number, a list of "
                                  f"numbers, true/false or a name, got {value!r}")
        spec.numbers, spec.words = numbers, words
        result.append(spec)
    return result


def check(value: Any) -> bool:
    """Config key `transforms`: every entry built as training builds it (a ConfigError names a bad one)."""
    _C.check_transforms(specs(value))
    return True


def training_form(value: Any, crop_padding: int, hflip: bool, image_size: Tuple[int, int]) -> List[Any]:
    """The `transforms` list training applies to images of `image_size` (height, width): the shorthands first."""
    shorthands = []
    if crop_padding > 0:
        shorthands.append({"RandomCrop": {"size": list(image_size), "padding": crop_padding}})
    if hflip:
        shorthands.append("RandomHorizontalFlip")
    return shorthands + list(value or [])


def validation_form(value: Any) -> List[dict]:
    """The deterministic part, as a `transforms` list, as the C++ registry gives it (each transform knows whether it
    is random): Resize, CenterCrop and Normalize kept; RandomResizedCrop(size) becomes Resize(size) +
    CenterCrop(size) (its interpolation and antialias kept), RandomCrop(size) CenterCrop(size); every other random
    transform is dropped. The arguments kept are the user's values, as given."""
    return _deterministic(value, _C.validation_form(specs(value)))


def _deterministic(value: Any, replacements: list) -> List[dict]:
    """validation_form's list from the C++ replacement of each entry of `value`."""
    result = []
    for (_, arguments), replacement in zip(entries(value), replacements):
        for spec in replacement:
            kept = set(spec.numbers) | set(spec.words)
            result.append({spec.name: {key: item for key, item in arguments.items() if key in kept}})
    return result


@dataclass(frozen=True)
class ListPlan:
    """What one data set's plan takes from config key `transforms` (and its shorthands), from one call into C++."""

    training: List[Any]  # the list training runs: crop_padding's RandomCrop and hflip's flip first
    validation: List[dict]  # its deterministic form (validation_form), without the shorthands
    # Whether the list's first transforms bring images of any size to one, each image at its own size (the training
    # form, and the deterministic one: Resize + CenterCrop); never with crop_padding, whose RandomCrop is of the
    # images' one size.
    training_per_image: bool
    validation_per_image: bool


def plan(value: Any, crop_padding: int = 0, hflip: bool = False, image_size: Tuple[int, int] = (0, 0)) -> ListPlan:
    """The training and deterministic forms of a `transforms` list and whether each runs per image, from one
    _C.transform_plan call. `image_size`: (height, width) of the images, for crop_padding's RandomCrop."""
    training = training_form(value, crop_padding, hflip, image_size)
    facts = _C.transform_plan(specs(training))
    shorthands = len(training) - len(list(value or []))
    one_size = crop_padding > 0
    return ListPlan(training=training, validation=_deterministic(value, facts["validation_form"][shorthands:]),
                    training_per_image=not one_size and facts["per_image_count"] > 0,
                    validation_per_image=not one_size and facts["validation_per_image_count"] > 0)


def output_size(value: Any, height: int, width: int) -> Tuple[int, int]:
    """(height, width) of height x width images after a `transforms` list; 0 x 0: of images of any sizes (a list
    with per-image transforms)."""
    return tuple(_C.check_transforms(specs(value), height, width))


def apply(images, value: Any, stats: Optional[Tuple[list, list]]):
    """N x C x H x W images through a `transforms` list (the deterministic form, for evaluation and prediction),
    normalised with `stats` (mean, std) unless the list has a Normalize, as float32."""
    mean, std = stats if stats else ([], [])
    return _C.apply_transforms(images, specs(value), list(mean), list(std), dtype=torch.float32)[0]


class Compose:
    """A `transforms` list (the config key's syntax: names and torchvision's arguments) as a batch transform, run
    by the same C++ kernels as training.

    Args:
        transforms: the list, e.g. ``["RandomHorizontalFlip", {"ColorJitter": {"brightness": 0.4}}]``.
        mean: normalisation mean (one value per channel, or one for all) applied when the list has no Normalize;
            None: none.
        std: normalisation standard deviation, as `mean`.

    Calling it on a batch (N x C x H x W, or one C x H x W image) on any device returns the batch in the input's
    dtype: uint8 images (0..255) stay uint8 unless the list normalises (Normalize, RandomErasing, mean/std), which
    gives float32; floating-point images (values in [0, 1]) stay in their dtype and take only the transforms that
    move pixels before Normalize (crops, flips, resizes, rotations, affine) since the colour transforms work on uint8.

    The per-sample parameters are drawn on the host from ``seed`` and ``epoch`` exactly as training draws those of the
    first N samples of that epoch (a run with that seed, in its epoch order).

    Raises:
        ConfigError: a malformed list (naming the entry and argument), images of the wrong rank, a colour transform
            on float images, a negative epoch.
    """

    def __init__(self, transforms: Sequence[Any], mean: Optional[Sequence[float]] = None,
                 std: Optional[Sequence[float]] = None):
        if (mean is None) != (std is None):
            raise ConfigError("Compose: give mean and std together, or neither")
        self.transforms = list(transforms)
        self.mean, self.std = list(mean or []), list(std or [])
        self._specs = specs(self.transforms)
        self.names = _C.transform_order(self._specs)  # the order they run and draw in; checks every entry

    def __repr__(self) -> str:
        stats = f", mean={self.mean}, std={self.std}" if self.mean else ""
        return f"Compose({self.transforms!r}{stats})"

    def output_size(self, height: int, width: int) -> Tuple[int, int]:
        """The size of height x width images after the list.

        Args:
            height: the input images' height.
            width: the input images' width.

        Returns:
            (height, width).
        """
        return tuple(_C.check_transforms(self._specs, height, width))

    def validation_form(self) -> "Compose":
        """The deterministic form evaluation uses: Resize, CenterCrop and Normalize kept, RandomResizedCrop(size) as
        Resize(size) + CenterCrop(size), RandomCrop(size) as CenterCrop(size), every other random transform dropped.

        Returns:
            A Compose of that form.
        """
        return Compose(validation_form(self.transforms), self.mean or None, self.std or None)

    def __call__(self, images: torch.Tensor, seed: int = 0, epoch: int = 0, return_params: bool = False):
        """The batch through the list; with return_params, also the drawn parameters: a list of
        (name, [tensors]) in the order the transforms run, each tensor's first dimension the sample."""
        if not isinstance(images, torch.Tensor):
            raise ConfigError(f"Compose: images must be a torch.Tensor, got {type(images).__name__}")
        if int(seed) < 0 or int(epoch) < 0:
            raise ConfigError(f"Compose: seed and epoch must be >= 0, got seed {seed}, epoch {epoch}")
        single = images.dim() == 3
        batch = images.unsqueeze(0) if single else images
        if batch.dim() != 4:
            raise ConfigError(f"Compose: images must be N x C x H x W or C x H x W, got shape {tuple(images.shape)}")
        if batch.dtype == torch.uint8:
            dtype = None  # uint8, or float32 where the list normalises: the C++ pipeline knows which
        elif batch.is_floating_point():
            dtype, batch = batch.dtype, batch.float()
        else:
            raise ConfigError(f"Compose: images must be uint8 (0..255) or floating point (0..1), got {batch.dtype}")
        out, drawn = _C.apply_transforms(batch, self._specs, self.mean, self.std, int(seed), int(epoch), dtype)
        out = out[0] if single else out
        if not return_params:
            return out
        return out, list(zip(self.names, drawn))
