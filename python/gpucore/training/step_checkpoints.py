"""Mid-epoch checkpoints (config keys checkpoint_every_n_steps and checkpoint_every_minutes): at a step boundary where
one is due (the engine decides, without the host), rank 0 copies the state to the host and a background thread writes
checkpoints/step.pt while training goes on.

Only rank 0 decides and writes, and the write involves no collective, so the other ranks never wait for it
and no rank needs to agree on the moment: the checkpoint is rank 0's state at one step boundary, which under
DDP is every rank's. The next write (and every end-of-epoch checkpoint) first waits for the one under way, so
files appear in the order of the states they hold, and the atomic rename replaces the previous step.pt only
once the new one is complete: a kill at any moment leaves the last good one.

So a kill loses at most N steps plus the steps trained while the newest write was still under way (a kill then
leaves the one before it): summary() measures that bound and the write times for training_stats.json."""
from __future__ import annotations

import os
import threading
import time
from typing import Callable, List, Optional

from ..checkpoint import write_snapshot
from ..errors import TrainingError
from ..run_files import STEP


class StepCheckpoints:
    """Where and whether step checkpoints are written; when they are due, the engine decides after each optimizer step
    without the host (engine.h's StepCalls: every_n_steps of the epoch, or every_seconds since the pass began or the
    last one)."""

    def __init__(self, checkpoint_dir: str, every_n_steps: int, every_minutes: float, writes: bool):
        self.path = os.path.join(checkpoint_dir, STEP)
        self.every_n_steps, self.every_seconds = every_n_steps, every_minutes * 60
        self.enabled = writes and (every_n_steps > 0 or every_minutes > 0)
        self.written = 0  # step checkpoints this process wrote
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None
        self._write_seconds: List[float] = []
        self._most_steps_during_write = 0  # optimizer steps trained while a write was under way, at most

    def write(self, snapshot: dict, steps_in_pass: int, steps_now: Callable[[], int]) -> None:
        """Writes `snapshot` (a checkpoint on the host, sharing nothing with the live state: Checkpointing.snapshot)
        in the background, taken after `steps_in_pass` optimizer steps of the pass; `steps_now()` tells the writer,
        once done, how many the pass has taken by then (the engine's count, readable from another thread)."""
        self.wait()
        self._thread = threading.Thread(target=self._write, args=(snapshot, steps_in_pass, steps_now),
                                        name="gpucore-step-checkpoint")
        self._thread.start()
        self.written += 1

    def _write(self, snapshot: dict, steps_in_pass: int, steps_now: Callable[[], int]) -> None:
        start = time.monotonic()
        try:
            write_snapshot(self.path, snapshot)
        except BaseException as exc:  # raised in the training thread by wait()
            self._error = exc
        self._write_seconds.append(time.monotonic() - start)
        self._most_steps_during_write = max(self._most_steps_during_write, steps_now() - steps_in_pass)

    def summary(self) -> dict:
        """The writes' times and the most optimizer steps a kill could lose (N plus the most steps trained while a
        write was under way; None on the minutes' rule alone), for training_stats.json (beside `step_checkpoints`,
        the count written)."""
        times = self._write_seconds
        return {"write_s_max": max(times, default=0.0),
                "write_s_mean": sum(times) / len(times) if times else 0.0,
                "most_steps_during_a_write": self._most_steps_during_write,
                "most_steps_lost": self.every_n_steps + self._most_steps_during_write if self.every_n_steps else None}

    def wait(self) -> None:
        """Until the write under way (if any) is complete; raises what made it fail."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise TrainingError(f"writing the step checkpoint '{self.path}' failed ({type(error).__name__}: "
                                f"{error}); the previous one is intact") from error

    def superseded(self) -> None:
        """An end-of-epoch checkpoint holds all step.pt held and more: step.pt goes, after its write is done."""
        if self.enabled:
            self.wait()
            if os.path.exists(self.path):
                os.remove(self.path)
