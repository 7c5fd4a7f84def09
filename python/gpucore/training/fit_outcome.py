"""How a fit stands and, once it stops, why, in one place: the run's status (each by one name here), the stop a
callback asked for, the signal that interrupted it, the checkpoint it resumed from and the out-of-memory retries.
The fit loop, its checkpoints, training_stats.json and the callbacks' trainer read it; none of them reads the loop."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

# A run's statuses: training_stats.json's status, TrainResult.status, trainer.status.
RUNNING = "running"  # training_stats.json while the run trains
COMPLETED = "completed"  # every epoch trained
EARLY_STOPPED = "early_stopped"  # config key patience: the monitored metric stopped improving
STOPPED = "stopped"  # a callback set trainer.should_stop
INTERRUPTED = "interrupted"  # Ctrl-C, SIGTERM or SIGUSR1: checkpoints/interrupted.pt holds where it was
FAILED = "failed"  # an error ended the run


@dataclass
class FitOutcome:
    """The state of a fit that is not its position: its status (COMPLETED until something ends the run early), why it
    stopped (`reason`, once it has, as Lightning logs it), the stop asked for after this epoch, the signal of an
    interrupt, where a resume started and each out-of-memory retry's batching."""

    status: str = COMPLETED
    reason: Optional[str] = None
    stopped_by: Optional[str] = None  # interrupted: SIGINT (Ctrl-C), SIGTERM or SIGUSR1
    resumed: Optional[dict] = None  # the checkpoint a resume read, its epoch and data position
    oom_reductions: List[dict] = field(default_factory=list)
    asked: Optional[Tuple[str, str]] = None  # (status, reason) of a stop asked for: the run ends after this epoch

    def ask_stop(self, reason: str, status: str = STOPPED) -> None:
        """End the run after the current epoch (its record and checkpoints written) with `status`, saying `reason`."""
        self.asked = (status, reason)

    def end(self, status: str, reason: str) -> None:
        self.status, self.reason = status, reason
