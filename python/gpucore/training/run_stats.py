"""training_stats.json, the run's facts as it goes: written when the run starts, after every epoch and at its end
(also after an error), from what the fit loop and its parts know. Nothing here reads the device: the step counts
are the engine's last report (RunPosition), and host_syncs counts every host read of device values the run made."""
from __future__ import annotations

from typing import List, Optional

from ..process_settings import process_settings
from .ema import monitored_weights
from .engine_config import scaled_lr


class RunStats:
    """The statistics writer of fit loop `loop`; it keeps the times the loop's history does not: `setup_seconds`
    (gpucore.train measures it: reading the data, building the model and the engine) and `interrupted_epoch_seconds`
    (the training time of an epoch Ctrl-C or a signal cut short, which has no metrics.jsonl row)."""

    def __init__(self, loop):
        self.loop = loop
        self.setup_seconds: Optional[float] = None
        self.interrupted_epoch_seconds = 0.0

    def write(self, status: str, error: Optional[str] = None) -> None:
        self.loop.run.run_dir.write_stats(self.stats(status, error))

    def stats(self, status: str, error: Optional[str] = None) -> dict:
        """training_stats.json: the run's facts, its status and history, the best epoch and the engine's counts."""
        loop = self.loop
        run, position = loop.run, loop.position
        syncs = run.engine.host_syncs()
        return dict(run.summary(), **({"oom_reductions": loop.oom.reductions} if loop.oom.reductions else {}),
                    status=status, error=error, stopped_by=loop.stopped_by, epochs=loop.history,
                    batch=self.batching_facts(),
                    step_checkpoints=loop.step_checkpoints.written,
                    step_checkpoint_writes=loop.step_checkpoints.summary(),
                    resume=dict(loop.resumed or {}, asked=run.run_dir.resume,
                                implied_by_restart=run.run_dir.resume_implied),
                    best=self.best(), steps=position.steps_taken, skipped_steps=position.steps_skipped,
                    host_syncs=sum(syncs.values()), host_syncs_by_source=syncs,
                    cuda_graphs=self.graph_stats(), process_settings=process_settings(), seconds=self.seconds(),
                    **({"frozen_layers": loop.freeze.frozen_layers()} if loop.freeze is not None else {}),
                    skipped_files=self.skipped_files())

    def batching_facts(self) -> dict:
        """The batch per process and over all processes, and the learning rate lr_scaling makes of it."""
        config, position = self.loop.run.config, self.loop.position
        batching = position.batching
        return {"per_process": batching.batch_size, "accumulate_grad_batches": batching.accumulate_grad_batches,
                "processes": position.world_size, "effective": position.samples_per_step(),
                "lr_scaling": config.lr_scaling, "lr": scaled_lr(config, position.world_size)}

    def best(self) -> dict:
        """The best epoch; with ema_decay also which weights it was (ema: the EMA's)."""
        best = self.loop.checkpoints.state_dict()
        if self.loop.run.ema is None:
            return best
        return dict(best, weights=monitored_weights(best["monitor"]))

    def graph_stats(self) -> dict:
        """cuda_graphs: what config key cuda_graphs asked, the steps captured (each also a step), replayed and run
        eagerly, and why steps ran eagerly (None: none did for a reason)."""
        run, position = self.loop.run, self.loop.position
        stats = dict(run.engine.graph_stats(), asked=run.config.cuda_graphs)
        if run.graphs_reason:  # the engine was never asked to capture: every step ran eagerly
            stats.update(reason=run.graphs_reason, eager_steps=position.steps_taken + position.steps_skipped)
        return stats

    def seconds(self) -> dict:
        """Where the run's wall time went (the epochs of this process's pass; training includes interrupted_epoch)."""
        history = self.loop.history
        return {"setup": self.setup_seconds,
                "training": sum(r["epoch_time_s"] for r in history) + self.interrupted_epoch_seconds,
                "interrupted_epoch": self.interrupted_epoch_seconds,
                "validation": sum(r.get("val_time_s", 0.0) for r in history)}

    def skipped_files(self) -> List[str]:
        run = self.loop.run
        return sorted(set().union(*(s.skipped_files() for s in (run.train_set, run.val_set) if s is not None)))
