"""The report's figures, drawn with matplotlib (Agg: no display needed), each written as one PNG file.

Images come as uint8 or [0, 1] float arrays, H x W (grey) or H x W x 3 (RGB)."""
from __future__ import annotations

import math
from typing import Dict, Optional, Sequence

import numpy as np
import torch

from ..data.png import encode_png, grid
from ..run_history import metric_names

MISTAKE, RIGHT = "#d62728", "#2ca02c"  # title colours of wrong and right predictions


def class_colours(count: int) -> np.ndarray:
    """RGB in [0, 1] per class id of a mask (count x 3): 0, the background, black; 1 red (a binary mask's
    foreground); the others hues a golden-ratio step apart, so neighbouring ids differ."""
    import colorsys

    colours = [(0.0, 0.0, 0.0), (1.0, 0.0, 0.0)]
    colours += [colorsys.hsv_to_rgb((k * 0.618034) % 1.0, 0.8, 0.95) for k in range(2, count)]
    return np.array(colours[:max(count, 2)])



def _figure(**size):
    """A matplotlib Figure on its own Agg canvas, outside pyplot: no figure manager, no global state, and none of
    pyplot's redraw-if-interactive callbacks, which run on every change of every artist and cost much of a figure's
    drawing."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(**size)
    FigureCanvasAgg(figure)
    return figure


def _save(figure, path: str) -> str:
    """The figure laid out as figure.tight_layout() lays it out and cropped to its drawn content as
    savefig(bbox_inches="tight") crops it: the same pixels with one pass over the figure less. savefig draws the whole
    figure once, unrendered, before measuring when the figure has a layout engine or "tight" is asked for, and
    tight_layout() leaves a placeholder engine on it; the engine run here without being set, and the box measured
    here, skip that draw."""
    from matplotlib import rcParams
    from matplotlib.layout_engine import TightLayoutEngine

    TightLayoutEngine(rect=None).execute(figure)  # as figure.tight_layout(): one pass, the whole figure
    box = figure.get_tightbbox(figure.canvas.get_renderer()).padded(rcParams["savefig.pad_inches"])
    _write_png(figure, path, bbox_inches=box)
    return path


def _write_png(figure, path: str, **options) -> None:
    # zlib level 1, not Pillow's 6: the same pixels in a somewhat larger file for a fraction of the compression's CPU
    figure.savefig(path, dpi=100, facecolor="white", pil_kwargs={"compress_level": 1}, **options)


_SERIES_COLOURS = {"train": "C0", "val": "C1", "lr": "C0"}


def curves(history: Sequence[dict], path: str) -> str:
    """Loss and every metric per epoch (train and validation in one panel each), and the learning rate."""
    from matplotlib.ticker import MaxNLocator

    names = metric_names(history)
    names.sort(key=lambda name: (name != "loss", name))
    panels = names + ["lr"]
    columns = min(3, len(panels))
    rows = math.ceil(len(panels) / columns)
    figure = _figure(figsize=(4.5 * columns, 3.2 * rows))
    axes = figure.subplots(rows, columns, squeeze=False)
    epochs = [row["epoch"] for row in history]
    for axis, name in zip(axes.flat, panels):
        series = {"lr": ["lr"]}.get(name, [f"train_{name}", f"val_{name}"])
        for key in series:
            values = [row.get(key) for row in history]
            if any(v is not None for v in values):
                part = key.split("_", 1)[0] if key != "lr" else "lr"
                # train and val in the same colours in every panel, also one that has val only (val_wer)
                axis.plot(epochs, [np.nan if v is None else v for v in values], marker="o", markersize=3,
                          label=part, color=_SERIES_COLOURS[part])
        axis.set_title(name if name != "lr" else "learning rate (end of epoch)")
        axis.set_xlabel("epoch")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.grid(alpha=0.3)
        if name != "lr":
            axis.legend()
    for axis in list(axes.flat)[len(panels):]:
        axis.axis("off")
    return _save(figure, path)


def confusion_matrix(matrix: np.ndarray, classes: Sequence[str], path: str, normalized: bool = False,
                     title: str = "") -> str:
    """matrix[true, predicted] counts; normalized: each true class's row divided by its support."""
    counts = np.asarray(matrix, dtype=np.float64)
    shown = counts / np.maximum(counts.sum(1, keepdims=True), 1) if normalized else counts
    size = len(classes)
    side = max(4.0, 0.35 * size + 2.0)
    figure = _figure(figsize=(side + 1, side))
    axis = figure.subplots()
    image = axis.imshow(shown, cmap="Blues", vmin=0, vmax=1 if normalized else max(shown.max(), 1))
    figure.colorbar(image, ax=axis, fraction=0.046, pad=0.04)
    axis.set_xticks(range(size))
    axis.set_yticks(range(size))
    axis.set_xticklabels(classes, rotation=90 if size > 12 or max(map(len, classes), default=0) > 3 else 0)
    axis.set_yticklabels(classes)
    axis.set_xlabel("predicted")
    axis.set_ylabel("true")
    axis.set_title(title or ("confusion matrix, normalised by true class" if normalized else "confusion matrix"))
    if size <= 30:
        threshold = shown.max() / 2 if shown.size else 0
        for t in range(size):
            for p in range(size):
                if counts[t, p]:
                    axis.text(p, t, f"{shown[t, p]:.2f}" if normalized else f"{int(counts[t, p])}", ha="center",
                              va="center", fontsize=7 if size > 12 else 9,
                              color="white" if shown[t, p] > threshold else "black")
    return _save(figure, path)


def image_grid(images: Sequence[np.ndarray], titles: Sequence[str], path: str, columns: int = 8,
               colours: Optional[Sequence[str]] = None, title: str = "") -> str:
    """Images in rows of `columns`, each with its title (coloured: mistakes red). The cells are placed by hand
    (no tight layout), every image in one axes that spans the figure, at its cell's extent in inches: an axes per
    image (its ticks, spines and layout) cost most of a grid's drawing, and an image resampled into the same box
    looks the same either way."""
    count = max(len(images), 1)
    columns = min(columns, count)
    rows = math.ceil(count / columns)
    height, width = images[0].shape[:2] if len(images) else (1, 1)
    cell = 1.8 if width <= 2 * height else 3.2  # inches per image, wide images (captchas) get more
    lines = max((t.count("\n") + 1 for t in titles), default=1)
    label = 0.16 * lines + 0.08  # inches of title above each image
    top = 0.45 if title else 0.05
    cell_height = cell * height / width
    figure = _figure(figsize=(cell * columns, (cell_height + label) * rows + top))
    total_width, total_height = figure.get_size_inches()
    canvas = figure.add_axes((0, 0, 1, 1))  # data coordinates are the figure's inches
    canvas.axis("off")
    for index, picture in enumerate(images):
        row, column = divmod(index, columns)
        bottom = total_height - top - (row + 1) * (cell_height + label)
        left = (column + 0.01) * cell
        canvas.imshow(picture, cmap="gray" if picture.ndim == 2 else None, vmin=0,
                      vmax=255 if picture.dtype == np.uint8 else 1, interpolation="nearest", aspect="auto",
                      extent=(left, left + cell * 0.96, bottom, bottom + cell_height))
        figure.text((column + 0.5) * cell / total_width, (bottom + cell_height + 0.04) / total_height, titles[index],
                    ha="center", va="bottom", fontsize=7.5, color=colours[index] if colours else "black")
    canvas.set_xlim(0, total_width)
    canvas.set_ylim(0, total_height)
    if title:
        figure.suptitle(title, y=1 - 0.1 / total_height, va="top")
    _write_png(figure, path)
    return path


def frame_strip(frames: np.ndarray, path: str, gap: int = 2) -> str:
    """Frames side by side in one PNG, pixel for pixel (no resampling), white gaps between them: uint8 (K, H, W, 3)
    or (K, H, W)."""
    strip = torch.from_numpy(np.ascontiguousarray(frames))
    if strip.dim() == 3:
        strip = strip[..., None].expand(*strip.shape, 3)
    with open(path, "wb") as handle:
        handle.write(encode_png(grid(strip.contiguous(), columns=len(strip), gap=gap)))
    return path


def per_class_bars(rows: Sequence[Dict], path: str) -> str:
    """per_class_figure, saved to `path`."""
    return _save(per_class_figure(rows), path)


def per_class_figure(rows: Sequence[Dict]):
    """Precision, recall and F1 per class, side by side; each class labelled with its support, the number of its
    samples ('cat (n=12)'), which says how much each bar can be trusted on imbalanced data. Not laid out yet: _save
    lays it out."""
    names = [f"{row['class']} (n={row['support']})" for row in rows]
    figure = _figure(figsize=(max(6.0, 0.6 * len(names) + 2), 3.5))
    axis = figure.subplots()
    positions = np.arange(len(names))
    for offset, key in zip((-0.27, 0, 0.27), ("precision", "recall", "f1")):
        axis.bar(positions + offset, [row[key] for row in rows], width=0.27, label=key)
    axis.set_xticks(positions)
    axis.set_xticklabels(names, rotation=45 if len(names) > 8 else 0, ha="right" if len(names) > 8 else "center")
    axis.set_ylim(0, 1.05)
    axis.legend(loc="lower right")
    axis.grid(axis="y", alpha=0.3)
    return figure
