"""gpucore.evaluate and `gpucore evaluate CHECKPOINT`: a checkpoint's metrics on a data set, with the
report's figures."""
from __future__ import annotations

import os
from typing import Optional, Union

from torch import nn

from ..checkpoint import write_json
from ..data.builtin import class_names, is_python_data, load_data
from ..errors import ConfigError
from ..report.page import Page
from ..tasks import Classification
from ..report.sections import prediction_sections
from ..run_files import CHECKPOINTS, EVALUATION, PER_CLASS
from .evaluation_pass import data_sets, evaluation_pass
from .load import load

SPLITS = ("val", "test")


def evaluate(checkpoint: str, data: Optional[str] = None, split: str = "val", device: str = "auto",
             out: Optional[str] = None, model: Union[None, str, nn.Module] = None) -> dict:
    """The metrics of a checkpoint on a data set, with the report's figures (report.html, plots/, per_class.json,
    evaluation.json in `out`).

    Args:
        checkpoint: a gpucore checkpoint path.
        data: what config key `data` takes (a built-in set, a folder, a .npz); default: the run's (needed for a
            run whose data was given to gpucore.train in Python: its config says data: python:train_data).
        split: "val", the run's validation data (the data's held-out split, else the share val_fraction, 0.1 when
            unset, of its training data the run held out, with the run's seed); "test", the data's held-out split
            only.
        device: auto, cpu, cuda, cuda:N or mps.
        out: the folder for the files (default: RUN_DIR/evaluate-SPLIT).
        model: for a run whose model its config cannot rebuild: an nn.Module or 'package.module:factory' (see
            gpucore.load).

    Returns:
        The summary written to evaluation.json: checkpoint, data, split, samples, metrics, per class.

    Raises:
        ConfigError: split test on data without a held-out split, data that does not fit the model, a run whose
            data or model came from Python and is not given.
    """
    if split not in SPLITS:
        raise ConfigError(f"split '{split}' is not one of {', '.join(SPLITS)}")
    if not os.path.isfile(checkpoint):
        raise ConfigError(f"checkpoint '{checkpoint}' does not exist")
    model = load(checkpoint, device, model)
    config = model.config
    if data is None and is_python_data(config.data):
        raise ConfigError(f"checkpoint '{checkpoint}' was trained on data given to gpucore.train in Python "
                          f"(its config says data: {config.data}), which cannot be read back: pass the data to "
                          "evaluate on, --data DATA (a built-in data set, a folder or a .npz file; in Python "
                          "gpucore.evaluate(checkpoint, data=...))")
    name = config.data if data is None else data
    kwargs = config.data_kwargs if name == config.data else {
        k: v for k, v in config.data_kwargs.items()
        if k in ("channels", "size", "threads", "on_error", "exif_orientation")}
    _, held_out = load_data(name, kwargs, config.val_fraction if split == "val" else 0.0, config.seed)
    if held_out is None:
        raise ConfigError(f"data '{name}' has no held-out test split (t10k-* IDX files, x_test/x_val arrays, a test/ "
                          "or val/ folder); use split val for the run's validation share of its training data")
    _check_classes(name, held_out, model, checkpoint)
    normalization = model.normalization
    _, val_set = data_sets(config, None, held_out, normalization, model.device)
    result = evaluation_pass(model.module, config, model.task, val_set, model.device)
    if out is None:
        parent = os.path.dirname(os.path.abspath(checkpoint))
        root = os.path.dirname(parent) if os.path.basename(parent) == CHECKPOINTS else parent
        out = os.path.join(root, f"evaluate-{split}")
    page = Page(out)
    summary = {"checkpoint": os.path.abspath(checkpoint), "data": name, "split": split, "samples": len(result),
               "device": str(model.device), "metrics": result.metrics}
    page.table("Evaluation", [(k, v) for k, v in summary.items() if k != "metrics"])
    rows = prediction_sections(page, result, model.classes, normalization, model.module, config, model.device)
    if rows is not None:
        write_json(os.path.join(out, PER_CLASS), rows)
        summary["per_class"] = rows
    summary["report"] = page.write(f"gpucore evaluate: {os.path.basename(checkpoint)} on {name} ({split})")
    write_json(os.path.join(out, EVALUATION), summary)
    return summary


def _check_classes(name: str, data, model, checkpoint: str) -> None:
    """A classifier's data must name its classes as the checkpoint does, in the same order: a folder's labels are
    the indices of its own sorted subfolders, which the model's outputs would otherwise be scored against."""
    classes = getattr(data, "classes", None) or class_names(name, {})
    if not isinstance(model.task, Classification) or not model.classes or not classes:
        return
    if list(classes) != list(model.classes):
        raise ConfigError(f"data '{name}' has classes {', '.join(map(str, classes))}, but the model of '{checkpoint}' "
                          f"was trained on {', '.join(map(str, model.classes))}: evaluate on data with the same class "
                          "subfolders (every class, the same names)")
