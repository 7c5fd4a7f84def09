"""The progress bar of one training epoch (tqdm, when installed: tqdm.auto's, Jupyter's widget in a notebook), and the
line printed after it."""
import sys
import time
from typing import Collection


class EpochProgress:
    def __init__(self, enabled: bool, total_steps: int, epoch: int, epochs: int, log_every: int):
        self.bar = None
        if enabled:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(total=total_steps, desc=f"epoch {epoch}/{epochs}", unit="step", leave=False,
                                file=sys.stderr)
        self.log_every = log_every
        self.start = time.perf_counter()
        self.batch_samples = 0

    def update(self, metrics: dict, samples_per_step: int) -> None:
        if self.bar is not None:
            self.bar.update(self.log_every)
            elapsed = max(time.perf_counter() - self.start, 1e-9)
            self.batch_samples += self.log_every * samples_per_step
            self.bar.set_postfix(loss=f"{metrics['loss']:.4f}", samples_s=f"{self.batch_samples / elapsed:.0f}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def print_epoch(record: dict, epochs: int, metrics: Collection[str]) -> None:
    """The epoch's `metrics` (the task's, by record name) and its speed."""
    shown = {k: v for k, v in record.items() if k in metrics}
    print(f"epoch {record['epoch']}/{epochs} " + " ".join(f"{k}={v:.4f}" for k, v in shown.items())
          + f" ({record['samples_per_s']:.0f} samples/s)", file=sys.stderr)
