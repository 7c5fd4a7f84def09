"""training_stats.json, the run's facts as it goes: written when the run starts, after every epoch and at its end
(also after an error), from what the fit loop and its parts know. Nothing here reads the device: the step counts
are the engine's last report (RunPosition), and host_syncs counts every host read of device values the run made."""
from __future__ import annotations

from typing import Callable, List, Optional

from ..process_settings import process_settings
from ..run_history import epochs_seconds
from .callbacks import BestEpoch, FreezeBackbone
from .ema import monitored_weights
from .engine_config import RunEngine
from .fit_outcome import FitOutcome
from .position import RunPosition
from .run_dir import RunDir
from .setup_data import RunData
from .step_checkpoints import StepCheckpoints


class RunStats:
    """The statistics writer of a run, from what it reads: config keys `lr_scaling` and `cuda_graphs` (as asked),
    `facts` (the run's facts as its set-up left them: Run.summary), the run directory, the engine part
    (engine_config.RunEngine: the engine's counts, reached through it at each write, and the lr and eager reason the
    engine step decided), whether the model has an EMA (`has_ema`), the data part (its sets' skipped files), the run's
    position and history, the fit's outcome, the best epoch (`best`, ModelCheckpoint's), the step checkpoints and, with
    config key freeze, the frozen layers. It keeps the times the history does not: `setup_seconds` (gpucore.train
    measures it: reading the data, building the model and the engine) and `interrupted_epoch_seconds` (the training
    time of an epoch Ctrl-C or a signal cut short, which has no metrics.jsonl row)."""

    def __init__(self, lr_scaling: str, cuda_graphs: str, facts: Callable[[], dict], run_dir: RunDir,
                 training: RunEngine, has_ema: bool, data: RunData, position: RunPosition, history: List[dict],
                 outcome: FitOutcome, best: BestEpoch, step_checkpoints: StepCheckpoints,
                 freeze: Optional[FreezeBackbone]):
        self.lr_scaling, self.cuda_graphs = lr_scaling, cuda_graphs
        self.facts, self.run_dir, self.training = facts, run_dir, training
        self.has_ema, self.data, self.position, self.history, self.outcome = has_ema, data, position, history, outcome
        self.best_epoch, self.step_checkpoints, self.freeze = best, step_checkpoints, freeze
        self.setup_seconds: Optional[float] = None
        self.interrupted_epoch_seconds = 0.0

    def write(self, status: str, error: Optional[str] = None) -> None:
        self.run_dir.write_stats(self.stats(status, error))

    def stats(self, status: str, error: Optional[str] = None) -> dict:
        """training_stats.json: the run's facts, its status (and why it stopped) and history, the best epoch and the
        engine's counts."""
        position, outcome = self.position, self.outcome
        syncs = self.training.engine.host_syncs()
        return dict(self.facts(), **({"oom_reductions": outcome.oom_reductions} if outcome.oom_reductions else {}),
                    status=status, stop_reason=outcome.reason, error=error, stopped_by=outcome.stopped_by,
                    epochs=self.history, batch=self.batching_facts(),
                    step_checkpoints=self.step_checkpoints.written,
                    step_checkpoint_writes=self.step_checkpoints.summary(),
                    resume=dict(outcome.resumed or {}, asked=self.run_dir.resume,
                                implied_by_restart=self.run_dir.resume_implied),
                    best=self.best(), steps=position.steps_taken, skipped_steps=position.steps_skipped,
                    host_syncs=sum(syncs.values()), host_syncs_by_source=syncs,
                    cuda_graphs=self.graph_stats(), process_settings=process_settings(), seconds=self.seconds(),
                    **({"frozen_layers": self.freeze.frozen_layers()} if self.freeze is not None else {}),
                    skipped_files=self.skipped_files())

    def batching_facts(self) -> dict:
        """The batch per process and over all processes, and the learning rate lr_scaling made of it (for the world
        size the run started at)."""
        position = self.position
        batching = position.batching
        return {"per_process": batching.batch_size, "accumulate_grad_batches": batching.accumulate_grad_batches,
                "processes": position.world_size, "effective": position.samples_per_step(),
                "lr_scaling": self.lr_scaling, "lr": self.training.lr}

    def best(self) -> dict:
        """The best epoch; with ema_decay also which weights it was (ema: the EMA's)."""
        best = self.best_epoch.state_dict()
        if not self.has_ema:
            return best
        return dict(best, weights=monitored_weights(best["monitor"]))

    def graph_stats(self) -> dict:
        """cuda_graphs: what config key cuda_graphs asked, the steps captured (each also a step), replayed and run
        eagerly, and why steps ran eagerly (None: none did for a reason, as with cuda_graphs: false)."""
        position, training, asked = self.position, self.training, self.cuda_graphs
        stats = dict(training.engine.graph_stats(), asked=asked)
        if training.graphs_reason or asked == "false":
            # the engine was never asked to capture (it counts the eager steps of a run it captures): all ran eagerly
            stats.update(reason=training.graphs_reason, eager_steps=position.steps_taken + position.steps_skipped)
        return stats

    def seconds(self) -> dict:
        """Where the run's wall time went (the epochs of this process's pass; training includes interrupted_epoch)."""
        history = self.history
        return {"setup": self.setup_seconds,
                "training": epochs_seconds(history) + self.interrupted_epoch_seconds,
                "interrupted_epoch": self.interrupted_epoch_seconds,
                "validation": sum(r.get("val_time_s", 0.0) for r in history)}

    def skipped_files(self) -> List[str]:
        data = self.data
        return sorted(set().union(*(s.skipped_files() for s in (data.train_set, data.val_set) if s is not None)))
