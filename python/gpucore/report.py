"""What a person looks at after a run: plots/*.png, per_class.json and report.html (one self-contained page,
images embedded, no network) in the run directory, written at the end of training (config key `report`)
and by `gpucore report RUN_DIR` for any run, an interrupted one too; `gpucore evaluate CHECKPOINT` writes
the same for any data set.

The model shown is the run's best checkpoint (best.pt, else last.pt, else interrupted.pt), evaluated on the
run's validation data by evaluation.evaluation_pass, the engine's own evaluation. Drawing never fails a run: a
figure that cannot be drawn is a warning and a note on the page, and the rest is still written.
"""
from __future__ import annotations

import base64
import copy
import html
import json
import os
import warnings
from typing import Any, Callable, List, Optional, Sequence

import numpy as np
import torch
from torch import nn

from . import plots
from .builtin_data import load_data
from .cam import CAM
from .checkpoint import atomic_write, load_checkpoint, write_json
from .decode import as_text
from .device import select_device
from .errors import ConfigError
from .inference import from_payload, load
from .evaluation import Predictions, data_sets, evaluation_pass

CHECKPOINT_ORDER = ("best.pt", "last.pt", "interrupted.pt")
GRID = 32  # validation images and training images shown
TOP_LOSSES = 8
SPLITS = ("val", "test")


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


def _is_images(inputs: torch.Tensor) -> bool:
    return inputs.dim() == 4


# ---- the page ------------------------------------------------------------------------------------
class Page:
    """Sections of report.html, each drawn into plots/ and embedded; a figure that fails is a warning."""

    def __init__(self, folder: str):
        self.folder, self.plots = folder, os.path.join(folder, "plots")
        os.makedirs(self.plots, exist_ok=True)
        self.sections: List[str] = []
        self.failures: List[str] = []

    def attempt(self, what: str, work: Callable[[], Any]) -> Any:
        try:
            return work()
        except Exception as exc:  # noqa: BLE001 - a figure never fails the run; the page says what is missing
            message = f"{what}: {type(exc).__name__}: {exc}"
            warnings.warn(f"report: could not draw {message}", RuntimeWarning, stacklevel=2)
            self.failures.append(message)
            return None

    def figure(self, heading: str, name: str, draw: Callable[[str], Any], note: str = "") -> None:
        path = os.path.join(self.plots, name)
        if self.attempt(name, lambda: draw(path)) is None:
            return
        with open(path, "rb") as handle:
            data = base64.b64encode(handle.read()).decode("ascii")
        self.sections.append(f"<h2>{html.escape(heading)}</h2>" + (f"<p>{html.escape(note)}</p>" if note else "")
                             + f'<img alt="{html.escape(name)}" src="data:image/png;base64,{data}">')

    def table(self, heading: str, rows: Sequence[Sequence[Any]], header: Sequence[str] = ()) -> None:
        head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(c))}</td>" for c in row) + "</tr>" for row in rows)
        self.sections.append(f"<h2>{html.escape(heading)}</h2><table>{'<tr>' + head + '</tr>' if head else ''}"
                             f"{body}</table>")

    def write(self, title: str) -> str:
        failures = "".join(f"<li>{html.escape(f)}</li>" for f in self.failures)
        page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
                + "".join(f"<section>{s}</section>" for s in self.sections)
                + (f"<section><h2>Not drawn</h2><ul>{failures}</ul></section>" if failures else "")
                + "</body></html>")
        path = os.path.join(self.folder, "report.html")
        atomic_write(path, lambda handle: handle.write(page), binary=False)
        return path


_STYLE = ("body{font-family:sans-serif;margin:24px;color:#222}h1{font-size:22px}"
          "section{display:inline-block;vertical-align:top;margin:0 32px 0 0;max-width:100%}"
          "h2{font-size:17px;margin-top:28px}table{border-collapse:collapse;font-size:13px}"
          "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#f0f0f0}"
          "img{max-width:100%;border:1px solid #eee}")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return "" if value is None else str(value)


# ---- what the predictions show -------------------------------------------------------------------
def prediction_sections(page: Page, result: Predictions, classes: Optional[List[str]], normalization,
                        module: nn.Module, config, device: torch.device) -> Optional[List[dict]]:
    """The evaluation's metrics, then per loss: confusion matrices and per-class metrics, the validation grid,
    the worst mistakes with Grad-CAM, masks with IoU, decoded strings. Returns the per-class rows (or None)."""
    page.table("Metrics (" + result.data.description + f", {len(result)} samples)",
               [(k, v) for k, v in result.metrics.items()], ("metric", "value"))
    rows = None
    if result.is_classification:
        rows = _classification(page, result, classes, normalization, module, config, device)
    elif result.loss == "multilabel_soft_margin" and result.heads > 0 or result.loss == "ctc":
        rows = _sequences(page, result, classes, normalization)
    elif result.loss == "dice_bce":
        _segmentation(page, result, normalization)
    return rows


def _names(classes: Optional[List[str]], count: int) -> List[str]:
    return list(classes) if classes and len(classes) == count else [str(i) for i in range(count)]


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


def _classification(page, result, classes, normalization, module, config, device) -> List[dict]:
    count = result.outputs.shape[1]
    names = _names(classes, count)
    rows = _confusion_sections(page, confusion(result.targets, result.predicted, count), names, "")
    confidence, right = result.confidence(), result.correct()
    shown = list(range(min(GRID, len(result))))
    inputs = result.inputs(shown)
    if not _is_images(inputs):
        return rows
    pictures = display_images(inputs, normalization)

    def title(i):
        t, p = int(result.targets[i]), int(result.predicted[i])
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
    ctc = result.loss == "ctc"
    count = result.outputs.shape[-1] // (1 if ctc else result.heads)
    alphabet = _names(classes, count)
    if ctc and not classes:
        alphabet = ["-"] + [str(i) for i in range(1, count)]  # 0 is CTC's blank
    targets, predicted = result.targets.long(), result.predicted.long()
    if ctc:  # characters are compared position by position where the lengths agree
        same = (targets >= 0).sum(1) == (predicted >= 0).sum(1)
        width = min(targets.shape[1], predicted.shape[1])
        targets, predicted = targets[same][:, :width], predicted[same][:, :width]
    rows = _confusion_sections(page, confusion(targets, predicted, count), alphabet,
                               " per character" + (" (sequences of the right length)" if ctc else ""))
    right = result.correct()
    shown = list(range(min(GRID, len(result))))
    truth = as_text(result.targets[shown].long(), alphabet)
    guess = as_text(result.predicted[shown].long(), alphabet)
    page.table("Decoded predictions", [(i, truth[k], guess[k], "yes" if right[i] else "NO") for k, i in enumerate(shown)],
               ("sample", "true", "predicted", "right"))
    inputs = result.inputs(shown)
    if _is_images(inputs):
        pictures = display_images(inputs, normalization)
        page.figure("Validation predictions", "val_predictions.png", lambda path: plots.image_grid(
            pictures, [f"true {t}\npred {g}" for t, g in zip(truth, guess)], path, columns=4,
            colours=[plots.RIGHT if right[i] else plots.MISTAKE for i in shown]))
    return rows


def _segmentation(page, result, normalization) -> None:
    shown = list(range(min(12, len(result))))
    inputs = result.inputs(shown)
    pictures = display_images(inputs, normalization)
    truth, guess = result.targets[shown].long(), result.predicted[shown].long()
    truth = truth[:, 0] if truth.dim() == 4 else truth
    iou = mask_iou(truth, guess)
    images, titles = [], []
    for k in range(len(shown)):
        base = pictures[k] if pictures[k].ndim == 3 else np.repeat(pictures[k][..., None], 3, -1)
        images += [base, _mask_overlay(base, truth[k]), _mask_overlay(base, guess[k])]
        titles += [f"sample {shown[k]}", "true mask", f"predicted, IoU {float(iou[k]):.2f}"]
    page.figure("Validation masks", "val_predictions.png", lambda path: plots.image_grid(images, titles, path, columns=6),
                "Each image, its true mask and the predicted one (red), with the image's foreground IoU.")


def mask_iou(truth: torch.Tensor, guess: torch.Tensor) -> torch.Tensor:
    """Per image (N x H x W class masks): intersection over union of the foreground (class > 0); 1 when both are empty."""
    union = ((truth > 0) | (guess > 0)).flatten(1).sum(1)
    overlap = ((truth > 0) & (guess > 0)).flatten(1).sum(1)
    return torch.where(union > 0, overlap / union.clamp_min(1), torch.ones(truth.shape[0]))


def _mask_overlay(picture: np.ndarray, mask: torch.Tensor) -> np.ndarray:
    out = picture.copy()
    on = mask.numpy() > 0
    out[on] = 0.5 * out[on] + 0.5 * np.array([1.0, 0.0, 0.0])
    return out


def train_batch_section(page: Page, train_set, normalization, classes, config) -> None:
    """One augmented training batch as the model sees it, un-normalised (image inputs only)."""
    batch = page.attempt("train_batch.png", lambda: next(iter(train_set.batches(0))))
    if batch is None or not _is_images(batch[0]):
        return
    inputs, targets = batch[0][:GRID], batch[1][:GRID].cpu()
    if config.loss == "cross_entropy" and targets.dim() == 1:
        names = _names(classes, int(max(targets.max().item() + 1, len(classes or []))))
        titles = [names[int(t)] for t in targets]
    elif targets.dim() == 2 and not targets.is_floating_point():
        names = classes or [str(i) for i in range(int(targets.max()) + 1)]
        titles = as_text(targets.reshape(len(targets), -1), names)
    else:
        titles = [""] * len(inputs)
    page.figure("One training batch", "train_batch.png",
                lambda path: plots.image_grid(display_images(inputs, normalization), titles, path),
                "Augmented and un-normalised, as the model sees it in training (epoch 1), with its labels.")


# ---- run reports ---------------------------------------------------------------------------------
def best_checkpoint(run_dir: str) -> str:
    folder = os.path.join(run_dir, "checkpoints")
    for name in CHECKPOINT_ORDER:
        if os.path.isfile(os.path.join(folder, name)):
            return os.path.join(folder, name)
    raise ConfigError(f"run directory '{run_dir}' has no checkpoint ({', '.join(CHECKPOINT_ORDER)} in {folder}): the "
                      "run ended before its first epoch did")


def write_report(run_dir: str, device: str = "auto", module: Optional[nn.Module] = None, data=None) -> str:
    """report.html, plots/ and per_class.json in `run_dir`, from its files (training_stats.json, metrics.jsonl,
    the best checkpoint, the config's data); returns the page's path. In a training process, `module` (the run's
    model, to take the checkpoint's weights) and `data` ((train, val) as the run read them) save rebuilding them."""
    run_dir = os.path.abspath(run_dir)
    stats_path = os.path.join(run_dir, "training_stats.json")
    if not os.path.isfile(stats_path):
        raise ConfigError(f"'{run_dir}' is not a gpucore run directory: it has no training_stats.json")
    with open(stats_path, encoding="utf-8") as handle:
        stats = json.load(handle)
    checkpoint = best_checkpoint(run_dir)
    payload = load_checkpoint(checkpoint)
    model = from_payload(payload, checkpoint, select_device(device).device, module)
    config, target, module = model.config, model.device, model.module
    classes, normalization = model.classes, model.normalization
    train_data, val_data = data if data is not None else load_data(config.data, config.data_kwargs, config.val_fraction,
                                                                     config.seed)
    train_set, val_set = data_sets(config, train_data, val_data, normalization, target)

    page = Page(run_dir)
    page.table("The run", _facts(stats, os.path.basename(checkpoint), payload["epoch"]))
    history = _history(run_dir, stats)
    if history:
        page.figure("Loss, metrics and learning rate per epoch", "curves.png", lambda path: plots.curves(history, path))
    rows = None
    if val_set is not None:
        result = page.attempt("the validation pass", lambda: evaluation_pass(module, config, val_set, target))
        if result is not None:
            rows = prediction_sections(page, result, classes, normalization, module, config, target)
    train_batch_section(page, train_set, normalization, classes, config)
    page.table("Config", sorted(config.to_dict().items()), ("key", "value"))
    if rows is not None:
        write_json(os.path.join(run_dir, "per_class.json"), rows)
    path = page.write(f"gpucore run {os.path.basename(run_dir)}")
    stats["report"] = path
    write_json(stats_path, stats)
    return path


def report_after_training(run) -> Optional[str]:
    """The end of `gpucore.train`: the report of the finished (or interrupted) run; errors become a warning."""
    try:
        val_data = run.val_set.data if run.val_set is not None else None
        return write_report(run.run_dir.path, str(run.device), run.module, (run.train_data, val_data))
    except Exception as exc:  # noqa: BLE001 - the training itself succeeded
        warnings.warn(f"report: the run report was not written: {type(exc).__name__}: {exc}", RuntimeWarning,
                      stacklevel=2)
    except KeyboardInterrupt:  # the run's files are complete; the page can be drawn later
        warnings.warn(f"report: interrupted; write it with  gpucore report {run.run_dir.path}", RuntimeWarning,
                      stacklevel=2)
    return None


def _history(run_dir: str, stats: dict) -> List[dict]:
    path = os.path.join(run_dir, "metrics.jsonl")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]
    return list(stats.get("epochs") or [])


def _facts(stats: dict, checkpoint: str, epoch: int) -> List[tuple]:
    history = stats.get("epochs") or []
    seconds = sum(r.get("epoch_time_s", 0) for r in history)
    rate = sum(r["samples_per_s"] * r["epoch_time_s"] for r in history) / seconds if seconds > 0 else None
    peaks = [r["gpu_memory_peak_bytes"] for r in history if r.get("gpu_memory_peak_bytes")]
    precision = stats.get("precision") or {}
    best = stats.get("best") or {}
    metric = best.get("metric")
    facts = [
        ("status", stats.get("status")), ("error", stats.get("error")),
        ("device", stats.get("device")), ("why this device", stats.get("device_reason")),
        ("precision", precision.get("precision")), ("why this precision", precision.get("reason")),
        ("channels last", stats.get("channels_last")), ("epochs trained", len(history)),
        ("optimizer steps", stats.get("steps")), ("skipped steps (inf/NaN gradients)", stats.get("skipped_steps")),
        ("host syncs", stats.get("host_syncs")), ("training samples/s", rate),
        ("peak GPU memory (MiB)", max(peaks) / 2**20 if peaks else None),
        ("best", f"{best.get('monitor')} {metric:.4g} at epoch {best.get('epoch')}" if metric is not None else None),
        ("model shown", f"checkpoints/{checkpoint} (after epoch {epoch})"),
        ("skipped files", len(stats.get("skipped_files") or [])), ("torch", stats.get("torch")),
    ]
    return [(name, value) for name, value in facts if value is not None]  # no error, no GPU: no row


# ---- evaluate ------------------------------------------------------------------------------------
def evaluate(checkpoint: str, data: Optional[str] = None, split: str = "val", device: str = "auto",
             out: Optional[str] = None) -> dict:
    """The metrics of checkpoint `checkpoint` on a data set, with the report's figures (report.html, plots/,
    per_class.json, evaluation.json in `out`).

    data: config key `data`'s form (a built-in set, a folder, a .npz); default: the run's. split: val, the run's
    validation data (the data's held-out split, else the share val_fraction of its training data the run held out,
    with the run's seed); test, the data's held-out split only (t10k files, x_test/x_val arrays, a val/ or test/
    folder; Fashion-MNIST's 10,000 test images), an error when it has none."""
    if split not in SPLITS:
        raise ConfigError(f"split '{split}' is not one of {', '.join(SPLITS)}")
    if not os.path.isfile(checkpoint):
        raise ConfigError(f"checkpoint '{checkpoint}' does not exist")
    model = load(checkpoint, device)
    config = model.config
    name = config.data if data is None else data
    kwargs = config.data_kwargs if name == config.data else {
        k: v for k, v in config.data_kwargs.items() if k in ("channels", "size", "threads", "on_error")}
    _, held_out = load_data(name, kwargs, config.val_fraction if split == "val" else 0.0, config.seed)
    if held_out is None:
        raise ConfigError(f"data '{name}' has no held-out test split (t10k-* IDX files, x_test/x_val arrays, a test/ "
                          "or val/ folder); use split val for the run's validation share of its training data")
    normalization = model.normalization
    _, val_set = data_sets(config, None, held_out, normalization, model.device)
    result = evaluation_pass(model.module, config, val_set, model.device)
    if out is None:
        parent = os.path.dirname(os.path.abspath(checkpoint))
        root = os.path.dirname(parent) if os.path.basename(parent) == "checkpoints" else parent
        out = os.path.join(root, f"evaluate-{split}")
    page = Page(out)
    summary = {"checkpoint": os.path.abspath(checkpoint), "data": name, "split": split, "samples": len(result),
               "device": str(model.device), "metrics": result.metrics}
    page.table("Evaluation", [(k, v) for k, v in summary.items() if k != "metrics"])
    rows = prediction_sections(page, result, model.classes, normalization, model.module, config, model.device)
    if rows is not None:
        write_json(os.path.join(out, "per_class.json"), rows)
        summary["per_class"] = rows
    summary["report"] = page.write(f"gpucore evaluate: {os.path.basename(checkpoint)} on {name} ({split})")
    write_json(os.path.join(out, "evaluation.json"), summary)
    return summary
