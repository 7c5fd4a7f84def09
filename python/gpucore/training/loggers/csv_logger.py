"""Logger csv: metrics.csv in the run directory, shaped as Lightning's CSVLogger writes it: a header of every
column logged so far, one row per logged step (epoch, step and the running metrics as step/loss, step/lr, ...) and
one per epoch (step and the epoch's row of metrics.jsonl), blank where a row has no value. A resume keeps the rows
up to its checkpoint's step and the columns as they were; a column first seen later is added at the end of the
header and the file rewritten."""
from __future__ import annotations

import csv
import os
from typing import List

from ...checkpoint import atomic_write
from ...run_files import METRICS_CSV
from .base import Logger, numbers_of, step_metrics

_FIRST = ("epoch", "step")  # the columns a new file starts with, before the metrics in name order


class CSVLogger(Logger):
    name = "csv"

    def __init__(self, run_dir: str):
        super().__init__()
        self.path = os.path.join(run_dir, METRICS_CSV)
        self.columns: List[str] = []
        self.rows: List[dict] = []

    def start(self, trainer) -> None:
        """A new run starts an empty file; a resumed one keeps the rows up to the step it resumes from."""
        if trainer.resumed is not None and os.path.isfile(self.path):
            with open(self.path, newline="", encoding="utf-8") as handle:
                reader = csv.DictReader(handle)
                self.columns = list(reader.fieldnames or [])
                resumed_step = trainer.position.steps_taken
                self.rows = [row for row in reader if _logged_by(row, resumed_step)]
        self._rewrite()

    def log_step(self, step: int, metrics: dict) -> None:
        self._add(dict(step_metrics(metrics), epoch=metrics["epoch"], step=step))

    def log_epoch(self, step: int, record: dict) -> None:
        self._add(dict(numbers_of(record), step=step))

    def _add(self, row: dict) -> None:
        self.rows.append(row)
        new = [column for column in row if column not in self.columns]
        if new:
            self.columns += [c for c in _FIRST if c in new] + sorted(c for c in new if c not in _FIRST)
            self._rewrite()
            return
        with open(self.path, "a", newline="", encoding="utf-8") as handle:
            _writer(handle, self.columns).writerow(row)

    def _rewrite(self) -> None:
        def write(handle):
            if self.columns:
                writer = _writer(handle, self.columns)
                writer.writeheader()
                writer.writerows(self.rows)

        atomic_write(self.path, write, binary=False)


def _writer(handle, columns: List[str]) -> csv.DictWriter:
    return csv.DictWriter(handle, columns, lineterminator="\n")


def _logged_by(row: dict, step: int) -> bool:
    """Whether `row` is of a step up to `step` (a line a killed write left incomplete is not)."""
    try:
        return int(row["step"]) <= step
    except (KeyError, TypeError, ValueError):
        return False
