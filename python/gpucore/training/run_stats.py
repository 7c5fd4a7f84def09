"""training_stats.json, the run's facts as it goes: written when the run starts, after every epoch and at its end
(also after an error), from what the fit loop and its parts know. Nothing here reads the device: the step counts
are the engine's last report (RunPosition), and host_syncs counts every host read of device values the run made."""
from __future__ import annotations

from typing import List, Optional

from ..process_settings import process_settings
from ..run_history import epochs_seconds
from .callbacks import BestEpoch, FreezeBackbone
from .ema import monitored_weights
from .engine_config import scaled_lr
from .fit_outcome import FitOutcome
from .position import RunPosition
from .step_checkpoints import StepCheckpoints


class RunStats:
    """The statistics writer of a run, from what it reads: the run, its position and history, the fit's outcome, the
    best epoch (`best`, ModelCheckpoint's), the step checkpoints and, with config key freeze, the frozen layers. It
    keeps the times the history does not: `setup_seconds` (gpucore.train measures it: reading the data, building
    the model and the engine) and `interrupted_epoch_seconds` (the training time of an epoch Ctrl-C or a signal cut
    short, which has no metrics.jsonl row)."""

    def __init__(self, run, position: RunPosition, history: List[dict], outcome: FitOutcome, best: BestEpoch,
                 step_checkpoints: StepCheckpoints, freeze: Optional[FreezeBackbone]):
        self.run, self.position, self.history, self.outcome = run, position, history, outcome
        self.best_epoch, self.step_checkpoints, self.freeze = best, step_checkpoints, freeze
        self.lr = scaled_lr(run.config, position.world_size)  # lr_scaling's, for this world size's effective batch
        self.setup_seconds: Optional[float] = None
        self.interrupted_epoch_seconds = 0.0

    def write(self, status: str, error: Optional[str] = None) -> None:
        self.run.run_dir.write_stats(self.stats(status, error))

    def stats(self, status: str, error: Optional[str] = None) -> dict:
        """training_stats.json: the run's facts, its status (and why it stopped) and history, the best epoch and the
        engine's counts."""
        run, position, outcome = self.run, self.position, self.outcome
        syncs = run.engine.host_syncs()
        return dict(run.summary(), **({"oom_reductions": outcome.oom_reductions} if outcome.oom_reductions else {}),
                    status=status, stop_reason=outcome.reason, error=error, stopped_by=outcome.stopped_by,
                    epochs=self.history, batch=self.batching_facts(),
                    step_checkpoints=self.step_checkpoints.written,
                    step_checkpoint_writes=self.step_checkpoints.summary(),
                    resume=dict(outcome.resumed or {}, asked=run.run_dir.resume,
                                implied_by_restart=run.run_dir.resume_implied),
                    best=self.best(), steps=position.steps_taken, skipped_steps=position.steps_skipped,
                    host_syncs=sum(syncs.values()), host_syncs_by_source=syncs,
                    cuda_graphs=self.graph_stats(), process_settings=process_settings(), seconds=self.seconds(),
                    **({"frozen_layers": self.freeze.frozen_layers()} if self.freeze is not None else {}),
                    skipped_files=self.skipped_files())

    def batching_facts(self) -> dict:
        """The batch per process and over all processes, and the learning rate lr_scaling makes of it."""
        config, position = self.run.config, self.position
        batching = position.batching
        return {"per_process": batching.batch_size, "accumulate_grad_batches": batching.accumulate_grad_batches,
                "processes": position.world_size, "effective": position.samples_per_step(),
                "lr_scaling": config.lr_scaling, "lr": self.lr}

    def best(self) -> dict:
        """The best epoch; with ema_decay also which weights it was (ema: the EMA's)."""
        best = self.best_epoch.state_dict()
        if self.run.model.ema is None:
            return best
        return dict(best, weights=monitored_weights(best["monitor"]))

    def graph_stats(self) -> dict:
        """cuda_graphs: what config key cuda_graphs asked, the steps captured (each also a step), replayed and run
        eagerly, and why steps ran eagerly (None: none did for a reason, as with cuda_graphs: false)."""
        run, position = self.run, self.position
        stats = dict(run.engine.graph_stats(), asked=run.config.cuda_graphs)
        if run.graphs_reason or run.config.cuda_graphs == "false":
            # the engine was never asked to capture (it counts the eager steps of a run it captures): all ran eagerly
            stats.update(reason=run.graphs_reason, eager_steps=position.steps_taken + position.steps_skipped)
        return stats

    def seconds(self) -> dict:
        """Where the run's wall time went (the epochs of this process's pass; training includes interrupted_epoch)."""
        history = self.history
        return {"setup": self.setup_seconds,
                "training": epochs_seconds(history) + self.interrupted_epoch_seconds,
                "interrupted_epoch": self.interrupted_epoch_seconds,
                "validation": sum(r.get("val_time_s", 0.0) for r in history)}

    def skipped_files(self) -> List[str]:
        data = self.run.data
        return sorted(set().union(*(s.skipped_files() for s in (data.train_set, data.val_set) if s is not None)))
