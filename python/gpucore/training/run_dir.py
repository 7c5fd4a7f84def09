"""A run's directory and its files: where a new run goes and where a resume is found, config.json,
training_stats.json, metrics.jsonl and the checkpoint files (the loggers of config key loggers write theirs
themselves: training/loggers/). Rank 0 writes; the other ranks of a data-parallel run only wait where they must."""
from __future__ import annotations

import itertools
import os
import sys
from typing import List, Optional

from ..checkpoint import remove_stale_temporaries, save_checkpoint, write_json, write_jsonl
from ..errors import ConfigError
from ..run_files import CHECKPOINTS, CONFIG, INTERRUPTED, METRICS, RESUME_CANDIDATES, STATS
from . import distributed


class RunDir:
    def __init__(self, config, world: distributed.World):
        self.world = world
        parent = os.path.abspath(config.run_dir)
        path = os.path.join(parent, config.name)
        # torchrun restarted the job, or SLURM requeued it: the attempt continues from the run's newest checkpoint
        # unasked.
        self.resume = "auto" if config.resume is None and world.restart > 0 else config.resume
        self.resume_implied = self.resume != config.resume
        # Rank 0's choice for every rank: one checkpoint, even where the ranks' clocks or file views differ.
        self.resume_from = distributed.broadcast(resume_path(self.resume, path) if world.is_main else None)
        if self.resume_implied and world.is_main:
            found = f"resuming from {self.resume_from}" if self.resume_from else "no checkpoint yet: starting over"
            launcher = "torchrun" if world.launcher == "torchrun" else "SLURM"
            print(f"gpucore: {launcher} restart {world.restart} ({world.restart_variable}) implies resume: auto; "
                  f"{found}", file=sys.stderr, flush=True)
        if self.resume_from is None:  # a new run: a directory no earlier run's checkpoints are in
            path = distributed.broadcast(free_run_dir(parent, config.name) if world.is_main else None)
        self.path = path
        self.checkpoint_dir = os.path.join(path, CHECKPOINTS)
        self.stats_path = os.path.join(path, STATS)
        self.metrics_path = os.path.join(path, METRICS)

    def create(self, config) -> None:
        """The folders, without what killed writes of an earlier start left, and config.json."""
        if not self.world.is_main:
            return
        try:
            os.makedirs(self.checkpoint_dir, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"config key 'run_dir': cannot create '{self.checkpoint_dir}' ({exc.strerror}); pick a "
                              "folder you can write to") from exc
        for folder in (self.path, self.checkpoint_dir):
            remove_stale_temporaries(folder)
        write_json(os.path.join(self.path, CONFIG), config.to_dict())

    def save(self, name: str, payload: dict) -> None:
        """Writes checkpoints/NAME atomically; every rank waits until it is complete."""
        if self.world.is_main:
            save_checkpoint(os.path.join(self.checkpoint_dir, name), payload)
        distributed.barrier()

    def save_interrupted(self, payload: dict) -> None:
        """checkpoints/interrupted.pt after Ctrl-C (no waiting: the other ranks are interrupted too)."""
        if self.world.is_main:
            save_checkpoint(os.path.join(self.checkpoint_dir, INTERRUPTED), payload)

    def remove(self, name: str) -> None:
        path = os.path.join(self.checkpoint_dir, name)
        if self.world.is_main and os.path.exists(path):
            os.remove(path)

    def keep_newest(self, prefix: str, count: int) -> None:
        """Removes all but the newest `count` checkpoints named PREFIX... (names sort by epoch)."""
        if self.world.is_main:
            for old in sorted(n for n in os.listdir(self.checkpoint_dir) if n.startswith(prefix))[:-count]:
                os.remove(os.path.join(self.checkpoint_dir, old))

    def write_history(self, history: List[dict]) -> None:
        """metrics.jsonl: one row per epoch trained, rewritten whole (a resume drops rows past its checkpoint)."""
        if self.world.is_main:
            write_jsonl(self.metrics_path, history)

    def write_stats(self, stats: dict) -> None:
        if self.world.is_main:
            write_json(self.stats_path, stats)


def has_checkpoints(run_dir: str) -> bool:
    folder = os.path.join(run_dir, CHECKPOINTS)
    return os.path.isdir(folder) and any(name.endswith(".pt") for name in os.listdir(folder))


def free_run_dir(parent: str, name: str) -> str:
    """A run directory that holds no earlier run's checkpoints: name, name-2, name-3, ... A run killed
    before its first checkpoint left nothing to keep: its directory is used again, so resumes find it."""
    for index in itertools.count(1):
        candidate = os.path.join(parent, name if index == 1 else f"{name}-{index}")
        if not has_checkpoints(candidate):
            return candidate
    raise AssertionError("unreachable")


def resume_path(resume: Optional[str], run_dir: str) -> Optional[str]:
    """The checkpoint `resume` (config key resume) names; for `auto` the newer of interrupted.pt and last.pt, if any."""
    if resume is None:
        return None
    if resume != "auto":
        return resume
    candidates = [os.path.join(run_dir, CHECKPOINTS, name) for name in RESUME_CANDIDATES]
    existing = [path for path in candidates if os.path.isfile(path)]
    return max(existing, key=os.path.getmtime) if existing else None
