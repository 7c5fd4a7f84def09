"""The sections of report.html that show what a model predicts: the evaluation's metrics, then as the task
says (tasks/): confusion matrices and per-class metrics, the validation grid, the worst mistakes with
Grad-CAM, decoded strings beside the truth, masks with IoU, a sign-language run's gloss errors and clips; and one
training batch."""
from __future__ import annotations

import copy
import os
from dataclasses import replace
from typing import List, Optional

import numpy as np
import torch
from torch import nn

from ..cam import CAM
from ..data.clip_sequences import ClipSequences
from ..tasks.base import names_for, output_names
from ..tasks.decode import as_text
from . import plots
from .page import (GRID, Page, confusion, display_images, image_miou, is_images, mask_iou, per_class,
                   segmentation_per_class)

TOP_LOSSES = 8
METRICS_DOCS = "docs/guides/training.md#metrics"  # the definitions, in gpucore's repository (the page is offline)


# ---- what the predictions show -------------------------------------------------------------------
def prediction_sections(page: Page, result, classes: Optional[List[str]], normalization,
                        module: nn.Module, config, device: torch.device) -> Optional[List[dict]]:
    """The evaluation's metrics, then the sections the task draws (Task.report_sections): confusion matrices and
    per-class metrics, the validation grid, the worst mistakes with Grad-CAM, masks with IoU, decoded strings.
    Returns the per-class rows (or None)."""
    page.table(f"Metrics ({result.data.description})",
               [(k, v) for k, v in result.metrics.items()], ("metric", "value"),
               "What each name means (formula, averaging, what is ignored, precision) and the torchmetrics call that "
               f"reproduces it: the Metrics section of gpucore's training guide, {METRICS_DOCS}.")
    section = result.task.report_sections
    if section == "classification":
        return _classification(page, result, classes, normalization, module, config, device)
    if section == "sequences" and getattr(result.task, "sequence_lengths", False):
        return _clip_glosses(page, result, classes, normalization)
    if section == "sequences":
        return _sequences(page, result, classes, normalization)
    if section == "segmentation":
        return _segmentation(page, result, classes, normalization)
    if section == "multi_label":
        return _multi_label(page, result, classes)
    return None


def _confusion_sections(page: Page, matrix: torch.Tensor, names: List[str], what: str) -> List[dict]:
    counts = matrix.numpy()
    page.figure(f"Confusion matrix{what}", "confusion_matrix.png",
                lambda path: plots.confusion_matrix(counts, names, path))
    page.figure(f"Confusion matrix{what}, normalised by true class", "confusion_matrix_normalized.png",
                lambda path: plots.confusion_matrix(counts, names, path, normalized=True))
    rows = per_class(matrix, names)
    page.table(f"Per class{what}", [(r["class"], r["precision"], r["recall"], r["f1"], r["support"]) for r in rows],
               ("class", "precision", "recall", "F1", "support"))
    page.figure(f"Precision, recall and F1 per class{what}", "per_class.png", lambda path: plots.per_class_bars(rows, path))
    return rows


def _classification(page, result, classes, normalization, module, config, device) -> Optional[List[dict]]:
    if result.targets.dim() != 1:
        return None  # soft labels: nothing to count right or wrong
    count = result.outputs.shape[1]
    names = output_names(classes, count)
    rows = _confusion_sections(page, confusion(result.targets, result.predicted, count), names, "")
    confidence, right = result.confidence(), result.correct()
    shown = list(range(min(GRID, len(result))))
    inputs = result.inputs(shown)
    if not is_images(inputs):
        return rows
    pictures = display_images(inputs, normalization)

    def title(i):
        t, p = int(result.targets[i]), int(result.predicted[i])
        if t == result.task.ignore_index:
            return f"(ignored)\npred {names[p]}"
        return f"{names[t]}" if t == p else f"true {names[t]}\npred {names[p]}"

    page.figure("Validation predictions", "val_predictions.png", lambda path: plots.image_grid(
        pictures, [f"{title(i)} ({float(confidence[i]):.2f})" for i in shown], path,
        colours=[plots.RIGHT if right[i] else plots.MISTAKE for i in shown]),
        "The first validation images: true label (and prediction, in red, when wrong) with the confidence.")
    losses = result.sample_losses()
    order = [int(i) for i in losses.argsort(descending=True) if not right[i]][:TOP_LOSSES]
    if order:
        page.figure("Top losses, with Grad-CAM", "top_losses.png",
                    lambda path: _top_losses(path, result, order, names, normalization, module, config, device),
                    "The worst mistakes: the image, Grad-CAM for the predicted class, Grad-CAM for the true class.")
    return rows


def _top_losses(path, result, order, names, normalization, module, config, device) -> str:
    model = copy.deepcopy(module).to(device=device, dtype=torch.float32, memory_format=torch.contiguous_format).eval()
    inputs = result.inputs(order).to(device=device, dtype=torch.float32)
    pictures = torch.from_numpy(np.stack(display_images(inputs, normalization)))
    pictures = pictures if pictures.dim() == 4 else pictures.unsqueeze(-1)
    cam = CAM(model, config.report_cam_layer, "gradcam")
    on_predicted = cam(inputs, result.predicted[order].tolist()).overlay(pictures).cpu().numpy()
    on_true = cam(inputs, result.targets[order].tolist()).overlay(pictures).cpu().numpy()
    images, titles, colours = [], [], []
    losses, confidence = result.sample_losses(), result.confidence()
    for k, i in enumerate(order):
        t, p = names[int(result.targets[i])], names[int(result.predicted[i])]
        images += [pictures[k].squeeze(-1).numpy(), on_predicted[k], on_true[k]]
        titles += [f"true {t}, pred {p}\nloss {float(losses[i]):.2f}, conf {float(confidence[i]):.2f}",
                   f"Grad-CAM: {p}", f"Grad-CAM: {t}"]
        colours += [plots.MISTAKE, "black", "black"]
    return plots.image_grid(images, titles, path, columns=6, colours=colours,
                            title=f"Grad-CAM at layer {cam.layer_names[0]}")


def _sequences(page, result, classes, normalization) -> Optional[List[dict]]:
    """Multi-head (captcha) and CTC: decoded strings beside the truth; per-character confusion."""
    task = result.task
    count = task.class_count(result.outputs)
    alphabet = task.alphabet(classes, count)
    targets, predicted, left_out = task.aligned(result.targets.long(), result.predicted.long())
    rows = _confusion_sections(page, confusion(targets, predicted, count), alphabet, " per character" + left_out)
    right = result.correct()
    shown = list(range(min(GRID, len(result))))
    truth = as_text(task.labels(result.targets[shown].long()), alphabet)
    guess = as_text(result.predicted[shown].long(), alphabet)
    page.table("Decoded predictions", [(i, truth[k], guess[k], "yes" if right[i] else "NO") for k, i in enumerate(shown)],
               ("sample", "true", "predicted", "right"))
    inputs = result.inputs(shown)
    if is_images(inputs):
        pictures = display_images(inputs, normalization)
        page.figure("Validation predictions", "val_predictions.png", lambda path: plots.image_grid(
            pictures, [f"true {t}\npred {g}" for t, g in zip(truth, guess)], path, columns=4,
            colours=[plots.RIGHT if right[i] else plots.MISTAKE for i in shown]))
    return rows


TOP_GLOSSES = 20  # rows of each gloss-error table
CLIPS_SHOWN = 8  # clips shown with their glosses and frames
STRIP_FRAMES = 8  # frames a clip's strip shows
STRIP_HEIGHT = 64  # pixels a strip is shown high (small frames enlarged, pixels kept sharp)


def _clip_glosses(page, result, classes, normalization) -> None:
    """Clips read by CTC (sign language): the glosses the alignment of each decoding against its reference
    substituted (by which), deleted and inserted most often, then the first clips with their reference and decoded
    glosses side by side and a strip of evenly spaced frames as the model saw them. No per-gloss confusion matrix: a
    gloss vocabulary runs to thousands, and the alignment's substitutions are the confusions that count."""
    errors = result.word_errors()
    count = result.outputs.shape[-1] if result.outputs is not None else len(classes or ())
    names = result.task.alphabet(classes, count)

    def gloss(index: int) -> str:
        return names[index] if 0 <= index < len(names) else str(index)

    (s, d, i), words = errors.per_sample.sum(0).tolist(), errors.words
    page.table("Gloss errors", [("reference glosses", words), ("substituted", s), ("deleted", d), ("inserted", i),
                                ("WER, (S + D + I) / reference glosses", (s + d + i) / words if words else None)],
               ("", "count"), "From a minimal alignment (Levenshtein) of each clip's decoded glosses against its "
                              "reference, as jiwer aligns words.")
    for what, counts, header in (("substituted", errors.substitutions, ("reference", "decoded instead", "times")),
                                 ("deleted", errors.deleted, ("reference gloss", "times")),
                                 ("inserted", errors.inserted, ("decoded gloss", "times"))):
        rows = [(*map(gloss, key if isinstance(key, tuple) else (key,)), n) for key, n in _most_common(counts)]
        page.table(f"Glosses most often {what} (top {TOP_GLOSSES})", rows, header, "" if rows else "None.")
    shown = list(range(min(CLIPS_SHOWN, len(result))))
    references = as_text(result.task.labels(result.targets[shown].long()), names)
    decoded = as_text(result.predicted[shown].long(), names)
    files = _clip_files(result)
    inputs = result.inputs(shown)
    rows = []
    for k, index in enumerate(shown):
        strip = None
        if inputs.dim() == 5:  # frames (not keypoints)
            frames = int(result.targets[index, 0])
            strip = page.picture(f"clip_{index}_frames.png", lambda path, k=k, frames=frames: plots.frame_strip(
                strip_frames(inputs[k, :frames], normalization), path))
        edits = errors.per_sample[index].tolist()
        rows.append((index, references[k], decoded[k],
                     "right" if not any(edits) else ", ".join(f"{n} {kind}" for n, kind in zip(
                         edits, ("substituted", "deleted", "inserted")) if n),
                     files[index] if files else None, replace(strip, height=STRIP_HEIGHT) if strip else None))
    page.table("Clips: reference and decoded glosses", rows,
               ("sample", "reference", "decoded", "errors", "clip", f"frames (up to {STRIP_FRAMES}, evenly spaced)"),
               f"The first clips of {result.data.description}; their frames as the model saw them (after the "
               "deterministic transforms), un-normalised.")


def _most_common(counts) -> list:
    """The TOP_GLOSSES most frequent, ties in the order of their keys (the same page for the same counts)."""
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:TOP_GLOSSES]


def strip_frames(clip: torch.Tensor, normalization) -> np.ndarray:
    """Up to STRIP_FRAMES frames of a clip (T, C, H, W, as the model took it), evenly spaced from the first to the
    last, un-normalised: uint8 (K, H, W, 3) or (K, H, W)."""
    chosen = np.linspace(0, clip.shape[0] - 1, min(STRIP_FRAMES, clip.shape[0])).round().astype(np.int64)
    pictures = display_images(clip[torch.from_numpy(chosen)], normalization)
    return (np.stack(pictures) * 255).round().astype(np.uint8)


def _clip_files(result) -> Optional[List[str]]:
    """Each evaluated clip's file and the row that labels it, where the data is a sign-language layout whose every clip
    was scored (a clip left out while decoding would shift them)."""
    clips = result.data.data
    if not isinstance(clips, ClipSequences) or len(clips.labels) != len(result):
        return None
    return [f"{os.path.basename(label.path)} ({label.where})" for label in clips.labels]


def _multi_label(page, result, classes) -> List[dict]:
    """Per label: precision, recall, F1 and support, each label a yes/no decision (logit > 0) over all samples."""
    predicted = result.predicted.reshape(len(result), -1)
    truth = result.targets.reshape(len(result), -1) > 0.5
    names = names_for(classes, predicted.shape[1])
    rows = [per_class(confusion(truth[:, k].long(), predicted[:, k].long(), 2), ["no", "yes"])[1] | {"class": name}
            for k, name in enumerate(names)]
    page.table("Per label", [(r["class"], r["precision"], r["recall"], r["f1"], r["support"]) for r in rows],
               ("label", "precision", "recall", "F1", "support"))
    page.figure("Precision, recall and F1 per label", "per_class.png", lambda path: plots.per_class_bars(rows, path))
    return rows


def _segmentation(page, result, classes, normalization) -> List[dict]:
    """Per-class IoU and Dice over all validation pixels, then the first images with their true and predicted masks."""
    count = max(result.output_channels, 2)  # one output channel: background and foreground
    truth_all = result.task.class_masks(result.targets)
    names = names_for(classes, count)
    rows = segmentation_per_class(confusion(truth_all, result.predicted, count), names)
    page.table("Per class (pixels of all validation images)",
               [(r["class"], r["iou"], r["dice"], r["precision"], r["recall"], r["support"]) for r in rows],
               ("class", "IoU", "Dice", "precision", "recall", "support (pixels)"))
    shown = list(range(min(12, len(result))))
    inputs = result.inputs(shown)
    pictures = display_images(inputs, normalization)
    truth, guess = truth_all[shown], result.predicted[shown].long()
    binary = result.output_channels == 1
    iou = mask_iou(truth, guess) if binary else image_miou(truth, guess, count)
    colours = plots.class_colours(count)
    images, titles = [], []
    for k in range(len(shown)):
        base = pictures[k] if pictures[k].ndim == 3 else np.repeat(pictures[k][..., None], 3, -1)
        images += [base, _mask_overlay(base, truth[k], colours), _mask_overlay(base, guess[k], colours)]
        titles += [f"sample {shown[k]}", "true mask", f"predicted, image IoU {float(iou[k]):.2f}"]
    what = ("the image's foreground IoU" if binary else
            "the image's mean IoU over the classes in its true or predicted mask")
    page.figure("Validation masks", "val_predictions.png", lambda path: plots.image_grid(images, titles, path, columns=6),
                f"Each image, its true mask and the predicted one (classes in colour, background and ignored pixels "
                f"left clear), with {what}: a per-image number, not the metrics table's, which pools all validation "
                "pixels.")
    return rows


def _mask_overlay(picture: np.ndarray, mask: torch.Tensor, colours: np.ndarray) -> np.ndarray:
    """Each pixel of class 1.. tinted with its class's colour; background (0) and ignored pixels as they are."""
    out = picture.copy()
    ids = mask.numpy()
    on = (ids > 0) & (ids < len(colours))
    out[on] = 0.5 * out[on] + 0.5 * colours[ids[on]]
    return out


def train_batch_section(page: Page, train_set, normalization, classes, task) -> None:
    """One augmented training batch as the model sees it, un-normalised (image inputs only)."""
    batch = page.attempt("train_batch.png", lambda: next(iter(train_set.batches(0))))
    if batch is None or not is_images(batch[0]):
        return
    inputs, targets = batch[0][:GRID], batch[1][:GRID].cpu()
    titles = task.target_text(targets, classes)
    page.figure("One training batch", "train_batch.png",
                lambda path: plots.image_grid(display_images(inputs, normalization), titles, path),
                "Augmented and un-normalised, as the model sees it in training (epoch 1), with its labels.")


