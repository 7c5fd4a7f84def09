"""Predictions of a trained checkpoint on new inputs: `gpucore.predict(checkpoint, inputs)` and `gpucore predict`.

The inputs are read at the checkpoint's input shape (channels; image files resized to its height and width
like the training reader did) and standardised with its run's statistics (gpucore.load). One row per input:
classification: the top-k classes with softmax probabilities; multi-head (captcha) and CTC: the decoded
text; clips for a sign-language model (video files, frame folders, keypoint .npy files): each clip's glosses;
multi-label: the labels whose logit is positive, with sigmoid probabilities; segmentation: a mask PNG per image
(grey: 255 where a one-channel model predicts the foreground, else the class id).
"""
from __future__ import annotations

import csv
import dataclasses
import os
from typing import List, Optional, Sequence, Union

import torch

from ..data.class_folders import listed
from ..data.clip_sequences import ClipSequences
from ..data.epoch_data import validation_set
from ..data.sign_layouts import BLANK, GlossClip, clip_kind
from ..data.video import VIDEO_EXTENSIONS
from ..data.input_files import IN_MEMORY, read_input_images
from ..data.png import encode_png
from ..errors import ConfigError
from ..tasks import Classification
from ..tasks.sequences import is_gloss_vocabulary
from ..values import is_int
from ..data.image_files import ImageFiles
from ..data.labeled_data import LabeledData
from ..data.plan import describe_data
from ..data.torch_samples import dataset_samples, is_hf_dataset
from .evaluation_pass import cat_padded
from .load import LoadedModel, loaded_model
from .run_data import check_classes


class Predictions:
    """What `predict` returns.

    Args:
        names: image file paths relative to the input folder, or indices.
        outputs: raw model outputs.
        predicted_: the task's decoding (`.predicted`): classes, per-head classes, CTC sequences, label sets or masks.
        rows: one dict per input: the CSV's columns.
        labels: classification: true classes from class subfolders named like the checkpoint's classes (of every
            path given), or a torch Dataset's targets, else None.
        mask_files: segmentation: the masks written.
        notes: what the rows cannot show by themselves (a model with more outputs than class names), as sentences.
        skipped: on_error "skip": "path: why" of each image file left out, unreadable (no row).
    """

    def __init__(self, names: List[str], outputs: torch.Tensor, predicted_: torch.Tensor, rows: List[dict],
                 labels: Optional[torch.Tensor], mask_files: Optional[List[str]], notes: Optional[List[str]] = None,
                 skipped: Sequence[str] = ()):
        self.names, self.outputs, self.predicted, self.rows = names, outputs, predicted_, rows
        self.labels, self.mask_files, self.notes = labels, mask_files, list(notes or [])
        self.skipped = list(skipped)

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        accuracy = self.accuracy()
        return (f"Predictions({len(self)} inputs" + (f", accuracy {accuracy:.4f}" if accuracy is not None else "")
                + (f", {len(self.skipped)} files skipped" if self.skipped else "") + ")")

    def accuracy(self) -> Optional[float]:
        """Share of inputs whose predicted class is their folder's class.

        Returns:
            The accuracy, or None without labels.
        """
        if self.labels is None:
            return None
        return (self.predicted.cpu() == self.labels).float().mean().item()

    def write_csv(self, path: Union[str, os.PathLike]) -> str:
        """The rows as a CSV file, one row per input.

        Args:
            path: the file to write (its folder is made when missing).

        Returns:
            The path written.
        """
        path = os.fspath(path)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(self.rows[0]))
            writer.writeheader()
            writer.writerows(self.rows)
        return path


def predict(checkpoint: Union[str, os.PathLike, LoadedModel], inputs, *, top_k: int = 5, masks: Optional[str] = None,
            device: str = "auto", batch_size: Optional[int] = None, on_error: str = "raise") -> Predictions:
    """Predictions of a checkpoint on inputs, read at its input shape with its run's preprocessing.

    Args:
        checkpoint: a gpucore checkpoint path or a gpucore.load result (which keeps its own device).
        inputs: a path (a folder of PNG/JPEG images, class subfolders allowed; one image; a .npy/.npz array; an IDX
            image file) or a list of paths (one table across all, in order; each name under its path), a tensor of
            raw inputs (uint8 images as training read them), a list of images (PIL images, uint8 tensors C x H x W or
            H x W, uint8 arrays H x W x C) of any sizes, each read as the same pixels in a PNG file would be (resized
            to the model's size, or through its run's per-image transforms), results in the list's order; or a data
            set: a gpucore data set (its inputs as raw inputs), a torch Dataset or a Hugging Face dataset, its
            samples read as gpucore.train reads them (data_kwargs image_key and label_key; its images as a list of
            images; its classes, where it names them, must be the model's), its targets the labels. Float images
            must lie in [0, 1] (a ConfigError names the range found) unless the run trained on floats of another
            range. For a sign-language model (trained on gloss-labelled clips) each path is one clip: a video file or
            a frame folder (numbered images) for a model of frames, a T x F keypoint .npy file for a keypoint model;
            each row gives the clip's glosses.
        top_k: classes per input for classification.
        masks: segmentation: the folder for one mask PNG per image.
        device: auto, cpu, cuda, cuda:N or mps.
        batch_size: inputs per forward pass (default: the run's eval_batch_size).
        on_error: image files that cannot be read or decoded: "raise" (a ConfigError naming the file) or "skip" (left
            out, each with its reason in the result's `skipped`; the others predicted).

    Returns:
        Predictions: one row per input (the CSV's columns), the decoded predictions, the accuracy where the images sit
        in class subfolders.

    Raises:
        ConfigError: an input that cannot be read, or of the wrong channels or size (with the shape expected); float
            images outside [0, 1] (0..255 values as floats) for a model trained on uint8 images or [0, 1] floats; a
            checkpoint that is neither a path nor a gpucore.load result.
    """
    model = loaded_model(checkpoint, device, "gpucore.predict's checkpoint")
    if not is_int(top_k) or top_k < 1:
        raise ConfigError(f"top_k must be an integer >= 1, got {top_k!r}")
    paths = _paths(inputs)
    if paths and (_video_paths(paths) or is_gloss_vocabulary(model.classes)):
        return _predict_clips(model, paths, on_error, batch_size)
    raw, names, labels, skipped = _read(model, inputs, on_error)
    outputs = model(raw, batch_size).cpu()
    task = model.task.for_outputs(outputs)
    decoded = task.decode(outputs)
    labels = labels() if task.labels_from_folders else None
    rows = [{"input": name} for name in names]
    if labels is not None:
        for row, label in zip(rows, labels.tolist()):
            row["label"] = model.classes[label]
    mask_files = _write_masks(decoded, outputs.shape[1], names, masks, rows) if task.predicts_masks else None
    task.add_prediction_columns(rows, outputs, decoded, model.classes, top_k)
    notes = []
    if isinstance(task, Classification) and model.classes and outputs.dim() == 2 and outputs.shape[1] > len(model.classes):
        notes.append(f"the model has {outputs.shape[1]} outputs but its checkpoint names {len(model.classes)} "
                     f"classes; outputs {len(model.classes)} to {outputs.shape[1] - 1} are named output_INDEX")
    return Predictions(names, outputs, decoded, rows, labels, mask_files, notes, skipped)


def _paths(inputs) -> List[str]:
    """`inputs` as a list of paths where it is a path or a list of them, else []."""
    paths = [inputs] if isinstance(inputs, (str, os.PathLike)) else inputs if isinstance(inputs, (list, tuple)) else []
    return [os.fspath(p) for p in paths] if all(isinstance(p, (str, os.PathLike)) for p in paths) else []


def _video_paths(paths: List[str]) -> bool:
    """Whether every path is a video file's (clips, which only a sign-language model takes)."""
    return all(path.lower().endswith(VIDEO_EXTENSIONS) for path in paths)


def _predict_clips(model: LoadedModel, paths: List[str], on_error: str, batch_size: Optional[int]) -> Predictions:
    """Each clip's gloss sequence, in the order given: video files and frame folders (a folder of numbered images is
    one clip, as PHOENIX-2014 ships them) for a model trained on frames, T x F keypoint .npy files for a keypoint
    model. The clips are read as the checkpoint's run read its held-out split (its data_kwargs: size, channels,
    frame_stride, max_frames; no rescaling), standardised with its statistics, batched `batch_size` at a time
    (default: the run's eval_batch_size), and decoded as gpucore evaluate decodes them (greedy, or config key
    beam_width) at each clip's own output steps.

    Raises:
        ConfigError: a checkpoint not trained on gloss-labelled clips; a clip of another kind than the model takes, a
            keypoint file of another width than its inputs, or a clip that does not read (a folder without images,
            a file that does not decode; on_error raise), each naming the file.
    """
    if not is_gloss_vocabulary(model.classes):
        raise ConfigError(f"video clips ({', '.join(paths[:3])}) need a model trained on gloss-labelled clips (loss "
                          f"ctc on a sign-language folder: its vocabulary starts with '{BLANK}'); the model of "
                          f"'{model.checkpoint}' has classes {listed(list(model.classes or []), 5)}")
    keypoints = model.input_shape is not None and len(model.input_shape) == 1
    takes = (f"keypoint sequences ({model.input_shape[0]} features per frame: one T x F .npy file per clip)"
             if keypoints else "video frames (a video file, or a folder of numbered images, per clip)")
    by_kind = {}  # the clips of each kind: one data set of each
    for index, path in enumerate(paths):
        kind = clip_kind(path)
        if (kind == "keypoints") != keypoints:
            what = {"keypoints": "a keypoint file", "frames": "a frame folder", "video": "a video clip"}[kind]
            raise ConfigError(f"input '{path}' is {what}, but the model of '{model.checkpoint}' was trained on {takes}")
        by_kind.setdefault(kind, []).append((index, GlossClip(path, (), f"input '{path}'")))
    options = {k: v for k, v in (model.config.data_kwargs or {}).items() if k != "on_error"}
    options.update(rescale=0.0, keypoint_width=model.input_shape[0] if keypoints else None)
    config = model.config if batch_size is None else dataclasses.replace(model.config, eval_batch_size=batch_size)
    module = model.module.eval()
    found, skipped = {}, []
    for kind, entries in by_kind.items():
        data = ClipSequences([clip for _, clip in entries], model.classes, split="predict", on_error=on_error,
                             **options)
        task = model.task.for_data(data, module)
        batches = validation_set(data, config, model.device, model.normalization, transforms=model.plan.forms)
        decoded = []
        with torch.no_grad():  # no loss: the clips have no glosses to score against
            for x, y in batches.batches():
                outputs = module(x).float()
                decoded.append(task.for_outputs(outputs).decode(outputs, y).cpu())
        index_of = {id(clip): index for index, clip in entries}
        for clip, ids in zip(data.labels, cat_padded(decoded)):
            found[index_of[id(clip)]] = (clip.path, ids)
        skipped += data.skipped
    kept = [found[index] for index in sorted(found)]
    predicted = cat_padded([ids.unsqueeze(0) for _, ids in kept]) if kept else torch.zeros(0, 0, dtype=torch.long)
    rows = [{"input": path, "glosses": " ".join(model.classes[g] for g in ids.tolist() if g >= 0)}
            for path, ids in kept]
    return Predictions([row["input"] for row in rows], None, predicted, rows, None, None, skipped=skipped)


def _read(model: LoadedModel, inputs, on_error: str):
    """(raw inputs, names, the true classes (a function: of classification only, where the inputs give them), files
    skipped)."""
    if isinstance(inputs, torch.Tensor):
        _check_float_range(model, inputs, "inputs (a tensor)")
        return inputs, [str(i) for i in range(inputs.shape[0])], _none, ()
    if is_hf_dataset(inputs) or isinstance(inputs, torch.utils.data.Dataset):
        return _dataset(model, inputs)
    if not isinstance(inputs, (str, os.PathLike, list, tuple)):
        raise ConfigError(f"inputs must be a path or a list of paths, a tensor, a list of images ({IN_MEMORY}), a torch "
                          f"Dataset or a Hugging Face dataset, got {type(inputs).__name__}")
    if not model.is_image_model:
        raise ConfigError(f"the model of '{model.checkpoint}' takes inputs of shape {model.input_shape or 'unknown'}, "
                          "not images: pass them as a tensor")
    paths = [isinstance(entry, (str, os.PathLike)) for entry in inputs] if isinstance(inputs, (list, tuple)) else None
    if paths is None or (paths and all(paths)):
        return _read_paths(model, [inputs] if paths is None else list(inputs), on_error)
    if paths and paths[0]:
        raise ConfigError(f"inputs: a list of paths or a list of images, not both: element 0 is a path, element "
                          f"{paths.index(False)} is not")
    return model.read_images(inputs), [str(i) for i in range(len(inputs))], _none, ()  # as image files of them


def _read_paths(model: LoadedModel, paths: list, on_error: str):
    """Every path's inputs, in order (one path: names relative to its folder; several: each name under its path), and
    the true classes where every path's images sit in class subfolders."""
    channels, height, width = model.input_shape
    images, names, folders, skipped = [], [], [], []
    for path in paths:
        read = read_input_images(path, channels, (height, width) if height else None,
                                 max_resolution=model.max_resolution if model.reads_own_sizes else None,
                                 exif_orientation=model.exif_orientation, on_error=on_error)
        _check_float_range(model, read.images, f"inputs '{os.fspath(path)}'")
        own = read.files if read.files is not None else [str(i) for i in range(len(read.images))]
        names += own if len(paths) == 1 else [_under(os.fspath(path), name, read.files is None) for name in own]
        images.append(read.images)
        folders.append(read.folders)
        skipped += read.skipped
    if len(images) == 1:
        raw = images[0]
    elif any(isinstance(part, list) for part in images):  # images at their own sizes: one list
        raw = [image for part in images for image in part]
    else:
        shapes = sorted({tuple(part.shape[1:]) for part in images})
        if len(shapes) > 1:
            raise ConfigError(f"inputs {', '.join(map(os.fspath, paths))} hold inputs of shapes {shapes}: give inputs "
                              "of one shape (arrays with the model's channels and size)")
        raw = torch.cat(images)

    def labels():
        found = [_folder_labels(part, model.classes) for part in folders]
        return torch.cat(found) if all(part is not None for part in found) else None

    return raw, names, labels, tuple(skipped)


def _under(path: str, name: str, array: bool) -> str:
    """The name of one input of several paths: the file, or a folder's file under the folder, or an array's index."""
    if array:
        return f"{path}[{name}]"
    return path if os.path.isfile(path) else os.path.join(path, name)


def _dataset(model: LoadedModel, data):
    """A data set's inputs and targets: a gpucore data set's (its inputs as raw inputs), a torch Dataset's or Hugging
    Face dataset's read as a run reads them (data_kwargs image_key and label_key; images as a list of images), with
    their classes where the model classifies and the data set names the model's classes."""
    if isinstance(data, LabeledData):
        check_classes(describe_data(data if isinstance(data, ImageFiles) else (data.inputs, data.targets)), data, model)
        raw, targets, what = data.inputs, data.targets, f"inputs ({data!r})"
    else:
        samples = dataset_samples(data, model.config.data_kwargs)
        check_classes(describe_data(samples), samples, model)
        inputs, targets = zip(*(samples[i] for i in range(len(samples))))
        raw = model.read_images(list(inputs)) if samples.images else torch.stack(list(inputs))
        targets = torch.stack([torch.as_tensor(target) for target in targets])
        what = f"inputs ({describe_data(samples)})"
    if isinstance(raw, torch.Tensor):
        _check_float_range(model, raw, what)
    labels = targets.long() if isinstance(model.task, Classification) and targets.dim() == 1 \
        and not targets.is_floating_point() else None
    return raw, [str(i) for i in range(len(targets))], lambda: labels, ()


def _none() -> None:
    """No true classes: inputs that do not give them."""
    return None


def _check_float_range(model: LoadedModel, images: torch.Tensor, origin: str) -> None:
    """Float images above 1 for a model trained on uint8 images (or floats in [0, 1]) are refused: they would be taken
    as [0, 1] data and give wrong predictions without a sign. A run trained on other floats (its input statistics
    outside [0, 1]) takes its inputs as they are."""
    if (not model.is_image_model or not isinstance(images, torch.Tensor) or not images.is_floating_point()
            or images.numel() == 0):
        return
    stats = model.input_stats
    if stats and not (all(0.0 <= mean <= 1.0 for mean in stats["mean"]) and all(std <= 0.5 for std in stats["std"])):
        return  # trained on floats of another range (data in [0, 1] has a std of at most 0.5): taken as they are
    low, high = images.min().item(), images.max().item()
    if high <= 1.0 + 1e-6 and low >= -1e-6:
        return
    scale = " (they look like 0..255 pixel values: divide them by 255 or save them as uint8)" if 1 < high <= 255 else ""
    raise ConfigError(f"{origin} holds {images.dtype} values from {low:g} to {high:g}; the model of "
                      f"'{model.checkpoint}' takes uint8 images (0..255) or floats in [0, 1]{scale}")


def _folder_labels(folders: Optional[List[str]], classes: Optional[List[str]]) -> Optional[torch.Tensor]:
    """Each file's class when every file sits in a subfolder named like one of the checkpoint's classes (a '/' in a
    class name, as in Fashion-MNIST's T-shirt/top, is '_' in the folder's name); None when no subfolder is named so.
    Subfolders of which some name classes and others do not (or only in another case) are a ConfigError: their
    images would go unlabelled, or be scored against another class."""
    if not folders or not classes:
        return None
    index = {name.replace("/", "_"): i for i, name in enumerate(classes)}
    named = sorted({folder for folder in folders if folder in index})
    if not named:
        return None
    others = sorted({folder for folder in folders if folder not in index})
    if others:
        by_case = {name.lower(): name for name in index}
        case_only = [f"'{o}' (the model has '{by_case[o.lower()]}')" for o in others if o.lower() in by_case]
        raise ConfigError(f"inputs: subfolders {listed(named)} name the model's classes, but "
                          f"{listed([o or '(files at the top)' for o in others])} do not"
                          + (f"; these differ only in case: {listed(case_only)}" if case_only else "")
                          + f". The model's classes: {listed(list(index), 10)}. Put each image in its class's "
                          "folder (a class may be missing), or predict on a folder without class subfolders")
    return torch.tensor([index[folder] for folder in folders])


def _write_masks(masks: torch.Tensor, channels: int, names: List[str], folder: Optional[str],
                 rows: List[dict]) -> Optional[List[str]]:
    """One grey PNG per mask in `folder` (255 for a one-channel model's foreground, else the class id); the rows get
    the file."""
    grey = (masks * 255 if channels == 1 else masks).to(torch.uint8).cpu()
    files = None
    if folder is not None:
        os.makedirs(folder, exist_ok=True)
        files = []
        for name, mask in zip(names, grey):
            path = os.path.join(folder, os.path.splitext(name)[0].replace(os.sep, "_") + ".png")
            with open(path, "wb") as handle:
                handle.write(encode_png(mask))
            files.append(path)
        for row, path in zip(rows, files):
            row["mask"] = path
    return files

