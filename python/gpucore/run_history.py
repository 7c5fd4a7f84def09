"""A run's history: the rows of metrics.jsonl (one per epoch, training_stats.json's "epochs"), in one place: which of
their keys are no metric, and the figures read from the whole history. The fit loop writes the rows; the report,
TrainResult and `gpucore runs` read them."""
from typing import Optional, Sequence

# Counters the engine reports with the training metrics; a row holds them without a train_ prefix.
ENGINE_COUNTERS = ("lr", "loss_scale", "skipped_steps")
# Every key of a row that is no per-epoch metric (train_X, val_X, val_ema_X): the counters, the times, the memory.
NOT_METRICS = ("epoch", *ENGINE_COUNTERS, "epoch_time_s", "samples_per_s", "val_time_s", "gpu_memory_peak_bytes",
               "gpu_memory_allocated_bytes")


def metric_names(history: Sequence[dict]) -> list:
    """The metrics the rows hold, without their train_/val_ prefix, in first-seen order (loss, accuracy, ema_loss...)."""
    names = []
    for row in history:
        for key in row:
            if key in NOT_METRICS or not key.startswith(("train_", "val_")):
                continue
            name = key.split("_", 1)[1]
            if name not in names:
                names.append(name)
    return names


def samples_per_second(history: Sequence[dict]) -> Optional[float]:
    """Training samples per second over the epochs trained, each weighted by its time; None before an epoch ends."""
    seconds = sum(row.get("epoch_time_s") or 0.0 for row in history)
    if seconds <= 0:
        return None
    return sum(row["samples_per_s"] * row["epoch_time_s"] for row in history if row.get("epoch_time_s")) / seconds


def epochs_seconds(history: Sequence[dict]) -> float:
    """The time the epochs of `history` trained (an epoch resumed mid-way counts its time before the resume too)."""
    return sum(row.get("epoch_time_s") or 0.0 for row in history)
