"""Label files as people download them: a CSV or JSON Lines file listing image files and their labels (Kaggle's
labels.csv / train.csv, Hugging Face's metadata.csv / metadata.jsonl), read into image paths and targets. Columns are
found by their usual names, files named without extension are found by theirs, labels are class names (sorted into
classes) or integer class ids, one per row or several (multi-label). Every bad row is named by its line."""
from __future__ import annotations

import csv
import json
import os
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch

from ..errors import ConfigError
from .class_folders import IMAGE_EXTENSIONS, listed

# What a label file is, by its extension.
LABEL_FILE_EXTENSIONS = (".csv", ".tsv", ".jsonl")
# Column names that hold the image files, and the labels, in the data sets people download (matched ignoring case).
IMAGE_COLUMNS = ("file_name", "filename", "file", "image", "image_id", "image_name", "img", "path", "filepath",
                 "file_path", "image_path", "fname", "id")
LABEL_COLUMNS = ("label", "labels", "class", "classes", "class_name", "category", "category_id", "target", "breed",
                 "species", "tags", "attribute_ids")
# Where a multi-label CSV cell separates its labels: spaces ("cat dog"), '|', ';' or ','.
DEFAULT_SEPARATOR = r"[\s|;,]+"


@dataclass
class LabelTable:
    """A label file's rows as read: the columns in order, and each row with the line it ends on."""

    path: str
    columns: List[str]
    rows: List[Tuple[int, dict]]

    def where(self, line: int) -> str:
        return f"{self.kind} '{self.path}' line {line}"

    @property
    def kind(self) -> str:
        return "JSONL" if self.path.lower().endswith(".jsonl") else "CSV"


def read_table(path: str, delimiter: Optional[str] = None) -> LabelTable:
    """The rows of a CSV (.tsv: tab-separated; `delimiter` another, PHOENIX's '|') or JSON Lines file (one JSON
    object per line).

    Raises:
        ConfigError: a missing file, a JSONL line that is not a JSON object, a file without rows.
    """
    if not os.path.isfile(path):
        raise ConfigError(f"label file '{path}' does not exist")
    rows: List[Tuple[int, dict]] = []
    if path.lower().endswith(".jsonl"):
        columns: Dict[str, None] = {}
        with open(path, encoding="utf-8") as handle:
            for line, text in enumerate(handle, start=1):
                if not text.strip():
                    continue
                try:
                    row = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"JSONL '{path}' line {line} is not JSON ({exc.msg}); expected one object per "
                                      'line, e.g. {"file_name": "a.jpg", "label": "cat"}') from None
                if not isinstance(row, dict):
                    raise ConfigError(f"JSONL '{path}' line {line} is a {type(row).__name__}; expected an object, "
                                      'e.g. {"file_name": "a.jpg", "label": "cat"}')
                columns.update(dict.fromkeys(row))
                rows.append((line, row))
        table = LabelTable(path, list(columns), rows)
    else:
        with open(path, newline="", encoding="utf-8-sig") as handle:  # -sig: Excel's byte-order mark
            reader = csv.DictReader(handle, delimiter=delimiter or ("\t" if path.lower().endswith(".tsv") else ","))
            for row in reader:
                rows.append((reader.line_num, row))  # the file's line of the row's end (the header is line 1)
            table = LabelTable(path, list(reader.fieldnames or []), rows)
    if not table.rows:
        raise ConfigError(f"label file '{path}' has no rows{' below its header' if table.columns else ''}; expected "
                          "one row per image: its file and its label")
    return table


def pick_column(table: LabelTable, given: Optional[str], usual: Sequence[str], what: str, key: str,
                exclude: Sequence[str] = ()) -> str:
    """The column holding `what`: `given` (config key data_kwargs `key`) where named, else the one column of the usual
    names; with two columns, the one that is not `exclude`. ConfigError listing the columns otherwise."""
    if given is not None:
        if given not in table.columns:
            raise ConfigError(f"{table.kind} '{table.path}' has no column '{given}' ({key}); its columns: "
                              f"{', '.join(table.columns)}")
        return given
    candidates = [c for c in table.columns if c.lower() in usual and c not in exclude]
    if not candidates and len(table.columns) == 2 and exclude:
        candidates = [c for c in table.columns if c not in exclude]
    if len(candidates) == 1:
        return candidates[0]
    found = (f"several could be: {', '.join(candidates)}" if candidates
             else f"none has a usual name ({', '.join(usual)})")
    raise ConfigError(f"{table.kind} '{table.path}' has columns {', '.join(table.columns)}: which holds the {what}? "
                      f"{found[0].upper() + found[1:]}; name it with data_kwargs {key} (read_label_file's {key}=)")


def cell(table: LabelTable, line: int, row: dict, column: str):
    """Row `row`'s value of `column`; ConfigError where the row lacks it."""
    value = row.get(column)
    if value is None:
        if table.kind == "CSV":
            raise ConfigError(f"{table.where(line)} has {sum(v is not None for v in row.values())} of the header's "
                              f"{len(table.columns)} columns; every row needs '{column}'")
        raise ConfigError(f"{table.where(line)} has no '{column}' (its keys: {', '.join(row)})")
    return value


def resolve_files(table: LabelTable, column: str, roots: Sequence[str], check: bool) -> List[str]:
    """Each row's image file: its name joined to the first of `roots` where it exists; a name without an image
    extension (Kaggle's ids) also as name + each of IMAGE_EXTENSIONS. `check`: a missing file, a name that fits two
    files, or a file listed twice is a ConfigError naming the line; else a missing file is passed on (unreadable
    files skipped)."""
    files, first_line = [], {}
    for line, row in table.rows:
        name = cell(table, line, row, column)
        name = str(name).strip()
        if not name:
            raise ConfigError(f"{table.where(line)}: column '{column}' is empty; expected an image file (relative to "
                              f"'{roots[0]}')")
        path = _find_image(table, line, name, roots) if check else os.path.join(roots[0], name)
        key = os.path.normcase(os.path.abspath(path))
        if key in first_line:
            raise ConfigError(f"{table.where(line)} lists image '{name}' again (first on line {first_line[key]}); "
                              "each image must appear once, with all its labels on one row")
        first_line[key] = line
        files.append(path)
    return files


def _find_image(table: LabelTable, line: int, name: str, roots: Sequence[str]) -> str:
    bare = os.path.splitext(name)[1].lower() not in IMAGE_EXTENSIONS
    looked = []
    for root in roots:
        path = os.path.join(root, name)
        if os.path.isfile(path):
            return path
        looked.append(path)
        if bare:
            found = [path + extension for extension in IMAGE_EXTENSIONS if os.path.isfile(path + extension)]
            if len(found) > 1:
                raise ConfigError(f"{table.where(line)}: image '{name}' could be any of "
                                  f"{', '.join(os.path.basename(f) for f in found)}; name the file with its extension")
            if found:
                return found[0]
    tried = f" (also with {', '.join(IMAGE_EXTENSIONS)})" if bare else ""
    raise ConfigError(f"{table.where(line)}: image '{name}' does not exist (looked for "
                      f"{' and '.join(repr(p) for p in looked)}{tried})")


def is_id(value) -> bool:
    """A label written as an integer class id (an int, or its digits)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value) is not None)


def encode_single(labels: Sequence, wheres: Sequence[str], column: str, origin: str,
                  classes: Optional[Sequence[str]]) -> Tuple[torch.Tensor, Optional[List[str]]]:
    """One label per sample as int64 class indices, and the class names: `classes` where given (labels are names of
    it or indices into it), else sorted(set(labels)) for names, None for integer ids (their count is the largest + 1).

    Raises:
        ConfigError: an empty label, names mixed with ids, a negative id, a label `classes` lacks; naming where.
    """
    values = []
    for where, label in zip(wheres, labels):
        if isinstance(label, float) and label.is_integer():
            label = int(label)
        if not isinstance(label, (str, int)) or isinstance(label, bool):
            raise ConfigError(f"{where}: '{column}' is {label!r}; expected a class name or an integer class id")
        label = label.strip() if isinstance(label, str) else label
        if label == "":
            raise ConfigError(f"{where}: '{column}' is empty; every image needs its class (a name or an integer id)")
        values.append(label)
    if classes is not None:
        index = {name: i for i, name in enumerate(classes)}
        targets = []
        for where, label in zip(wheres, values):
            if str(label) in index:
                targets.append(index[str(label)])
            elif is_id(label) and 0 <= int(label) < len(classes):
                targets.append(int(label))
            else:
                raise ConfigError(f"{where}: '{column}' is {label!r}, not a class; expected one of "
                                  f"{listed(list(classes), 10)} or an index 0 to {len(classes) - 1}")
        return torch.tensor(targets, dtype=torch.int64), list(classes)
    names = [v for v in values if not is_id(v)]
    ids = [int(v) for v in values if is_id(v)]
    if names and ids:
        first_name = next(w for w, v in zip(wheres, values) if not is_id(v))
        first_id = next(w for w, v in zip(wheres, values) if is_id(v))
        raise ConfigError(f"{origin}: '{column}' mixes class names ({names[0]!r}, {_at(first_name, origin)}) and "
                          f"integer class ids ({ids[0]}, {_at(first_id, origin)}); use one or the other, or give "
                          "classes=[names] so that ids index them")
    if ids:
        negative = next(((where, int(v)) for where, v in zip(wheres, values) if int(v) < 0), None)
        if negative is not None:
            raise ConfigError(f"{negative[0]}: '{column}' is class id {negative[1]}; ids are 0, 1, ...")
        return torch.tensor(ids, dtype=torch.int64), None
    classes = sorted(set(names))
    index = {name: i for i, name in enumerate(classes)}
    return torch.tensor([index[v] for v in names], dtype=torch.int64), classes


def _at(where: str, origin: str) -> str:
    """'line 3' of "CSV 'x.csv' line 3" where `origin` is "CSV 'x.csv'"; the whole of `where` otherwise."""
    return where[len(origin):].strip() if where.startswith(origin) else where


def encode_multi(rows: Sequence[Tuple[str, List[str]]], column: str, origin: str,
                 classes: Optional[Sequence[str]]) -> Tuple[torch.Tensor, Optional[List[str]]]:
    """Several labels per sample (`rows`: where, its labels) as float32 N x classes of 0 and 1, and the class names:
    `classes` where given (labels are names of it or indices into it), else the names found, sorted; for integer ids
    none, and as many classes as the largest id + 1."""
    tokens = [token for _, row in rows for token in row]
    if classes is None:
        names = sorted({t for t in tokens if not is_id(t)})
        ids = [int(t) for t in tokens if is_id(t)]
        if names and ids:
            raise ConfigError(f"{origin} column '{column}' mixes class names ({names[0]!r}) and integer class ids "
                              f"('{ids[0]}'); use one or the other, or pass classes=[names] so ids index them")
        if ids and min(ids) < 0:
            raise ConfigError(f"{origin} column '{column}' has class id {min(ids)}; ids are 0, 1, ...")
        count = len(names) if names else (max(ids) + 1 if ids else 0)
        if count == 0:
            raise ConfigError(f"{origin} column '{column}' has no labels at all; a multi-label file needs class "
                              "names or ids (separated by spaces, '|', ';' or ',' in a CSV cell; a list in JSONL), or "
                              "pass classes=[names]")
        classes_out = names or None
    else:
        count, classes_out = len(classes), list(classes)
    index = {name: i for i, name in enumerate(classes_out or [])}
    targets = torch.zeros(len(rows), count, dtype=torch.float32)
    for row_index, (where, row) in enumerate(rows):
        for token in row:
            if token in index:
                targets[row_index, index[token]] = 1.0
            elif is_id(token) and 0 <= int(token) < count:
                targets[row_index, int(token)] = 1.0
            else:
                valid = (f"one of {', '.join(classes_out)} or an index 0 to {count - 1}" if classes_out else
                         f"an index 0 to {count - 1}")
                raise ConfigError(f"{where}: column '{column}' has label {token!r}, not a class; expected {valid}")
    return targets, classes_out


def split_labels(value, separator: str) -> List[str]:
    """A multi-label cell's labels: a JSON list's items, or a string split at `separator` (a regular expression)."""
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if str(v).strip()]
    return [token for token in re.split(separator, str(value).strip()) if token]


def columns_as_flags(table: LabelTable, columns: Sequence[str]) -> torch.Tensor:
    """One 0/1 column per class (multi-label) as float32 N x classes."""
    flags = []
    for line, row in table.rows:
        values = []
        for column in columns:
            value = str(cell(table, line, row, column)).strip()
            if value not in ("0", "1"):
                raise ConfigError(f"{table.where(line)}: column '{column}' is {value!r}; expected 0 or 1 (whether "
                                  f"the image has class '{column}')")
            values.append(float(value))
        flags.append(values)
    return torch.tensor(flags, dtype=torch.float32).reshape(len(flags), len(columns))


def labels_of(table: LabelTable, label_column: Union[str, Sequence[str]], multi_label: Optional[bool],
              classes: Optional[Sequence[str]], separator: str) -> Tuple[torch.Tensor, Optional[List[str]]]:
    """The rows' targets and class names (encode_single, encode_multi or columns_as_flags). `multi_label` None: several
    labels per row where a JSONL row's label is a list."""
    if not isinstance(label_column, str):
        return columns_as_flags(table, label_column), list(label_column)
    values = [cell(table, line, row, label_column) for line, row in table.rows]
    wheres = [table.where(line) for line, _ in table.rows]
    asked = multi_label
    if multi_label is None:
        multi_label = any(isinstance(v, list) for v in values)
    origin = f"{table.kind} '{table.path}'"
    if multi_label:
        return encode_multi([(w, split_labels(v, separator)) for w, v in zip(wheres, values)], label_column, origin,
                            classes)
    listed_row = next((w for w, v in zip(wheres, values) if isinstance(v, list)), None)
    if listed_row is not None:
        raise ConfigError(f"{listed_row}: '{label_column}' is a list; for several labels per image pass "
                          "multi_label=True (data_kwargs multi_label: true; loss bce_with_logits implies it)")
    if asked is None:  # 'cat|dog' or '1 2' read as one class named so would be a silently wrong class list
        joined = next(((w, v) for w, v in zip(wheres, values) if isinstance(v, str) and _looks_multi(v)), None)
        if joined is not None:
            raise ConfigError(f"{joined[0]}: '{label_column}' is {joined[1]!r}, which looks like several labels: "
                              "for multi-label data set loss bce_with_logits (or data_kwargs multi_label: true; "
                              "read_label_file's multi_label=True), or give one 0/1 column per class "
                              "(label_column=[columns]); for a class named so set multi_label: false")
    return encode_single(values, wheres, label_column, origin, classes)


def _looks_multi(label: str) -> bool:
    """A single label that reads as several: names joined by '|' or ';', or integer ids separated by spaces."""
    tokens = label.split()
    return re.search(r"[|;]", label) is not None or (len(tokens) > 1 and all(is_id(t) for t in tokens))


# Label files a data folder holds at its top, by the layouts they come in: Hugging Face's image folder convention
# (metadata beside the images), Kaggle's competitions (a label file beside train/).
HF_METADATA = ("metadata.csv", "metadata.jsonl")
KAGGLE_LABEL_FILES = ("labels.csv", "train.csv", "train_labels.csv", "trainlabels.csv")


def metadata_file(folder: str) -> Optional[str]:
    """Hugging Face's metadata.csv or metadata.jsonl in `folder`; ConfigError where it holds both."""
    found = [os.path.join(folder, name) for name in HF_METADATA if os.path.isfile(os.path.join(folder, name))]
    if len(found) > 1:
        raise ConfigError(f"data folder '{folder}' holds both {' and '.join(HF_METADATA)}; keep one (Hugging Face's "
                          "image folder reads one metadata file per folder)")
    return found[0] if found else None


def kaggle_label_file(folder: str) -> Optional[str]:
    """The label file of a Kaggle layout in `folder` (labels.csv or train.csv beside a train/ folder of images), else
    None; ConfigError where it holds several."""
    if not os.path.isdir(os.path.join(folder, "train")):
        return None
    names = {entry.lower(): entry for entry in os.listdir(folder) if os.path.isfile(os.path.join(folder, entry))}
    found = [os.path.join(folder, names[name]) for name in KAGGLE_LABEL_FILES if name in names]
    if len(found) > 1:
        raise ConfigError(f"data folder '{folder}' holds several label files beside train/ "
                          f"({', '.join(map(os.path.basename, found))}): name the one to train on, "
                          "data: FOLDER/FILE.csv")
    return found[0] if found else None


def kaggle_roots(label_file: str) -> Optional[List[str]]:
    """Where a Kaggle label file's images are looked for: beside it, then in train/ beside it (its ids name the
    files there); None for a file of another name or without train/ beside it (its own folder only)."""
    folder = os.path.dirname(os.path.abspath(label_file))
    if os.path.basename(label_file).lower() in KAGGLE_LABEL_FILES and os.path.isdir(os.path.join(folder, "train")):
        return [folder, os.path.join(folder, "train")]
    return None
