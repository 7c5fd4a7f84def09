"""The `transforms` config list: torchvision.transforms.v2 names and arguments, applied per sample to image
batches by gpucore's C++ pipeline (csrc/train/transforms). Each entry is a name alone (`RandomHorizontalFlip`)
or a one-key mapping of the name to its arguments (`RandomResizedCrop: {size: 224}`); argument names,
defaults and validity rules are torchvision's, and the C++ registry checks them.

crop_padding: p and hflip: true are shorthands for `RandomCrop: {size: the image size, padding: p}` and
`RandomHorizontalFlip`, prepended to the list. Validation, evaluation and prediction use the deterministic
form (validation_form)."""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

from . import _C
from .errors import ConfigError
from .values import is_number

# The random transforms validation replaces by their deterministic counterparts; every other random one is
# dropped there.
_DETERMINISTIC = ("Resize", "CenterCrop", "Normalize")


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
    return result


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
    """The deterministic part, as a `transforms` list: Resize, CenterCrop and Normalize kept;
    RandomResizedCrop(size) becomes Resize(size) + CenterCrop(size) (its interpolation and antialias kept),
    RandomCrop(size) CenterCrop(size); every other random transform is dropped."""
    result = []
    for name, arguments in entries(value):
        if name in _DETERMINISTIC:
            result.append({name: arguments})
        elif name == "RandomResizedCrop":
            resize = {key: arguments[key] for key in ("size", "interpolation", "antialias") if key in arguments}
            result += [{"Resize": resize}, {"CenterCrop": {"size": arguments.get("size")}}]
        elif name == "RandomCrop":
            result.append({"CenterCrop": {"size": arguments.get("size")}})
    return result


def output_size(value: Any, height: int, width: int) -> Tuple[int, int]:
    """(height, width) of height x width images after a `transforms` list."""
    return tuple(_C.check_transforms(specs(value), height, width))


def apply(images, value: Any, stats: Optional[Tuple[list, list]]):
    """N x C x H x W images through a `transforms` list (the deterministic form, for evaluation and prediction),
    normalised with `stats` (mean, std) unless the list has a Normalize, as float32."""
    mean, std = stats if stats else ([], [])
    return _C.apply_transforms(images, specs(value), list(mean), list(std))
