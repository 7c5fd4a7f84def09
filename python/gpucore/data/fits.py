"""Whether data fits a task and a model, checked before anything trains or is scored: training (training/setup_data.py,
training/setup_model.py) and evaluation (evaluation/run_data.py) call these same checks. Each mismatch would otherwise
fail at the first step (a shape error, a CUDA device assert) or, worse, be scored as something it is not; each is a
ConfigError naming the data, the model and what would fit (class counts a warning where nothing is lost)."""
from __future__ import annotations

import warnings
from typing import Callable, List, Optional, Sequence

import torch
from torch import nn

from ..errors import ConfigError
from ..models.surgery import classifier_head, output_count
from ..tasks import Classification, MultiLabel, Task
from .image_files import ImageFiles


def check_fits_task(name: str, task, *data_sets) -> None:
    """The image files read from folder `name` (the data sets, None for none) fit `task`: masks (a segmentation
    layout) need a task that trains on masks, class subfolders one that predicts something other than masks. Either
    mismatch would otherwise fail at the first step with a shape error, or score class labels as masks."""
    for data in data_sets:
        if not isinstance(data, ImageFiles):
            continue
        if data.mask_paths is not None and not task.trains_on_masks:
            raise ConfigError(_not_on_masks(name, task, ""))
        if data.mask_paths is None and data.classes is not None and task.predicts_masks:
            raise ConfigError(f"data '{name}' holds images of classes ({', '.join(data.classes[:5])}"
                              f"{', ...' if len(data.classes) > 5 else ''}), but loss '{task.loss}' ({task.name}) "
                              "trains on masks: give a segmentation folder (images/ and masks/, or train/ and val/ "
                              "each holding them), or set loss: cross_entropy for a classifier")


def check_class_count(task: Task, classes: Optional[List[str]], count: Optional[int], where: str) -> None:
    """Classification needs two classes at least: with one, every target is class 0, the loss is 0 from the first step
    and the accuracy 1, whatever the model learns. `count` is the data's (None: it does not say), `where` names it."""
    if count is None or count >= 2 or not isinstance(task, Classification):
        return
    found = f"1 class ({classes[0]})" if classes else "1 class (id 0)" if count else "no classes"
    raise ConfigError(f"{where} has {found}; classification (loss {task.loss}) needs 2 classes at least: "
                      "one subfolder of images per class, or two labels in a label file")


def check_outputs(module: nn.Module, task: Task, classes: Optional[List[str]], count: Optional[int], whose: str,
                  given: bool) -> None:
    """A classifier must have an output per class of the data (`count`): fewer is a ConfigError, more a warning
    (outputs no target ever names); a multi-label model exactly one per label (the loss pairs them). Only where the
    data says its class count and gpucore finds the model's head (registry.output_count). `whose` names the model;
    `given`: a model given in Python (its head is the fix), else one built by name (its model_kwargs)."""
    if count is None:
        return
    outputs = output_count(module)
    if outputs is None or outputs == count:
        return
    fix = ("give it a head of that many outputs" if given
           else f"set model_kwargs num_classes: {count} (or leave num_classes out: it is taken from the data)")
    named = f"{count} classes ({_listed(classes) if classes else f'ids 0 to {count - 1}'})"
    if outputs < count or isinstance(task, MultiLabel):
        raise ConfigError(f"{whose} has {outputs} outputs, but the data has {named}"
                          f"{', one output each for ' + task.name if isinstance(task, MultiLabel) else ''}: {fix}")
    warnings.warn(f"{whose} has {outputs} outputs, but the data has {named}: outputs {count} to {outputs - 1} name no "
                  f"class; {fix}", stacklevel=5)  # train()'s caller: here, setup_model, build_run, train


def check_mask_classes(module: nn.Module, task: Task, whose: str, *data_sets) -> None:
    """Every mask value of the segmentation pairs among `data_sets` is a class the model scores, or ignore_index
    (cross_entropy; losses of one output per pixel take 0 and 1): ConfigError naming the file and value before the
    first step, where torch would fail (a CUDA device assert) or a metric count it. The model's outputs are its
    classifier head's (registry.output_count), else the channels of its output for an input of zeros of the first
    image's shape; a model that shows neither is left to the loss."""
    mask_sets = [data for data in data_sets if isinstance(data, ImageFiles) and data.mask_paths is not None]
    if not mask_sets:
        return
    if task.loss == "cross_entropy":
        outputs = output_count(module)
        if outputs is None:
            probed = probe_output(module, mask_sets[0].image_shape())
            if probed is None or probed.dim() != 4:
                return
            outputs = probed.shape[1]
        classes, ignore_index, whose = outputs, task.ignore_index, f"{whose} ({outputs} outputs)"
    else:
        classes, ignore_index, whose = 2, None, f"{whose} (loss {task.loss})"
    for data in mask_sets:
        data.check_mask_classes(classes, ignore_index, whose)


def check_model_segments(name: str, task, whose: str, module: nn.Module,
                         probe: Callable[[], Optional[torch.Tensor]], *data_sets) -> None:
    """Masks in the data sets (read from folder `name`) for a task that segments or not by its outputs' shape (loss
    cross_entropy, bce_with_logits) need a model of per-pixel outputs: a classifier (classifier_evidence, from
    `probe()`, the model's output for an input of zeros, and `module`'s head) would fail at the first step with a
    shape error. `whose` names the model."""
    masks = any(isinstance(data, ImageFiles) and data.mask_paths is not None for data in data_sets)
    if not masks or task.predicts_masks or not task.trains_on_masks:
        return
    evidence = classifier_evidence(probe(), module)
    if evidence is not None:
        raise ConfigError(_not_on_masks(name, task, f" with {whose}, a classifier ({evidence})"))


def classifier_evidence(output: Optional[torch.Tensor], module: nn.Module) -> Optional[str]:
    """Why the model is a classifier, or None: its `output` for one input of zeros of the data's shape is one row per
    image; or, where it took no such input (None: another size, images at their own sizes), `module`'s head is a
    Linear layer."""
    if output is not None:
        return f"outputs of shape {tuple(output.shape)}: one row per image" if output.dim() == 2 else None
    head = classifier_head(module)
    if head is not None and isinstance(module.get_submodule(head), nn.Linear):
        return f"its head {head} is a Linear layer of {module.get_submodule(head).out_features} outputs"
    return None


def probe_output(model: Callable[[torch.Tensor], object], input_shape: Optional[Sequence[int]],
                 dtype: torch.dtype = torch.float32) -> Optional[torch.Tensor]:
    """The output of `model` (an nn.Module, run in eval mode: no BatchNorm statistics move; or a loaded model) for one
    input of zeros of the data's shape, or None where it takes no such input (another size, images at their own sizes)
    or gives no tensor."""
    if not input_shape or not all(input_shape):
        return None
    module = model if isinstance(model, nn.Module) else None
    training = module.training if module is not None else False
    try:
        with torch.no_grad():
            if module is not None:
                module.eval()
            output = model(torch.zeros(1, *input_shape, dtype=dtype))
    except Exception:  # noqa: BLE001 - only a probe; the caller, else the first step, tells
        return None
    finally:
        if module is not None:
            module.train(training)
    output = output[0] if isinstance(output, (tuple, list)) else output
    return output if isinstance(output, torch.Tensor) else None


def _not_on_masks(name: str, task, why: str) -> str:
    return (f"data '{name}' holds images and their masks (segmentation), but loss '{task.loss}' ({task.name}) does "
            f"not train on masks{why}: set loss: dice_bce (or bce_with_logits) for foreground masks, cross_entropy for "
            "masks of class ids, and a segmentation model (e.g. smp:Unet; docs/guides/data.md), or give a folder of "
            "class subfolders")


def _listed(classes: List[str], most: int = 5) -> str:
    return ", ".join(classes[:most]) + (f", ... ({len(classes) - most} more)" if len(classes) > most else "")
