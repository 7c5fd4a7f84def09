"""A folder of class subfolders read as torchvision's ImageFolder reads it: the sorted subfolder names are the
classes, every file under a class folder (nested subfolders included, symlinks followed) in ImageFolder's order, an
empty class folder refused. A validation or test folder is labelled by the training set's class names
(`class_to_idx`), never by its own positions. What is not read is said: hidden system files (macOS `._*`,
`.DS_Store`, `Thumbs.db`) are counted, images of formats gpucore does not decode are named."""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from ..errors import ConfigError
from . import pillow_formats

# What gpucore's readers decode: PNG and JPEG in C++ (csrc/data/decode_png.cpp, decode_jpeg.cpp), the rest through
# Pillow (pillow_formats.py) where it and the format's plugin are installed.
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg") + tuple(pillow_formats.EXTENSIONS)
# The formats of IMAGE_EXTENSIONS, for messages.
READ_FORMATS = "PNG, JPEG, WebP, BMP, GIF, TIFF, PPM/PGM/PBM, HEIC/HEIF, AVIF"
# Image formats Pillow would open and gpucore does not decode: named, never dropped without a word.
UNREAD_IMAGE_EXTENSIONS = (".jp2", ".jxl")
# Files operating systems and file managers leave beside photos (macOS resource forks and folder settings, Windows
# thumbnails): never images, ignored with a count.
SYSTEM_FILES = (".ds_store", "thumbs.db", "desktop.ini", "ehthumbs.db")
# Folders of the same kind: never classes.
SYSTEM_FOLDERS = ("__macosx", ".ipynb_checkpoints")
# How many names a message lists before the count of the rest.
LISTED = 5


def is_system_file(name: str) -> bool:
    """A file an operating system or editor left, not an image: hidden files (macOS `._photo.jpg` included) and the
    names in SYSTEM_FILES."""
    return name.startswith(".") or name.lower() in SYSTEM_FILES


def is_system_folder(name: str) -> bool:
    return name.startswith(".") or name.lower() in SYSTEM_FOLDERS


def listed(names: Sequence[str], most: int = LISTED) -> str:
    """The first `most` names and the count of the rest."""
    names = list(names)
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


@dataclass
class ClassFolder:
    """What one folder of class subfolders holds, as read."""

    root: str
    classes: List[str]  # the class names in label order
    paths: List[str] = field(default_factory=list)  # the image files gpucore reads, in ImageFolder's order
    labels: List[int] = field(default_factory=list)  # each file's index in `classes`
    unread: List[str] = field(default_factory=list)  # "path: why" of image files gpucore does not decode
    system_files: int = 0  # hidden and system files ignored
    other_files: List[str] = field(default_factory=list)  # files that are not images at all (notes.txt), ignored
    absent: List[str] = field(default_factory=list)  # classes of `classes` this folder has no subfolder for

    @property
    def class_to_idx(self) -> Dict[str, int]:
        return {name: index for index, name in enumerate(self.classes)}

    def add(self, path: str, label: int) -> None:
        """File `path` of class `label`: read if gpucore decodes it, else counted or named by what it is."""
        name = os.path.basename(path)
        extension = os.path.splitext(name)[1].lower()
        if is_system_file(name):
            self.system_files += 1
        elif extension in pillow_formats.EXTENSIONS and pillow_formats.missing_reader(extension):
            self.unread.append(f"{path}: {pillow_formats.missing_reader(extension)}")
        elif extension in IMAGE_EXTENSIONS:
            self.paths.append(path)
            self.labels.append(label)
        elif extension in UNREAD_IMAGE_EXTENSIONS:
            self.unread.append(f"{path}: {extension} images are not decoded by gpucore ({READ_FORMATS} are)")
        else:
            self.other_files.append(path)

    def say_what_was_left_out(self, where_listed: str) -> None:
        """One warning naming what was not read and why (nothing when everything was); `where_listed` says where the
        reader's output names the image files left out (a training run's files; nothing but this warning for
        predict and gradcam, whose outputs have no such list)."""
        parts = []
        if self.unread:
            by_format: Dict[str, int] = {}
            for entry in self.unread:
                extension = os.path.splitext(entry.split(": ")[0])[1].lower()
                by_format[extension] = by_format.get(extension, 0) + 1
            formats = ", ".join(f"{count} {extension}" for extension, count in sorted(by_format.items()))
            names = listed([os.path.relpath(e.split(": ")[0], self.root) for e in self.unread])
            reasons = sorted({entry.split(": ", 1)[1] for entry in self.unread})
            parts.append(f"{len(self.unread)} image files in formats gpucore cannot decode here are left out "
                         f"({formats}: {names}): {'; '.join(reasons)}. Install what is named, or convert them to "
                         f"PNG or JPEG, to read them ({where_listed})")
        if self.system_files:
            parts.append(f"{self.system_files} hidden or system files (._*, .DS_Store, Thumbs.db) are ignored")
        if self.other_files:
            parts.append(f"{len(self.other_files)} files that are not images are ignored "
                         f"({listed([os.path.relpath(p, self.root) for p in self.other_files])})")
        if parts:
            warnings.warn(f"image folder '{self.root}': " + "; ".join(parts), stacklevel=4)


def _class_subfolders(root: str) -> List[str]:
    """The class subfolder names of `root`, sorted as ImageFolder sorts them (hidden and system folders left out)."""
    return sorted(entry.name for entry in os.scandir(root)
                  if entry.is_dir() and not is_system_folder(entry.name))


def _walk(top: str) -> List[tuple]:
    """(folder, files) of the tree under `top` in ImageFolder's order (its folders sorted, links followed), without
    system folders; a link back into the tree is walked once."""
    walked, seen = [], set()
    for directory, subfolders, files in os.walk(top, followlinks=True):
        seen.add(os.path.realpath(directory))
        subfolders[:] = [s for s in subfolders if not is_system_folder(s)
                         and os.path.realpath(os.path.join(directory, s)) not in seen]
        walked.append((directory, files))
    return sorted(walked)


def read_class_folder(root: str, classes: Optional[Sequence[str]] = None, allow_empty: bool = False,
                      classes_from: Optional[str] = None) -> ClassFolder:
    """The files of folder `root`, one subfolder per class.

    Args:
        root: the folder.
        classes: the class names to label by (a validation or test folder: the training set's classes, in their
            order); None: this folder's own sorted subfolder names.
        allow_empty: a class folder with no image files is a class all the same (ImageFolder's allow_empty);
            otherwise it is a ConfigError naming it.
        classes_from: where `classes` came from, for messages ("training folder 'data/train'", "the model").

    Returns:
        ClassFolder.

    Raises:
        ConfigError: a missing folder, no class subfolders, an empty class folder, a subfolder that is not one of
            `classes` (or differs from one only in case).
    """
    if not os.path.isdir(root):
        raise ConfigError(f"image folder '{root}' does not exist")
    own = _class_subfolders(root)
    if not own:
        raise ConfigError(f"image folder '{root}' has no class subfolders (one subfolder of images per class)")
    if classes is None:
        classes = own
    else:
        classes = list(classes)
        _check_same_classes(root, own, classes, classes_from)
    folder = ClassFolder(root=root, classes=list(classes), absent=[c for c in classes if c not in own])
    empty = []
    for name in own:
        label = folder.class_to_idx[name]
        before = len(folder.paths)
        for directory, files in _walk(os.path.join(root, name)):
            for file in sorted(files):
                folder.add(os.path.join(directory, file), label)
        if len(folder.paths) == before:
            empty.append(name)
    if empty and not allow_empty:
        raise ConfigError(f"image folder '{root}': class folder{'s' if len(empty) > 1 else ''} {listed(empty)} "
                          f"hold{'' if len(empty) > 1 else 's'} no images gpucore reads ({READ_FORMATS}; nested "
                          "folders included); a class without images would still get an output of the model. Add "
                          "images, remove the folder, or set data_kwargs allow_empty: true (torchvision ImageFolder's "
                          "allow_empty)")
    folder.say_what_was_left_out("a run lists them in training_stats.json's skipped_files and its report")
    return folder


def _check_same_classes(root: str, own: List[str], classes: List[str], classes_from: Optional[str]) -> None:
    """A folder labelled by another set's classes may lack some (a warning: their support is 0) but have none the
    other lacks: its images would be scored against an output that means something else."""
    where = classes_from or "the training set"
    unknown = [name for name in own if name not in classes]
    if unknown:
        by_case = {c.lower(): c for c in classes}
        case_only = [f"'{name}' (the training set has '{by_case[name.lower()]}')" for name in unknown
                     if name.lower() in by_case]
        detail = (f"; names must match exactly, and these differ only in case: {listed(case_only)}" if case_only
                  else "")
        raise ConfigError(f"image folder '{root}' has class folder{'s' if len(unknown) > 1 else ''} {listed(unknown)} "
                          f"that {where} does not have (its classes: {listed(classes, 10)}){detail}. Each image is "
                          "labelled by its folder's name as the training set numbers it: rename or remove the "
                          "folder, or train with it as a class")
    absent = [name for name in classes if name not in own]
    if absent:
        warnings.warn(f"image folder '{root}' has no folder for class{'es' if len(absent) > 1 else ''} "
                      f"{listed(absent)} of {where}: {'their' if len(absent) > 1 else 'its'} support is 0 there, "
                      "the other classes keep their labels", stacklevel=4)


def read_folder_tree(root: str) -> ClassFolder:
    """The image files of a folder to predict on: those at its top (label -1) and those under each subfolder, walked
    as read_class_folder walks a class (label: the subfolder's index in `classes`, its sorted subfolders)."""
    folder = ClassFolder(root=root, classes=_class_subfolders(root))
    for entry in sorted(os.listdir(root)):
        if os.path.isfile(os.path.join(root, entry)):
            folder.add(os.path.join(root, entry), -1)
    for label, name in enumerate(folder.classes):
        for directory, files in _walk(os.path.join(root, name)):
            for file in sorted(files):
                folder.add(os.path.join(directory, file), label)
    folder.say_what_was_left_out("they get no prediction and no Grad-CAM map; this warning is their only list")
    return folder
