"""The validation loop of a training run: after each epoch, one pass over the validation set with the model (and
its EMA, config key ema_decay) in eval mode, test-time augmentation as config key tta asks, through the engine, whose
evaluation reads the metrics on the host once per pass."""
from __future__ import annotations

import time

from ..models.tta import with_tta
from .ema import VAL_EMA


class ValidationLoop:
    def __init__(self, run):
        self.run = run

    def run_epoch(self, epoch: int) -> dict:
        """Epoch `epoch`'s (from 0) validation metrics, val_* (and val_ema_*), and val_time_s; {} without a
        validation set."""
        run = self.run
        if run.val_set is None:
            return {}
        started = time.perf_counter()
        run.module.eval()
        record = {}
        models = [("val", run.forward)] + ([(VAL_EMA, run.ema)] if run.ema is not None else [])
        for split, model in models:
            stats = run.engine.evaluate(run.val_set.epoch(epoch), with_tta(model, run.config.tta), run.loss)
            record.update({f"{split}_{k}": v for k, v in stats["metrics"].items()})
        record["val_time_s"] = time.perf_counter() - started  # the metrics are on the host: the work is done
        return record
