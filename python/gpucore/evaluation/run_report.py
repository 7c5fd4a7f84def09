"""A run's report: report.html, plots/ and per_class.json in the run directory, written at the end of
training (config key `report`) and by `gpucore report RUN_DIR` for any run, an interrupted one too.

The model shown is the run's best checkpoint (best.pt, else last.pt, else interrupted.pt), evaluated on the
run's validation data by evaluation_pass, the engine's own evaluation."""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
import warnings
from typing import List, Optional, Set, Union

from torch import nn

from ..checkpoint import load_checkpoint, write_json
from ..data.builtin import is_python_data
from ..data.labeled_data import LabeledData
from ..data.epoch_data import EpochData
from ..device.select import select_device
from ..errors import ConfigError
from ..redact import masked_values
from ..report import plots
from ..report.page import Page
from ..report.sections import prediction_sections, train_batch_section
from ..run_files import CHECKPOINTS, METRICS, PER_CLASS, PLOTS, REPORT, REPORT_CHECKPOINTS, STATS, labelled
from ..run_history import samples_per_second
from .evaluation_pass import data_sets, evaluation_pass
from .load import from_payload, path_argument
from .run_data import DATA_SET_OBJECTS, check_classes, chosen_data

def best_checkpoint(run_dir: str) -> str:
    folder = os.path.join(run_dir, CHECKPOINTS)
    for name in REPORT_CHECKPOINTS:
        if os.path.isfile(os.path.join(folder, name)):
            return os.path.join(folder, name)
    raise ConfigError(f"run directory '{run_dir}' has no checkpoint ({', '.join(REPORT_CHECKPOINTS)} in {folder}): the "
                      "run ended before its first epoch did")


def write_report(run_dir: str, device: str = "auto", module: Union[None, str, nn.Module] = None,
                 data: Union[None, str, os.PathLike, LabeledData, tuple, object] = None,
                 split: Optional[str] = None) -> str:
    """report.html, plots/ and per_class.json in a run directory, from its files (training_stats.json,
    metrics.jsonl, the best checkpoint, the config's data); with `data` (or a split other than val) a page of the same
    run on that data BESIDE it: report-LABEL.html, plots-LABEL/ and per_class-LABEL.json (LABEL: the data's folder or
    file name, with -SPLIT for a split other than all; for the run's own data the split), so that nothing of the run's
    own report changes. The page is drawn in a temporary folder first and replaces the one it is written over only when
    it draws every figure the old one has: a report is never replaced by a worse one.

    Args:
        run_dir: the run directory.
        device: where to evaluate the best checkpoint (auto, cpu, cuda, ...).
        module: the model to take the checkpoint's weights instead of rebuilding it from the config: in a
            training process the run's model; for a run whose model was given in Python and cannot be rebuilt
            by name, that model or 'package.module:factory' (see gpucore.load).
        data: what config key data takes (a built-in set, a .npz, a folder: class subfolders, images/ and masks/,
            ...; read with the run's channels and size), or a data set given in Python: a gpucore data set
            (read_segmentation(...), read_image_folder(...), from_tensors(...)), (inputs, targets) tensors, a torch
            Dataset or a Hugging Face dataset (read as gpucore.train reads them); in a training process the run's
            own (training, validation) sets (EpochData), served as their plans say, not planned again. Needed for a
            run whose data was given in Python (its config says data: python:train_data).
        split: the samples of the data the page scores, as gpucore.evaluate's split: all (the default for data
            given), val (the run's validation samples; the default without data), test or train.

    Returns:
        The path of the page written: report.html, or report-LABEL.html beside it.

    Raises:
        ConfigError: a run_dir that is not a path or not a run directory; a model the config cannot rebuild and none
            given; data of another kind, or that does not fit the model; a split that does not apply to it; a
            validation pass that fails (nothing is written); a report that would lack figures the existing page has
            (that one is kept, unchanged).
    """
    started = time.perf_counter()
    run_dir = os.path.abspath(path_argument(run_dir, "write_report's run_dir",
                                            "a run directory's path (str or os.PathLike)"))
    stats_path = os.path.join(run_dir, STATS)
    if not os.path.isfile(stats_path):
        raise ConfigError(f"'{run_dir}' is not a gpucore run directory: it has no {STATS}")
    with open(stats_path, encoding="utf-8") as handle:
        stats = json.load(handle)
    checkpoint = best_checkpoint(run_dir)
    payload = load_checkpoint(checkpoint)
    model = from_payload(payload, checkpoint, select_device(device).device, module)
    config, target, module = model.config, model.device, model.module
    classes, normalization = model.classes, model.normalization
    no_data, chosen = None, None
    if isinstance(data, tuple) and len(data) == 2 and isinstance(data[0], EpochData):
        train_set, val_set = data  # the training process's own sets: the batches the run was served
    elif data is None and split in (None, "val") and is_python_data(config.data):
        no_data = (f"the run's data was given to gpucore.train in Python (data: {config.data}) and cannot be read "
                   "back: pass --data DATA (a built-in data set, a folder or a .npz file; in Python "
                   f"gpucore.write_report(run_dir, data=...) also takes {DATA_SET_OBJECTS})")
        train_set = val_set = None
    else:
        chosen = chosen_data(model, data, split, "write_report's data")
        check_classes(chosen.name, chosen.data, model)
        train_set, val_set = data_sets(model, chosen.train, chosen.data)
    label = chosen.label if chosen is not None and (data is not None or chosen.split != "val") else None
    report, plots_folder, per_class = ((REPORT, PLOTS, PER_CLASS) if label is None
                                       else (labelled(name, label) for name in (REPORT, PLOTS, PER_CLASS)))

    temporary = tempfile.mkdtemp(prefix=".report-", dir=run_dir)
    try:
        page = Page(temporary)
        page.table("The run", _facts(stats, os.path.basename(checkpoint), payload["epoch"], model.weights))
        if label is not None:
            page.table(f"Scored on {chosen.name} ({chosen.split})",
                       [("data", chosen.name), ("split", chosen.split), ("samples", chosen.where),
                        ("the run's own report", REPORT)])
        skipped = stats.get("skipped_files") or []
        if skipped:
            shown = [entry.split(": ", 1) + [""] * (": " not in entry) for entry in skipped[:_FILES_LISTED]]
            more = [(f"... and {len(skipped) - _FILES_LISTED} more (training_stats.json's skipped_files)", "")]
            page.table(f"Files left out ({len(skipped)})", shown + (more if len(skipped) > _FILES_LISTED else []),
                       ("file", "why"))
        history = _history(run_dir, stats)
        if history:
            page.figure("Loss, metrics and learning rate per epoch", "curves.png",
                        lambda path: plots.curves(history, path))
        rows = None
        if no_data is not None:
            page.failures.append(f"the validation figures and one training batch: {no_data}")
        if val_set is not None:
            result = page.attempt("the validation pass",
                                  lambda: evaluation_pass(module, config, model.task, val_set, target))
            if result is None:  # a page without the model's predictions is no report: say why, write nothing
                raise ConfigError(f"report of '{run_dir}': {page.failures[-1]}; {report} was not written")
            rows = prediction_sections(page, result, classes, normalization, module, config, target)
        if train_set is not None:
            train_batch_section(page, train_set, normalization, classes, model.task)
        page.table("Config", sorted(masked_values(config.to_dict()).items()), ("key", "value"))
        title = f"gpucore run {os.path.basename(run_dir)}"
        drawn = page.write(title if label is None else f"{title} on {chosen.name} ({chosen.split})")
        path = os.path.join(run_dir, report)
        lost = sorted(figures(path) - figures(drawn))
        if lost:
            why = no_data or "; ".join(" ".join(f.split()) for f in page.failures) or "not drawn"
            raise ConfigError(f"report of '{run_dir}': the new report would lack {', '.join(lost)}, which its "
                              f"{report} has ({why}); kept {path} as it was")
        os.makedirs(os.path.join(run_dir, plots_folder), exist_ok=True)
        for name in os.listdir(page.plots):
            os.replace(os.path.join(page.plots, name), os.path.join(run_dir, plots_folder, name))
        if rows is not None:
            write_json(os.path.join(run_dir, per_class), rows)
        os.replace(drawn, path)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    if label is None:  # training_stats.json names the run's own report, and the time it took
        stats["report"] = path
        stats.setdefault("seconds", {})["report"] = time.perf_counter() - started  # beside the run's own phases
        write_json(stats_path, stats)
    return path


# The most skipped files the page lists (training_stats.json lists all).
_FILES_LISTED = 50


def figures(report: str) -> Set[str]:
    """The figures (plots/ file names) a report.html shows; none when there is no such file."""
    try:
        with open(report, encoding="utf-8") as handle:
            return set(re.findall(r'<img alt="([^"]+)"', handle.read()))
    except OSError:
        return set()


def report_after_training(run) -> Optional[str]:
    """The end of `gpucore.train`: the report of the finished (or interrupted) run (its run directory, model part on
    its device, and the data part's own training and validation sets: their plans made once, when the run was set
    up); errors become a warning."""
    run_dir = run.run_dir.path
    try:
        return write_report(run_dir, str(run.placement.device), run.model.module,
                            (run.data.train_set, run.data.val_set))
    except Exception as exc:  # noqa: BLE001 - the training itself succeeded
        warnings.warn(f"report: the run report was not written: {type(exc).__name__}: {exc}", RuntimeWarning,
                      stacklevel=2)
    except KeyboardInterrupt:  # the run's files are complete; the page can be drawn later
        warnings.warn(f"report: interrupted; write it with  gpucore report {run_dir}", RuntimeWarning,
                      stacklevel=2)
    return None


def _history(run_dir: str, stats: dict) -> List[dict]:
    path = os.path.join(run_dir, METRICS)
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]
    return list(stats.get("epochs") or [])


def _facts(stats: dict, checkpoint: str, epoch: int, weights: str = "raw") -> List[tuple]:
    history = stats.get("epochs") or []
    rate = samples_per_second(history)
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
        ("model shown", f"checkpoints/{checkpoint} (after epoch {epoch})"
                        f"{', its EMA weights (the monitored ones)' if weights == 'ema' else ''}"),
        ("skipped files", len(stats.get("skipped_files") or [])), ("torch", stats.get("torch")),
    ]
    return [(name, value) for name, value in facts if value is not None]  # no error, no GPU: no row


