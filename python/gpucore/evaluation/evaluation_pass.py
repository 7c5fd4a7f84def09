"""A model's predictions on a data set, from one pass of the engine's evaluation (`_C.evaluate`, which builds no
optimizer): the metrics exactly as a run reports them, and per sample the targets, the outputs, the decoded predictions
(by the run's task), the confidence and the loss. The run report (end of training, `gpucore report`) and
`gpucore evaluate` both use this one pass.

The engine pulls the batches through a recording iterator (targets) and calls a recording forward
(outputs); the inputs of chosen samples are fetched again by `inputs(indices)` (a second pass that runs
no model), so a large data set never sits in host memory whole.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import torch
from torch import nn

from .. import _C
from ..device.select import resolve_precision
from ..errors import ConfigError
from ..models.tta import with_tta
from ..tasks import Task
from ..tasks.sequences import CTCSequence, WordErrors, pad_sequences, word_errors
from ..data.epoch_data import EpochData, training_set, validation_set
from ..device.placement import forward_config, place_model


@dataclass
class EvaluationResult:
    """One evaluation pass's metrics and, per sample, what the task needs to show them (the report, gpucore
    evaluate). Not to be confused with gpucore.Predictions, what `gpucore.predict` returns for new inputs."""

    metrics: dict  # the engine's metrics of the pass: loss, accuracy, ... (no split prefix), and the task's from the
    # decoded predictions (CTC's cer)
    targets: torch.Tensor  # CPU, as the data holds them
    predicted: torch.Tensor  # CPU, the task's decoding: classes, per-head classes, CTC sequences or masks
    outputs: Optional[torch.Tensor]  # CPU float32 raw outputs; None where the task keeps only the decoded ones
    task: Task
    data: EpochData  # the data set, to fetch the inputs of chosen samples
    output_channels: int  # the model's outputs per sample (classes; for masks, per pixel)

    def __len__(self) -> int:
        return self.targets.shape[0]

    def confidence(self) -> Optional[torch.Tensor]:
        return None if self.outputs is None else self.task.confidence(self.outputs)

    def sample_losses(self) -> Optional[torch.Tensor]:
        return None if self.outputs is None else self.task.sample_losses(self.outputs, self.targets)

    def correct(self) -> torch.Tensor:
        """Per sample: the prediction is right (all heads, the whole sequence, every pixel)."""
        return self.task.correct(self.predicted, self.targets)

    def word_errors(self) -> WordErrors:
        """CTC: each sample's substitutions, deletions and insertions against its target, and over all samples which
        target word (gloss) was replaced by which, deleted or inserted (tasks/sequences.py's WordErrors).

        Raises:
            ConfigError: a task that does not read sequences by CTC.
        """
        if not isinstance(self.task, CTCSequence):
            raise ConfigError(f"word errors are CTC's (loss ctc); this evaluation's task is {self.task.name}")
        return word_errors(self.predicted, self.task.labels(self.targets))

    def inputs(self, indices: Sequence[int]) -> torch.Tensor:
        """The model inputs (as the engine got them: standardised, on the device) of samples `indices`, in that order."""
        wanted = {int(i): position for position, i in enumerate(indices)}
        found: List[Optional[torch.Tensor]] = [None] * len(wanted)
        start = 0
        for inputs, _ in self.data.batches():
            for index in range(start, start + inputs.shape[0]):
                if index in wanted:
                    found[wanted[index]] = inputs[index - start]
            start += inputs.shape[0]
            if all(f is not None for f in found):
                break
        found = [f for f in found if f is not None]
        if len({f.shape for f in found}) > 1:  # clips of different lengths: padded with zeros, as their batches were
            return nn.utils.rnn.pad_sequence(found, batch_first=True)
        return torch.stack(found) if found else torch.empty(0)


class _Recording:
    """The data's batches for the engine (with a len()), keeping each batch's targets on the host."""

    def __init__(self, data: EpochData):
        self.data, self.targets = data, []

    def __len__(self) -> int:
        return self.data.total_batches()

    def __iter__(self):
        for inputs, targets in self.data.batches():
            self.targets.append(targets.detach().to("cpu"))
            yield inputs, targets


def evaluation_pass(module: nn.Module, config, task: Task, data: EpochData, device: torch.device) -> EvaluationResult:
    """One evaluation pass of `module` (in eval mode) over `data` by an engine built from `config` (precision,
    top_k and channels-last as the run had them) and `task` (its loss and decoding); the module itself is left as
    it was."""
    policy = resolve_precision(config.precision, device, tf32=config.tf32,
                               cudnn_benchmark=config.cudnn_benchmark, deterministic=config.deterministic)
    module = copy.deepcopy(module).eval()
    task = task.for_data(data.data, module)
    settings = forward_config(task, str(device), policy, place_model(module, config.channels_last, device, policy),
                              config.top_k)
    evaluated = with_tta(module, config.tta)
    outputs, decoded = [], []
    rules = [task]  # the task's rules for outputs of the shape the model gives, settled by the first batch
    channels = [0]
    recording = _Recording(data)

    def forward(inputs: torch.Tensor) -> torch.Tensor:
        output = evaluated(inputs)
        scores = output.detach().float()
        if not decoded:
            rules[0] = task.for_outputs(scores)
            channels[0] = scores.shape[1] if scores.dim() > 1 else 1
        # The engine calls the forward on the batch the recording yielded last: its targets (CTC's clip lengths).
        decoded.append(rules[0].decode(scores, recording.targets[-1]).to("cpu"))
        if rules[0].keeps_outputs:
            outputs.append(scores.to("cpu"))
        return output

    stats = _C.evaluate(_C.PythonBatches(recording, device), forward, settings)
    if not recording.targets:
        raise ConfigError(f"no samples to evaluate in {data.description}")
    targets, predicted = cat_padded(recording.targets), cat_padded(decoded)
    metrics = {**stats["metrics"], **rules[0].decoded_metrics(predicted, targets)}
    return EvaluationResult(metrics=metrics, targets=targets, predicted=predicted,
                            outputs=cat_padded(outputs) if outputs else None, task=rules[0], data=data,
                            output_channels=channels[0])


def cat_padded(parts: List[torch.Tensor]) -> torch.Tensor:
    """Batches concatenated; sequences of different lengths padded first: CTC's decodings with -1, the outputs of
    clips of different lengths (N, steps, classes) with zeros past their steps."""
    if parts[0].dim() >= 2 and len({p.shape[1:] for p in parts}) > 1:
        width = max(p.shape[1] for p in parts)
        if parts[0].is_floating_point():
            parts = [nn.functional.pad(p, (0, 0) * (p.dim() - 2) + (0, width - p.shape[1])) for p in parts]
        else:
            parts = [pad_sequences(p, width) for p in parts]
    return torch.cat(parts)


def data_sets(model, train_data, val_data) -> Tuple[Optional[EpochData], Optional[EpochData]]:
    """A loaded model's training set (as its run served it: augmented, standardised) and validation set (through the
    deterministic form of the model's plan), each planned once here, standardised with the checkpoint's statistics,
    on the model's device; None for data not given."""
    config, normalization, device = model.config, model.normalization, model.device
    train_set = training_set(train_data, config, device, normalization) if train_data is not None else None
    return train_set, validation_set(val_data, config, device, normalization, transforms=model.plan.forms)
