"""The validation loop of a training run: after each epoch, one pass over the validation set with the model (and
its EMA, config key ema_decay) in eval mode, test-time augmentation as config key tta asks, through the engine, whose
evaluation reads the metrics on the host once per pass."""
from __future__ import annotations

import time

from ..models.tta import with_tta
from .ema import VAL_EMA


class ValidationLoop:
    """Validation of the run's model part (setup_model.RunModel) on its data part's validation set, with the loss
    callable `loss` (None: the task's) and config key tta's test-time augmentation `tta`."""

    def __init__(self, data, model, loss, tta: str):
        self.data, self.model, self.loss, self.tta = data, model, loss, tta

    def run_epoch(self, epoch: int, engine) -> dict:
        """Epoch `epoch`'s (from 0) validation metrics, val_* (and val_ema_*), and val_time_s, through `engine`; {}
        without a validation set."""
        model, val_set = self.model, self.data.val_set
        if val_set is None:
            return {}
        started = time.perf_counter()
        model.module.eval()
        record = {}
        models = [("val", model.forward)] + ([(VAL_EMA, model.ema)] if model.ema is not None else [])
        for split, forward in models:
            stats = engine.evaluate(val_set.epoch(epoch), with_tta(forward, self.tta), self.loss)
            record.update({f"{split}_{k}": v for k, v in stats["metrics"].items()})
        record["val_time_s"] = time.perf_counter() - started  # the metrics are on the host: the work is done
        return record
