"""gpucore.evaluate and `gpucore evaluate CHECKPOINT`: a checkpoint's metrics on a data set, with the
report's figures."""
from __future__ import annotations

import os
from typing import Optional, Union

from torch import nn

from ..checkpoint import write_json
from ..data.builtin import class_names, is_python_data
from ..data.labeled_data import LabeledData
from ..errors import ConfigError
from ..report.page import Page
from ..tasks import Classification
from ..report.sections import prediction_sections
from ..run_files import CHECKPOINTS, EVALUATION, PER_CLASS
from .evaluation_pass import data_sets, evaluation_pass
from .load import load
from .run_data import DATA_SET_OBJECTS, describe, given_data_set, is_named, read_named

SPLITS = ("val", "test")


def evaluate(checkpoint: str, data: Union[None, str, os.PathLike, LabeledData, tuple] = None, split: str = "val",
             device: str = "auto", out: Optional[str] = None, model: Union[None, str, nn.Module] = None) -> dict:
    """The metrics of a checkpoint on a data set, with the report's figures (report.html, plots/, per_class.json,
    evaluation.json in `out`).

    Args:
        checkpoint: a gpucore checkpoint path.
        data: what config key `data` takes (a built-in set, a .npz, a folder: class subfolders, images/ and
            masks/, ...), read with the run's channels and size; or a gpucore data set (read_segmentation(...),
            read_image_folder(...), from_tensors(...)) or (inputs, targets) tensors, evaluated whole. Default: the
            run's (needed for a run whose data was given to gpucore.train in Python: its config says
            data: python:train_data).
        split: for data named by `data`: "val", the run's validation data (the data's held-out split, else the
            share val_fraction, 0.1 when unset, of its training data the run held out, with the run's seed);
            "test", the data's held-out split only. A data set given as an object has no split: all of it is
            evaluated (evaluation.json says split: all).
        device: auto, cpu, cuda, cuda:N or mps.
        out: the folder for the files (default: RUN_DIR/evaluate-SPLIT; evaluate-all for a data set object).
        model: for a run whose model its config cannot rebuild: an nn.Module or 'package.module:factory' (see
            gpucore.load).

    Returns:
        The summary written to evaluation.json: checkpoint, data, split, samples, metrics, the loss its metrics' loss
        is (loss; with loss_note when the run trained with a loss callable, which cannot be rebuilt), per class.

    Raises:
        ConfigError: split test on data without a held-out split or with a data set object, data that does not
            fit the model (masks for a classifier, class labels for segmentation), a run whose data or model came
            from Python and is not given.
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
                          f"gpucore.evaluate(checkpoint, data=...) also takes {DATA_SET_OBJECTS})")
    if is_named(data):
        name, _, held_out = read_named(model, data, config.val_fraction if split == "val" else 0.0)
        if held_out is None:
            raise ConfigError(f"data '{name}' has no held-out test split (t10k-* IDX files, x_test/x_val arrays, a "
                              "test/ or val/ folder); use split val for the run's validation share of its training "
                              "data")
    else:
        if split != "val":
            raise ConfigError(f"split '{split}' picks a part of data named by path or name; a data set given as an "
                              "object is evaluated whole: leave split out")
        held_out = given_data_set(data, model, "gpucore.evaluate's data")
        name, split = describe(held_out), "all"
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
               "device": str(model.device), "metrics": result.metrics, **loss_facts(config, model.task)}
    page.table("Evaluation", [(k, v) for k, v in summary.items() if k != "metrics"])
    rows = prediction_sections(page, result, model.classes, normalization, model.module, config, model.device)
    if rows is not None:
        write_json(os.path.join(out, PER_CLASS), rows)
        summary["per_class"] = rows
    summary["report"] = page.write(f"gpucore evaluate: {os.path.basename(checkpoint)} on {name} ({split})")
    write_json(os.path.join(out, EVALUATION), summary)
    return summary


def loss_facts(config, task) -> dict:
    """Which loss an evaluation's metrics report (loss), and, for a run that trained with a loss callable, that this is
    not the run's own loss (loss_note): a callable cannot be rebuilt from a checkpoint."""
    used = config.loss + (" with class weights " + ", ".join(f"{w:.4g}" for w in task.class_weights)
                          if task.class_weights is not None else "")
    if config.loss_callable is None:
        return {"loss": used}
    return {"loss": used, "loss_note": f"the run trained with the loss callable {config.loss_callable}, which cannot "
                                       f"be rebuilt from its checkpoint: this loss is the built-in {used}, not the "
                                       "loss of the run's val_loss"}


def _check_classes(name: str, data, model, checkpoint: str) -> None:
    """A classifier's data must name its classes as the checkpoint does, in the same order. Image folders are
    labelled by the checkpoint's class names as they are read (a folder may lack a class; one the model lacks is
    refused there); built-in sets carry their own list, which must be the checkpoint's."""
    classes = getattr(data, "classes", None) or class_names(name, {})
    if not isinstance(model.task, Classification) or not model.classes or not classes:
        return
    if list(classes) != list(model.classes):
        raise ConfigError(f"data '{name}' has classes {', '.join(map(str, classes))}, but the model of '{checkpoint}' "
                          f"was trained on {', '.join(map(str, model.classes))}: evaluate on data with the same class "
                          "subfolders (every class, the same names)")
