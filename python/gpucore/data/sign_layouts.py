"""The sign-language layouts people download, recognised from a ROOT folder, as clips labelled by gloss sequences:

- CE-CSL: label/{train,dev,test}.csv (columns Number, Translator, Chinese Sentences, Gloss; glosses separated by '/')
  and each row's clip under video/{split}/, found by its Number (in per-translator subfolders as the set ships, or
  flat; a video file, a frame folder named by the Number, or a keypoint .npy);
- PHOENIX-2014: annotations/manual/{train,dev,test}.corpus.csv (id|folder|signer|annotation, glosses separated by
  spaces) and the frame folders it names under features/fullFrame-210x260px/{split}/;
- a generic one: labels.csv (columns file and text, glosses separated by spaces) at the top (one split: train), or in
  train/, dev/ (or val/, validation/) and test/ subfolders; its files video files, frame folders or keypoint .npy files.

The gloss vocabulary is built from the training split: entry 0 "<blank>" (the CTC blank), then the training glosses
sorted, then "<unk>", which no training clip has: a dev or test gloss that training never saw is encoded as "<unk>"
(counted and named in a warning), which decoding never emits (config key vocabulary records it), so WER counts it as
an error.
"""
from __future__ import annotations

import collections
import os
import warnings
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import ConfigError
from ..tasks.sequences import BLANK, UNKNOWN
from . import label_files
from .class_folders import IMAGE_EXTENSIONS, is_system_file
from .video import VIDEO_EXTENSIONS

SPLITS = ("train", "dev", "test")
KEYPOINT_EXTENSION = ".npy"
CECSL_COLUMNS = ("Number", "Translator", "Chinese Sentences", "Gloss")
PHOENIX_COLUMNS = ("id", "folder", "signer", "annotation")
GENERIC_COLUMNS = ("file", "text")
GENERIC_DEV_FOLDERS = ("dev", "val", "validation")


@dataclass(frozen=True)
class GlossClip:
    """One labelled clip: the clip (a video file, a frame folder or a keypoint .npy) and its glosses."""

    path: str
    glosses: Tuple[str, ...]
    where: str  # the row that labels it, for messages: "CSV 'label/train.csv' line 5"


@dataclass
class SignLayout:
    """A layout's splits as read: each split's labelled clips, and what was left out (on_error skip)."""

    name: str  # "CE-CSL", "PHOENIX-2014" or "labels.csv"
    root: str
    kind: str  # every clip's kind: "video", "frames" or "keypoints"
    splits: Dict[str, List[GlossClip]]  # "train", and "dev", "test" where the layout has them
    skipped: List[str] = field(default_factory=list)  # "where: why" of each row left out
    unlabelled: List[str] = field(default_factory=list)  # clips that no row labels, never read


def find_sign_layout(root: str) -> Optional[str]:
    """Which sign-language layout folder `root` holds ("CE-CSL", "PHOENIX-2014", "labels.csv"), or None."""
    if os.path.isfile(os.path.join(root, "label", "train.csv")) and os.path.isdir(os.path.join(root, "video")):
        return "CE-CSL"
    if os.path.isfile(os.path.join(root, "annotations", "manual", "train.corpus.csv")):
        return "PHOENIX-2014"
    for folder in (root, os.path.join(root, "train")):
        path = os.path.join(folder, "labels.csv")
        if os.path.isfile(path) and set(GENERIC_COLUMNS) <= set(_header(path)):
            return "labels.csv"
    return None


def sign_layout_splits(root: str) -> List[str]:
    """The splits (of SPLITS) a sign-language layout folder has labels for, read from its file names alone."""
    name = find_sign_layout(root)
    if name == "CE-CSL":
        return [s for s in SPLITS if os.path.isfile(os.path.join(root, "label", f"{s}.csv"))]
    if name == "PHOENIX-2014":
        return [s for s in SPLITS if os.path.isfile(os.path.join(root, "annotations", "manual", f"{s}.corpus.csv"))]
    if name is None or os.path.isfile(os.path.join(root, "labels.csv")):
        return ["train"] if name else []
    dev = any(os.path.isfile(os.path.join(root, d, "labels.csv")) for d in GENERIC_DEV_FOLDERS)
    return ["train"] + (["dev"] if dev else []) + (["test"] if os.path.isfile(os.path.join(root, "test", "labels.csv"))
                                                   else [])


def _header(path: str) -> List[str]:
    with open(path, newline="", encoding="utf-8-sig") as handle:
        return [name.strip() for name in handle.readline().rstrip("\r\n").split(",")]


def read_sign_layout(root: str, on_error: str = "raise") -> SignLayout:
    """The labelled clips of a sign-language layout folder, split as the layout splits them.

    Args:
        root: the folder (CE-CSL's, PHOENIX-2014's phoenix-2014-multisigner/, or one with labels.csv).
        on_error: "raise": a row without its clip or without glosses is a ConfigError naming it; "skip": such rows
            are left out, named in `skipped` and counted in a warning.

    Returns:
        SignLayout.

    Raises:
        ConfigError: no layout recognised, a label file without its columns, clips of mixed kinds, a bad row
            (on_error raise), no training clip left.
    """
    if on_error not in ("raise", "skip"):
        raise ConfigError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    root = os.path.expanduser(root)
    name = find_sign_layout(root)
    if name is None:
        raise ConfigError(f"'{root}' holds no sign-language layout: CE-CSL's label/train.csv and video/, "
                          "PHOENIX-2014's annotations/manual/train.corpus.csv, or a labels.csv with columns file,text")
    reader = {"CE-CSL": _cecsl, "PHOENIX-2014": _phoenix, "labels.csv": _generic}[name]
    layout = SignLayout(name, root, "", {})
    rows = reader(root, layout)  # split -> [(where, clip path or None, why missing, gloss text, separator)]
    kinds: Dict[str, str] = {}
    for split, entries in rows.items():
        clips = []
        for where, path, missing, text, separator in entries:
            glosses = tuple(g.strip() for g in text.split(separator) if g.strip()) if text else ()
            problem = missing if path is None else "" if glosses else "an empty gloss string"
            if problem:
                if on_error == "raise":
                    raise ConfigError(f"{where}: {problem} (data_kwargs on_error: skip leaves such rows out)")
                layout.skipped.append(f"{where}: {problem}")
                continue
            reserved = [g for g in glosses if g in (BLANK, UNKNOWN)]
            if reserved:
                raise ConfigError(f"{where}: gloss '{reserved[0]}' is a name gpucore's vocabulary reserves (the CTC "
                                  f"blank, glosses unseen in training)")
            kinds.setdefault(clip_kind(path), path)
            clips.append(GlossClip(path, glosses, where))
        layout.splits[split] = clips
    if len(kinds) > 1:
        raise ConfigError(f"sign-language folder '{root}' mixes clip kinds: " + ", ".join(
            f"{kind} ('{path}')" for kind, path in kinds.items()) + "; a data set's clips are all videos, all frame "
            "folders or all keypoint files")
    if not layout.splits.get("train"):
        raise ConfigError(f"sign-language folder '{root}' ({name}) has no training clip left"
                          + (f" ({len(layout.skipped)} rows left out, e.g. {layout.skipped[0]})" if layout.skipped
                             else ""))
    layout.kind = next(iter(kinds))
    if layout.skipped:
        warnings.warn(f"sign-language folder '{root}': {len(layout.skipped)} rows left out: "
                      + "; ".join(layout.skipped[:5]) + ("; ..." if len(layout.skipped) > 5 else ""), stacklevel=2)
    if layout.unlabelled:
        warnings.warn(f"sign-language folder '{root}': {len(layout.unlabelled)} clips without a row, not read: "
                      + ", ".join(f"'{p}'" for p in layout.unlabelled[:5])
                      + (", ..." if len(layout.unlabelled) > 5 else ""), stacklevel=2)
    return layout


def clip_kind(path: str) -> str:
    """video, frames (a folder) or keypoints (.npy), by the path."""
    if os.path.isdir(path):
        return "frames"
    return "keypoints" if path.lower().endswith(KEYPOINT_EXTENSION) else "video"


def _is_clip_file(name: str) -> bool:
    return name.lower().endswith(VIDEO_EXTENSIONS + (KEYPOINT_EXTENSION,)) and not is_system_file(name)


def _table(path: str, columns: Sequence[str], delimiter: Optional[str] = None) -> label_files.LabelTable:
    table = label_files.read_table(path, delimiter)
    table.columns = [c.strip() for c in table.columns]
    table.rows = [(line, {(k or "").strip(): v for k, v in row.items()}) for line, row in table.rows]
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ConfigError(f"{table.kind} '{path}' has columns {table.columns}; expected {', '.join(columns)} "
                          f"(missing: {', '.join(missing)})")
    return table


def _cecsl(root: str, layout: SignLayout):
    """CE-CSL's rows: each clip found by its Number under video/{split}/, in the Translator's subfolder or flat."""
    rows = {}
    for split in SPLITS:
        path = os.path.join(root, "label", f"{split}.csv")
        if not os.path.isfile(path):
            continue
        table = _table(path, CECSL_COLUMNS)
        clips_root = os.path.join(root, "video", split)
        found = _clips_by_name(clips_root)
        used = set()
        entries = []
        for line, row in table.rows:
            number, translator = (row.get("Number") or "").strip(), (row.get("Translator") or "").strip()
            candidates = found.get(number, [])
            if len(candidates) > 1:  # the same Number in two places: the Translator's subfolder says which
                candidates = [c for c in candidates if os.path.basename(os.path.dirname(c)) == translator]
            if len(candidates) > 1:
                raise ConfigError(f"{table.where(line)}: Number '{number}' names several clips under '{clips_root}': "
                                  + ", ".join(f"'{c}'" for c in candidates))
            clip = candidates[0] if candidates else None
            used.update(candidates)
            missing = "" if clip else (f"no clip named '{number}' under '{clips_root}' (a video file, frame folder or "
                                       ".npy, flat or in its Translator's subfolder)")
            entries.append((table.where(line), clip, missing, row.get("Gloss") or "", "/"))
        layout.unlabelled += sorted(p for paths in found.values() for p in paths
                                    if p not in used and not os.path.isdir(p))
        rows[split] = entries
    return rows


def _clips_by_name(folder: str) -> Dict[str, List[str]]:
    """Every clip under `folder` by its name without extension: video and .npy files, and frame folders (folders
    that hold images directly)."""
    found = collections.defaultdict(list)
    for directory, subfolders, files in os.walk(folder, followlinks=True):
        subfolders.sort()
        for name in sorted(files):
            if _is_clip_file(name):
                found[os.path.splitext(name)[0]].append(os.path.join(directory, name))
        if directory != folder and any(f.lower().endswith(IMAGE_EXTENSIONS) for f in files):
            found[os.path.basename(directory)].append(directory)
    return found


def _phoenix(root: str, layout: SignLayout):
    """PHOENIX-2014's rows: each the frame folder its `folder` column names (".../1/*.png": the folder "1"), under
    features/fullFrame-210x260px/{split}/ (or another features/fullFrame-* size)."""
    features = os.path.join(root, "features")
    sizes = sorted(os.listdir(features)) if os.path.isdir(features) else []
    frame_roots = sorted((name != "fullFrame-210x260px", name) for name in sizes if name.startswith("fullFrame"))
    rows = {}
    for split in SPLITS:
        path = os.path.join(root, "annotations", "manual", f"{split}.corpus.csv")
        if not os.path.isfile(path):
            continue
        table = _table(path, PHOENIX_COLUMNS, "|")
        split_roots = [os.path.join(features, name, split) for _, name in frame_roots]
        entries = []
        for line, row in table.rows:
            folder = (row.get("folder") or "").strip()
            relative = os.path.dirname(folder) if "*" in os.path.basename(folder) else folder
            clip = next((os.path.join(r, relative) for r in split_roots if os.path.isdir(os.path.join(r, relative))),
                        None) if relative else None
            missing = "" if clip else (f"no frame folder '{relative}' under " + (
                " or ".join(f"'{r}'" for r in split_roots) or f"'{features}/fullFrame-210x260px/{split}'"))
            entries.append((table.where(line), clip, missing, row.get("annotation") or "", " "))
        rows[split] = entries
    return rows


def _generic(root: str, layout: SignLayout):
    """labels.csv rows (file, text): at the top (train only), or in train/, dev/ (val/, validation/) and test/."""
    if os.path.isfile(os.path.join(root, "labels.csv")):
        places = {"train": root}
    else:
        places = {"train": os.path.join(root, "train")}
        dev = next((d for d in GENERIC_DEV_FOLDERS if os.path.isfile(os.path.join(root, d, "labels.csv"))), None)
        if dev:
            places["dev"] = os.path.join(root, dev)
        if os.path.isfile(os.path.join(root, "test", "labels.csv")):
            places["test"] = os.path.join(root, "test")
    rows = {}
    for split, folder in places.items():
        table = _table(os.path.join(folder, "labels.csv"), GENERIC_COLUMNS)
        entries, used = [], set()
        for line, row in table.rows:
            name = (row.get("file") or "").strip()
            path = os.path.normpath(os.path.join(folder, name)) if name else None
            clip = path if path and os.path.exists(path) else None
            used.add(clip)
            missing = "" if clip else (f"clip '{name}' does not exist in '{folder}'" if name else "no file named")
            entries.append((table.where(line), clip, missing, row.get("text") or "", " "))
        layout.unlabelled += sorted(os.path.join(folder, n) for n in os.listdir(folder)
                                    if _is_clip_file(n) and os.path.join(folder, n) not in used)
        rows[split] = entries
    return rows


def gloss_vocabulary(train: Sequence[GlossClip]) -> List[str]:
    """The vocabulary of a training split: "<blank>", its glosses sorted, "<unk>" (ids 0, 1..V-1, V)."""
    return [BLANK, *sorted({g for clip in train for g in clip.glosses}), UNKNOWN]


def encode_glosses(clips: Sequence[GlossClip], vocabulary: Sequence[str], split: str) -> List[List[int]]:
    """Each clip's gloss ids by `vocabulary` (gloss_vocabulary's, or a trained model's). A gloss the vocabulary lacks
    is "<unk>"'s id, each such gloss counted and named in a warning (a training split's never: its glosses are the
    vocabulary)."""
    if not vocabulary or vocabulary[0] != BLANK:
        raise ConfigError(f"a gloss vocabulary's entry 0 is '{BLANK}' (the CTC blank), got {list(vocabulary[:3])}")
    index = {gloss: i for i, gloss in enumerate(vocabulary) if i > 0}
    unseen = collections.Counter(g for clip in clips for g in clip.glosses if g not in index)
    if unseen and UNKNOWN not in index:
        raise ConfigError(f"the {split} split has glosses the vocabulary lacks ({_counted(unseen)}), and the "
                          f"vocabulary has no '{UNKNOWN}' to encode them by")
    if unseen:
        warnings.warn(f"the {split} split has {sum(unseen.values())} glosses ({len(unseen)} distinct) that training "
                      f"never saw, encoded as '{UNKNOWN}' and scored as errors: {_counted(unseen)}", stacklevel=2)
    return [[index.get(g, index.get(UNKNOWN)) for g in clip.glosses] for clip in clips]


def _counted(counter: collections.Counter) -> str:
    shown = ", ".join(f"'{g}' x{n}" for g, n in counter.most_common(10))
    return shown + (f", ... ({len(counter) - 10} more)" if len(counter) > 10 else "")
