"""What a data set was, recorded so that it can be checked: its identity (classes, sample counts, a fingerprint of
its files' relative paths and sizes, or of its tensors' bytes), kept in every checkpoint and training_stats.json,
compared on resume; and the val_fraction split of image files drawn by each file's name, so that adding files never
moves a training image into validation."""
from __future__ import annotations

import hashlib
import os
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from ..errors import ConfigError
from .clip_sequences import ClipSequences
from .image_files import ImageFiles
from .torch_samples import DatasetSamples


def relative_names(files: ImageFiles) -> List[str]:
    """Each file's path relative to the data set's folder, with '/' separators: the same wherever the folder is."""
    return [os.path.relpath(path, files.root).replace(os.sep, "/") for path in files.paths]


def _digest(parts) -> str:
    hasher = hashlib.blake2b(digest_size=16)
    for part in parts:
        hasher.update(part if isinstance(part, bytes) else str(part).encode("utf-8", "surrogateescape"))
        hasher.update(b"\0")
    return hasher.hexdigest()


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def identity_of(data) -> Optional[dict]:
    """The identity of a data set as a run serves it: image files by class (count and fingerprint of relative paths
    and sizes; a fingerprint of each file's label), in-memory tensors by a fingerprint of their bytes, a torch
    Dataset by its length; None for None."""
    if data is None:
        return None
    if isinstance(data, ImageFiles):
        names = relative_names(data)
        groups: Dict[str, List[Tuple[str, int]]] = {}
        masks = data.mask_paths or [None] * len(names)
        labels = data.targets.tolist() if data.classes and data.mask_paths is None else None
        for index, (name, path, mask) in enumerate(zip(names, data.paths, masks)):
            group = data.classes[labels[index]] if labels is not None and isinstance(labels[index], int) else ""
            groups.setdefault(group, []).append((name, _file_size(path), _file_size(mask) if mask else None))
        identity = {"kind": "image files", "root": os.path.abspath(data.root), "samples": len(names),
                    "classes": list(data.classes) if data.classes else None,
                    "groups": {group: {"files": len(entries), "fingerprint": _digest(str(e) for e in sorted(entries))}
                               for group, entries in sorted(groups.items())}}
        if data.mask_paths is None:  # each file's label, whatever the row order: a label file's ids or tags changed
            identity["labels"] = _digest(sorted(zip(names, map(str, data.targets.tolist()))))
        return identity
    if isinstance(data, (tuple, list)) and len(data) == 2 and all(isinstance(t, torch.Tensor) for t in data):
        return {"kind": "tensors", "samples": int(data[0].shape[0]),
                "fingerprint": _digest(part for tensor in data for part in _tensor_bytes(tensor))}
    if isinstance(data, torch.utils.data.DataLoader):
        return {"kind": "DataLoader", "batches": len(data) if hasattr(data, "__len__") else None}
    if isinstance(data, ClipSequences):  # the clips by relative path with their frame counts, and their glosses
        root = os.path.commonpath([os.path.abspath(c.path) for c in data.clips])
        entries = [(os.path.relpath(os.path.abspath(c.path), root), c.frames) for c in data.clips]
        return {"kind": f"{data.kind} clips", "root": root, "samples": len(data.clips), "classes": list(data.classes),
                "fingerprint": _digest(str(e) for e in sorted(entries)),
                "labels": _digest(sorted((name, str(ids)) for (name, _), ids in zip(entries, data.targets)))}
    if isinstance(data, DatasetSamples):
        data = data.dataset  # the caller's Dataset, by its own name
    return {"kind": type(data).__name__, "samples": len(data) if hasattr(data, "__len__") else None}


def _tensor_bytes(tensor: torch.Tensor):
    tensor = tensor.detach().to("cpu").contiguous()
    yield f"{tensor.dtype} {tuple(tensor.shape)}"
    yield tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""


def changes(recorded: dict, current: dict) -> List[str]:
    """What differs between two identities of one data set, in words (empty: the same data)."""
    if recorded.get("kind") != current.get("kind"):
        return [f"it was {recorded.get('kind')}, now it is {current.get('kind')}"]
    found = []
    if recorded.get("classes") != current.get("classes"):
        found.append(f"classes were {recorded.get('classes')}, now {current.get('classes')}")
    old_groups, new_groups = recorded.get("groups"), current.get("groups")
    if old_groups is not None and new_groups is not None:
        for group in sorted(set(old_groups) | set(new_groups)):
            old, new = old_groups.get(group), new_groups.get(group)
            named = f"class '{group}'" if group else "the files"
            if old is None or new is None:
                found.append(f"{named}: {'no files' if old is None else old['files']} files before, "
                             f"{'none' if new is None else new['files']} now")
            elif old["files"] != new["files"]:
                difference = new["files"] - old["files"]
                found.append(f"{named}: {abs(difference)} files {'added' if difference > 0 else 'removed'} "
                             f"({new['files']}, was {old['files']})")
            elif old["fingerprint"] != new["fingerprint"]:
                found.append(f"{named}: as many files ({new['files']}), but files renamed, replaced or changed in "
                             "size")
        if found or None in (recorded.get("labels"), current.get("labels")):  # older checkpoints record no labels
            return found
        if recorded["labels"] != current["labels"]:
            found.append("the same files, but their labels differ")
        return found
    for key in ("samples", "batches", "fingerprint"):
        if recorded.get(key) != current.get(key):
            found.append(f"{key} {recorded.get(key)} before, {current.get(key)} now" if key != "fingerprint"
                         else "the same number of samples, but their values differ")
    return found


def vocabulary_changes(recorded: Sequence[str], current: Sequence[str], only_recorded: str = "the data no longer has",
                       only_current: str = "new in the data") -> List[str]:
    """What differs between two gloss vocabularies, in words: the glosses only `recorded` has ("glosses
    ONLY_RECORDED: ..."), those only `current` has, or the first id whose gloss moved (empty: the same vocabulary, in
    the same order)."""
    if list(recorded) == list(current):
        return []
    gone, new = [g for g in recorded if g not in current], [g for g in current if g not in recorded]
    found = ([f"glosses {only_recorded}: {', '.join(map(repr, gone))}"] if gone else []) + \
        ([f"glosses {only_current}: {', '.join(map(repr, new))}"] if new else [])
    if not found:
        moved = next(i for i, (a, b) in enumerate(zip(recorded, current)) if a != b)
        found = [f"the same glosses in another order: id {moved} was {recorded[moved]!r}, now {current[moved]!r}"]
    return found


def check_same_vocabulary(checkpoint: str, recorded: Optional[Sequence[str]], current: Sequence[str]) -> None:
    """A resume on gloss-labelled clips must read the vocabulary its checkpoint was trained with, in its order: the
    model's outputs are those glosses' (accept_changed_data does not change that).

    Raises:
        ConfigError: another vocabulary, naming the glosses gone, the glosses new, or the first id whose gloss moved.
    """
    found = vocabulary_changes(recorded, current) if recorded else []
    if found:
        raise ConfigError(f"checkpoint '{checkpoint}' was trained with a gloss vocabulary of {len(recorded)} entries "
                          f"and this resume's training split gives {len(current)}: " + "; ".join(found) + ". The "
                          "model's outputs are the checkpoint's glosses: resume on the labels it was trained on, or "
                          f"start a new run from its weights (pretrained: {checkpoint}, pretrained_strict: false for a "
                          "new classifier)")


def check_same_data(checkpoint: str, recorded: Optional[dict], current: dict, accept_changed: bool) -> List[str]:
    """The differences between a checkpoint's data (`recorded`, {"train": identity, "val": identity}) and this run's
    (`current`), as lines; a ConfigError naming them unless `accept_changed` (config key accept_changed_data).
    A checkpoint written before identities were recorded has none to compare: nothing is said."""
    if not recorded:
        return []
    found = [f"{'training' if split == 'train' else 'validation'} data: {change}"
             for split in ("train", "val") if recorded.get(split) is not None or current.get(split) is not None
             for change in (changes(recorded[split], current[split]) if recorded.get(split) and current.get(split)
                            else [f"{'none' if not recorded.get(split) else 'some'} before, "
                                  f"{'none' if not current.get(split) else 'some'} now"])]
    if found and not accept_changed:
        raise ConfigError(
            f"checkpoint '{checkpoint}' was trained on other data than this resume reads: " + "; ".join(found)
            + ". A resume goes on with the epoch's order and the validation split of the data it was trained on; "
              f"restore that data, or start a new run from its weights (pretrained: {checkpoint}), or set config key "
              "accept_changed_data: true to resume on the changed data (the epoch's order and the val_fraction split "
              "then differ from the interrupted run's)")
    return found


def held_out_by_name(names: Sequence[str], fraction: float, seed: int) -> Tuple[List[int], List[int]]:
    """(train, val) positions of files named `names` (relative paths): a file is held out when the hash of its name
    and `seed`, read as a number in [0, 1), is below `fraction`, whatever else the folder holds; files added later
    keep every earlier file where it was. The share held out is `fraction` on average, at least one file."""
    draws = [int.from_bytes(hashlib.blake2b(f"{seed}\0{name}".encode("utf-8", "surrogateescape"),
                                            digest_size=8).digest(), "big") / 2.0 ** 64 for name in names]
    val = [index for index, draw in enumerate(draws) if draw < fraction]
    if not val and names:  # a tiny set whose draws all missed: the file nearest below the cut
        val = [min(range(len(draws)), key=draws.__getitem__)]
    if len(val) >= len(names):
        raise ConfigError(f"config key 'val_fraction': {fraction} of {len(names)} training file(s) leaves none to "
                          "train on; use a smaller val_fraction (in [0, 1)), more data, or pass val_data")
    held = set(val)
    return [index for index in range(len(names)) if index not in held], val
