"""gpucore.evaluate and `gpucore evaluate CHECKPOINT`: a checkpoint's metrics on a data set, with the
report's figures."""
from __future__ import annotations

import os
from typing import Optional, Union

from torch import nn

from ..checkpoint import write_json
from ..data.labeled_data import LabeledData
from ..errors import ConfigError
from ..report.page import Page
from ..report.sections import prediction_sections
from ..run_files import CHECKPOINTS, EVALUATION, PER_CLASS
from .evaluation_pass import data_sets, evaluation_pass
from .load import LoadedModel, loaded_model, path_argument
from .run_data import check_classes, chosen_data
from .run_report import best_checkpoint


def evaluate(checkpoint: Union[str, os.PathLike, LoadedModel],
             data: Union[None, str, os.PathLike, LabeledData, tuple, object] = None, split: Optional[str] = None,
             device: str = "auto", out: Optional[str] = None, model: Union[None, str, nn.Module] = None) -> dict:
    """The metrics of a checkpoint on a data set, with the report's figures (report.html, plots/, per_class.json,
    evaluation.json in `out`).

    Args:
        checkpoint: a gpucore checkpoint path, a run directory (its best.pt, else last.pt, else interrupted.pt), or a
            gpucore.load result (LoadedModel: scored on its own device, as gpucore.predict scores it).
        data: what config key `data` takes (a built-in set, a .npz, a folder: class subfolders, images/ and
            masks/, train/ beside test/ or val/, ...), read with the run's channels and size; or a data set given in
            Python: a gpucore data set (read_segmentation(...), read_image_folder(...), from_tensors(...)),
            (inputs, targets) tensors, a torch Dataset or a Hugging Face dataset, read as gpucore.train reads them
            (data_kwargs image_key and label_key, the run's transforms). Default: the run's (needed for a run whose
            data was given to gpucore.train in Python: its config says data: python:train_data).
        split: which samples of the data: "all" (every one; the default when data is given), "val" (the samples the
            run validated on: the data's held-out split, else the share val_fraction of it the run held out with its
            seed, checked against what the checkpoint records of them; the default without data), "test" (the
            data's own held-out split: test/, else val/, beside train/; t10k-* IDX files; x_test/x_val arrays) or
            "train" (the data's own training split, else the share the run trained on). A split that does not apply
            to the data is a ConfigError naming those that do.
        device: auto, cpu, cuda, cuda:N or mps.
        out: the folder for the files (default: RUN_DIR/evaluate-SPLIT for the run's own data, RUN_DIR/evaluate-NAME
            for data given, NAME its folder's or file's name, with -SPLIT for a split other than all).
        model: for a run whose model its config cannot rebuild: an nn.Module or 'package.module:factory' (see
            gpucore.load); for a checkpoint path only.

    Returns:
        The summary written to evaluation.json: checkpoint, data (the name, the absolute path or the data set in
        words), split, samples (how many were scored), scored (which samples, in words), metrics, the loss its metrics'
        loss is (loss; with loss_note when the run trained with a loss callable, which cannot be rebuilt), per class.

    Raises:
        ConfigError: a split unknown or that does not apply to the data, data that does not fit the model (masks for
            a classifier, class labels for segmentation, other class names), a run whose data or model came from
            Python and is not given; a checkpoint that is none of the above, or a gpucore.load result with `model`.
    """
    if not isinstance(checkpoint, LoadedModel):
        checkpoint = path_argument(checkpoint, "gpucore.evaluate's checkpoint", "a checkpoint file's or run "
                                     "directory's path (str or os.PathLike) or a gpucore.load result (LoadedModel)")
        if os.path.isdir(checkpoint):
            checkpoint = best_checkpoint(checkpoint)
        if not os.path.isfile(checkpoint):
            raise ConfigError(f"checkpoint '{checkpoint}' does not exist")
    model = loaded_model(checkpoint, device, "gpucore.evaluate's checkpoint", model)
    checkpoint, config = model.checkpoint, model.config
    chosen = chosen_data(model, data, split, "gpucore.evaluate's data")
    check_classes(chosen.name, chosen.data, model)
    normalization = model.normalization
    _, val_set = data_sets(model, None, chosen.data)
    result = evaluation_pass(model.module, config, model.task, val_set, model.device)
    if out is None:
        parent = os.path.dirname(os.path.abspath(checkpoint))
        root = os.path.dirname(parent) if os.path.basename(parent) == CHECKPOINTS else parent
        out = os.path.join(root, f"evaluate-{chosen.label}")
    page = Page(out)
    summary = {"checkpoint": os.path.abspath(checkpoint), "data": chosen.name, "split": chosen.split,
               "samples": len(result), "scored": chosen.where, "device": str(model.device), "metrics": result.metrics,
               **loss_facts(config, model.task)}
    page.table("Evaluation", [(k, v) for k, v in summary.items() if k != "metrics"])
    rows = prediction_sections(page, result, model.classes, normalization, model.module, config, model.device)
    if rows is not None:
        write_json(os.path.join(out, PER_CLASS), rows)
        summary["per_class"] = rows
    summary["report"] = page.write(f"gpucore evaluate: {os.path.basename(checkpoint)} on {chosen.name} "
                                   f"({chosen.split})")
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
