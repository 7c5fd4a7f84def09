"""report.html: one self-contained page (images embedded, no network) of tables and figures drawn into
plots/, and the numbers its sections show (confusion matrices, per-class metrics, mask IoU, inputs as
pictures). Drawing never fails a run: a figure that cannot be drawn is a warning and a note on the page,
and the rest is still written."""
from __future__ import annotations

import base64
import html
import json
import os
import shutil
import warnings
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence

import numpy as np
import torch

from ..checkpoint import atomic_write, process_alive
from ..run_files import PLOTS, REPORT
from ..signals import interrupts_deferred

GRID = 32  # validation images and training images shown


# ---- numbers -------------------------------------------------------------------------------------
def confusion(targets: torch.Tensor, predicted: torch.Tensor, classes: int) -> torch.Tensor:
    """matrix[true, predicted]: how many samples of each true class got each prediction."""
    targets, predicted = targets.reshape(-1).long(), predicted.reshape(-1).long()
    keep = (targets >= 0) & (targets < classes) & (predicted >= 0) & (predicted < classes)
    return torch.bincount(targets[keep] * classes + predicted[keep], minlength=classes * classes).reshape(classes, classes)


def per_class(matrix: torch.Tensor, names: Sequence[str]) -> List[dict]:
    """Precision, recall, F1 and support per class from a confusion matrix (0 where undefined, as scikit-learn's
    zero_division=0)."""
    m = matrix.double()
    right, predicted, support = m.diagonal(), m.sum(0), m.sum(1)
    precision = torch.where(predicted > 0, right / predicted.clamp_min(1), torch.zeros_like(right))
    recall = torch.where(support > 0, right / support.clamp_min(1), torch.zeros_like(right))
    f1 = torch.where(precision + recall > 0, 2 * precision * recall / (precision + recall).clamp_min(1e-300),
                     torch.zeros_like(right))
    return [{"class": str(name), "precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
            for name, p, r, f, s in zip(names, precision, recall, f1, support)]


def display_images(inputs: torch.Tensor, normalization) -> List[np.ndarray]:
    """Model inputs (N x C x H x W, standardised with `normalization`) back as [0, 1] pictures: H x W or H x W x 3."""
    x = inputs.detach().float().cpu()
    if normalization:
        mean, std = (torch.tensor(v, dtype=torch.float32).reshape(1, -1, 1, 1) for v in normalization)
        x = x * std + mean
    elif x.amax() > 1.5:  # unstandardised uint8 scale
        x = x / 255
    x = x.clamp(0, 1)
    return [picture[0].numpy() if picture.shape[0] != 3 else picture.permute(1, 2, 0).numpy() for picture in x]


def is_images(inputs: torch.Tensor) -> bool:
    return inputs.dim() == 4


def mask_iou(truth: torch.Tensor, guess: torch.Tensor) -> torch.Tensor:
    """Per image (N x H x W class masks): intersection over union of the foreground (class > 0); 1 when both are empty."""
    union = ((truth > 0) | (guess > 0)).flatten(1).sum(1)
    overlap = ((truth > 0) & (guess > 0)).flatten(1).sum(1)
    return torch.where(union > 0, overlap / union.clamp_min(1), torch.ones(truth.shape[0]))


def image_miou(truth: torch.Tensor, guess: torch.Tensor, classes: int) -> torch.Tensor:
    """Per image (N x H x W class masks): the mean IoU over the classes in its true or predicted mask, pixels whose
    truth is outside [0, classes) (ignore_index) left out; 1 when no pixel counts."""
    scores = []
    for t, g in zip(truth, guess):
        matrix = confusion(t, g, classes).double()
        hits = matrix.diagonal()
        union = matrix.sum(0) + matrix.sum(1) - hits
        present = union > 0
        scores.append((hits[present] / union[present]).mean().item() if present.any() else 1.0)
    return torch.tensor(scores)


def segmentation_per_class(matrix: torch.Tensor, names: Sequence[str]) -> List[dict]:
    """Per class from a pixel confusion matrix (matrix[true, predicted], ignored pixels left out): IoU = TP / (TP + FP
    + FN), Dice = 2 TP / (2 TP + FP + FN) (None for a class with no true and no predicted pixel: it is in no mean),
    precision, recall (0 where undefined) and support (true pixels)."""
    m = matrix.double()
    hits, predicted, support = m.diagonal(), m.sum(0), m.sum(1)
    wrong = predicted + support - 2 * hits
    rows = per_class(matrix, names)
    for row, tp, fp_fn in zip(rows, hits.tolist(), wrong.tolist()):
        scored = tp + fp_fn > 0
        row["iou"] = tp / (tp + fp_fn) if scored else None
        row["dice"] = 2 * tp / (2 * tp + fp_fn) if scored else None
    return rows



# ---- the page ------------------------------------------------------------------------------------
_DRAWING = ".plots.tmp-"  # the folder a page draws into (+ its process id), moved to plots/ when the page is written


class Page:
    """Sections of report.html, each drawn and embedded; a figure that fails is a warning. The figures are drawn into
    a temporary folder beside plots/ that replaces plots/ when the page is written: an interrupted report (Ctrl-C)
    leaves plots/ as it was."""

    def __init__(self, folder: str):
        self.folder = folder
        os.makedirs(folder, exist_ok=True)
        _remove_stale_drawings(folder)
        self.plots = os.path.join(folder, f"{_DRAWING}{os.getpid()}")
        shutil.rmtree(self.plots, ignore_errors=True)
        os.makedirs(self.plots)
        self.sections: List[str] = []
        self.failures: List[str] = []

    def discard(self) -> None:
        """Removes the figures drawn so far (an interrupted page); plots/ stays as it was."""
        if os.path.basename(self.plots).startswith(_DRAWING):
            shutil.rmtree(self.plots, ignore_errors=True)

    def attempt(self, what: str, work: Callable[[], Any]) -> Any:
        try:
            return work()
        except KeyboardInterrupt:
            self.discard()
            raise
        except Exception as exc:  # noqa: BLE001 - a figure never fails the run; the page says what is missing
            message = f"{what}: {type(exc).__name__}: {exc}"
            warnings.warn(f"report: could not draw {message}", RuntimeWarning, stacklevel=2)
            self.failures.append(message)
            return None

    def picture(self, name: str, draw: Callable[[str], Any]) -> Optional["Picture"]:
        """A PNG drawn by `draw` into plots/ as `name`, to embed (in a table cell, or as a figure); None where it could
        not be drawn (a warning, and a line under "Not drawn")."""
        path = os.path.join(self.plots, name)
        if self.attempt(name, lambda: draw(path)) is None:
            return None
        with open(path, "rb") as handle:
            return Picture(name, base64.b64encode(handle.read()).decode("ascii"))

    def figure(self, heading: str, name: str, draw: Callable[[str], Any], note: str = "") -> None:
        picture = self.picture(name, draw)
        if picture is None:
            return
        self.sections.append(f"<h2>{html.escape(heading)}</h2>" + (f"<p>{html.escape(note)}</p>" if note else "")
                             + picture.html())

    def table(self, heading: str, rows: Sequence[Sequence[Any]], header: Sequence[str] = (), note: str = "") -> None:
        """A table; a cell that is a Picture shows its image."""
        head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{_cell_html(c)}</td>" for c in row) + "</tr>" for row in rows)
        self.sections.append(f"<h2>{html.escape(heading)}</h2><table>{'<tr>' + head + '</tr>' if head else ''}"
                             f"{body}</table>" + (f"<p>{html.escape(note)}</p>" if note else ""))

    def write(self, title: str) -> str:
        failures = "".join(f"<li>{html.escape(f)}</li>" for f in self.failures)
        page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
                + "".join(f"<section>{s}</section>" for s in self.sections)
                + (f"<section><h2>Not drawn</h2><ul>{failures}</ul></section>" if failures else "")
                + "</body></html>")
        path = os.path.join(self.folder, REPORT)
        with interrupts_deferred():  # plots/ and report.html replaced together
            self._move_plots_into_place()
            atomic_write(path, lambda handle: handle.write(page), binary=False)
        return path

    def _move_plots_into_place(self) -> None:
        final = os.path.join(self.folder, PLOTS)
        if not os.path.basename(self.plots).startswith(_DRAWING):
            return  # already moved (a page written twice)
        old = os.path.join(self.folder, f".plots.old-{os.getpid()}")
        if os.path.isdir(final):
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
        os.replace(self.plots, final)
        shutil.rmtree(old, ignore_errors=True)
        self.plots = final


def _remove_stale_drawings(folder: str) -> None:
    """The temporary plot folders of report processes that were killed (their process id no longer runs)."""
    for name in os.listdir(folder):
        for prefix in (_DRAWING, ".plots.old-"):
            if name.startswith(prefix) and name[len(prefix):].isdigit() and not _running(int(name[len(prefix):])):
                shutil.rmtree(os.path.join(folder, name), ignore_errors=True)


def _running(pid: int) -> bool:
    # this process's own leftovers (an earlier page that was interrupted) are not a running page's
    return pid != os.getpid() and process_alive(pid)


_STYLE = ("body{font-family:sans-serif;margin:24px;color:#222}h1{font-size:22px}"
          "section{display:inline-block;vertical-align:top;margin:0 32px 0 0;max-width:100%}"
          "h2{font-size:17px;margin-top:28px}table{border-collapse:collapse;font-size:13px}"
          "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#f0f0f0}"
          "img{max-width:100%;border:1px solid #eee}")


@dataclass(frozen=True)
class Picture:
    """A PNG of plots/, embedded in the page as a data URI (the page fetches nothing)."""

    name: str  # its file name in plots/
    data: str  # base64
    height: Optional[int] = None  # shown this many pixels high, its pixels kept sharp (small frames enlarged)

    def html(self) -> str:
        style = f' style="height:{self.height}px;image-rendering:pixelated"' if self.height else ""
        return f'<img alt="{html.escape(self.name)}"{style} src="data:image/png;base64,{self.data}">'


def _cell_html(value: Any) -> str:
    return value.html() if isinstance(value, Picture) else html.escape(_cell(value))


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return "" if value is None else str(value)


