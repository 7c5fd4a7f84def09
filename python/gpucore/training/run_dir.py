"""A run's directory and its files: where a new run goes and where a resume is found, config.json,
training_stats.json, metrics.jsonl and the checkpoint files (the loggers of config key loggers write theirs
themselves: training/loggers/). Rank 0 writes; the other ranks of a data-parallel run only wait where they must."""
from __future__ import annotations

import fcntl
import itertools
import json
import os
import sys
import time
from typing import IO, List, Mapping, Optional, Tuple

from ..checkpoint import process_alive, remove_stale_temporaries, write_json, write_jsonl, write_snapshot
from ..config import RESUME_SETTABLE
from ..errors import ConfigError
from ..redact import masked_values
from ..run_files import CHECKPOINTS, CONFIG, INTERRUPTED, METRICS, RESUME_CANDIDATES, RUN_LOCK, STATS
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
        if self.resume is not None and not self.resume_implied and self.resume_from is None and world.is_main:
            print(f"gpucore: resume: {self.resume}: no checkpoint yet in {path}: starting the run from its beginning",
                  file=sys.stderr, flush=True)
        # The run directory, claimed by rank 0 (its lock, held until close()): a run started at the same moment with
        # the same name never trains there too. A resume claims the run's own directory; a new run the first of name,
        # name-2, ... that holds no earlier run's checkpoints and no running run.
        self.lock: Optional[IO] = None
        if world.is_main:
            if self.resume_from is None:
                path, self.lock = free_run_dir(parent, config.name)
            else:
                self.lock = claim_or_refuse(path, f"resume: {self.resume}")
        path = distributed.broadcast(path if world.is_main else None)
        self.path = path
        # config.json's values: the run's config; a resume's once its checkpoint is read (write_config). What
        # training_stats.json and every checkpoint record, so the three never disagree.
        self.config: dict = config.to_dict()
        self.checkpoint_dir = os.path.join(path, CHECKPOINTS)
        self.stats_path = os.path.join(path, STATS)
        self.metrics_path = os.path.join(path, METRICS)

    def create(self) -> None:
        """The folders, without what killed writes of an earlier start left, and config.json (a resume writes it
        once the checkpoint is read and checked: `write_config`, with the values the resumed run goes on with)."""
        if not self.world.is_main:
            return
        try:
            os.makedirs(self.checkpoint_dir, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"config key 'run_dir': cannot create '{self.checkpoint_dir}' ({exc.strerror}); pick a "
                              "folder you can write to") from exc
        for folder in (self.path, self.checkpoint_dir):
            remove_stale_temporaries(folder)
        if self.resume_from is None:
            self.write_config(self.config)

    def release(self) -> None:
        """The run is over: another may claim its directory (a resume, a run of the same name)."""
        if self.lock is not None:
            self.lock.close()  # closing the file gives its lock up
            self.lock = None

    def written_config(self) -> dict:
        """config.json as an earlier start of the run wrote it ({} if none)."""
        try:
            with open(os.path.join(self.path, CONFIG), encoding="utf-8") as handle:
                return json.load(handle)
        except (OSError, ValueError):
            return {}

    def write_config(self, values: dict) -> None:
        """config.json: the keys the run trains with."""
        self.config = dict(values)
        if self.world.is_main:
            write_json(os.path.join(self.path, CONFIG), values)

    def save(self, name: str, snapshot: dict) -> None:
        """Writes checkpoints/NAME (a checkpoint's host_snapshot) atomically; every rank waits until it is complete."""
        if self.world.is_main:
            write_snapshot(os.path.join(self.checkpoint_dir, name), snapshot)
        distributed.barrier()

    def save_interrupted(self, snapshot: dict) -> None:
        """checkpoints/interrupted.pt after Ctrl-C (no waiting: the other ranks are interrupted too)."""
        if self.world.is_main:
            write_snapshot(os.path.join(self.checkpoint_dir, INTERRUPTED), snapshot)

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


def claim(run_dir: str) -> Optional[IO]:
    """Run directory `run_dir` (created if need be) for this process: its lock file, open and locked (flock: the
    lock goes with the process however it ends, so a killed run leaves none behind), or None when another process
    holds it. The file then holds this process's id, for the message of a run that finds it taken."""
    try:
        os.makedirs(run_dir, exist_ok=True)
        handle = open(os.path.join(run_dir, RUN_LOCK), "a+", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"config key 'run_dir': cannot create '{run_dir}' ({exc.strerror}); pick a folder you can "
                          "write to") from exc
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    handle.truncate(0)
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def holder(run_dir: str) -> str:
    """Who holds run directory `run_dir`'s lock, for messages: 'process PID'. The holder writes its id just after
    taking the lock, so a file still empty, or naming a process that has ended (a killed run's), is read again for a
    moment; 'another process' when no live id appears."""
    deadline = time.monotonic() + 2.0
    while True:
        try:
            with open(os.path.join(run_dir, RUN_LOCK), encoding="utf-8") as handle:
                pid = handle.read().strip()
        except OSError:
            pid = ""
        if pid.isdigit() and process_alive(int(pid)):
            return f"process {pid}"
        if time.monotonic() > deadline:
            return "another process"
        time.sleep(0.01)


def claim_or_refuse(run_dir: str, asked: str) -> IO:
    """Run directory `run_dir`'s lock for a resume (`asked`: how it was asked for); ConfigError while another run
    trains there, since two runs writing one directory would mix their checkpoints and metrics."""
    lock = claim(run_dir)
    if lock is None:
        raise ConfigError(f"{asked}: run directory '{run_dir}' is in use: {holder(run_dir)} is training there. Wait "
                          "for that run to end (or stop it: it saves interrupted.pt) and resume then")
    return lock


def free_run_dir(parent: str, name: str) -> Tuple[str, IO]:
    """(path, lock): the first of run directories name, name-2, name-3, ... that holds no earlier run's checkpoints
    and that no running process has claimed, claimed for this one (`claim`). A run killed before its first checkpoint
    left nothing to keep: its directory is used again, so resumes find it. Which directory was passed over, and why,
    is said on stderr."""
    passed_over = []
    for index in itertools.count(1):
        candidate = os.path.join(parent, name if index == 1 else f"{name}-{index}")
        if has_checkpoints(candidate):
            passed_over.append(f"{candidate} holds an earlier run's checkpoints")
            continue
        lock = claim(candidate)
        if lock is None:
            passed_over.append(f"{candidate} is in use ({holder(candidate)} is training there)")
            continue
        if has_checkpoints(candidate):  # a run that ended between the check and the claim
            lock.close()
            passed_over.append(f"{candidate} holds an earlier run's checkpoints")
            continue
        if passed_over:
            print(f"gpucore: {'; '.join(passed_over)}: this run is {candidate}", file=sys.stderr, flush=True)
        return candidate, lock
    raise AssertionError("unreachable")


def resume_path(resume: Optional[str], run_dir: str) -> Optional[str]:
    """The checkpoint `resume` (config key resume) names: for `auto` the newest of the run directory `run_dir`'s
    interrupted.pt, step.pt and last.pt, if any; for a run directory the newest of its own; else the file."""
    if resume is None:
        return None
    if resume != "auto":
        if not os.path.isdir(resume):
            return resume
        run_dir = resume
    candidates = [os.path.join(run_dir, CHECKPOINTS, name) for name in RESUME_CANDIDATES]
    existing = [path for path in candidates if os.path.isfile(path)]
    return max(existing, key=os.path.getmtime) if existing else None


# How a resume of a checkpoint (resume: auto, a file) is asked for and where it goes on: a checkpoint file may be
# resumed into another run directory.
RESUME_LOCATION = ("resume", "run_dir", "name")


def check_resume_keeps_the_run(own: Mapping[str, object], given: Mapping[str, object], asked: str, source: str,
                               weights: str, spelled=lambda key: f"config key '{key}'") -> None:
    """The one rule of every resume: ConfigError naming the first key of `given` (config values) that differs from the
    run's own (`own`, read from `source`) and that a resume may not set (RESUME_SETTABLE), with how to train with it
    instead (a new run from `weights`). `asked`: the resume as asked for; `spelled`: a key as the user gave it.
    Values are compared as the run's files record them, credentials masked: the real value of a URI whose credentials
    config.json or a checkpoint masked (or another token for the same URI) keeps the run."""
    for key, value in given.items():
        if key in RESUME_SETTABLE or key not in own:
            continue
        value, recorded = masked_values(value), masked_values(own[key])
        if json.dumps(value, sort_keys=True, default=str) != json.dumps(recorded, sort_keys=True, default=str):
            raise ConfigError(f"{spelled(key)}: {asked} goes on with the run's own {key} ({recorded!r} in {source}), "
                              f"not {value!r}; a resume may set only {', '.join(RESUME_SETTABLE)}. To train with "
                              f"another {key}, start a new run from its weights: {weights}")


def resume_run_config(run_dir: str, overrides: Mapping[str, object], config_file: Optional[str] = None):
    """The config of `gpucore train --resume RUN_DIR`: the run's own config.json, in that directory (run_dir and
    name point at it), with `overrides` of the keys RESUME_SETTABLE only; resume: RUN_DIR (its newest checkpoint)."""
    from ..config import load_config

    given = run_dir
    if config_file is not None:
        raise ConfigError(f"--resume '{given}' goes on with that run's own config.json; leave out the config file "
                          f"'{config_file}' (or resume a checkpoint with gpucore train {config_file} --resume PATH)")
    path = os.path.join(run_dir, CONFIG)
    if not os.path.isfile(path):
        raise ConfigError(f"--resume '{given}': a folder given to --resume is a run directory, and it holds no "
                          f"{CONFIG}; give the directory a gpucore run wrote (runs/NAME), a checkpoint file, or auto")
    with open(path, encoding="utf-8") as handle:
        values = json.load(handle)
    own = load_config(values).to_dict()
    new = load_config(values, overrides).to_dict()
    named = dict.fromkeys(key.split(".")[0] for key in overrides)
    check_resume_keeps_the_run(own, {name: new[name] for name in named}, f"--resume '{given}'", f"its {CONFIG}",
                               f"--set pretrained={os.path.join(given, CHECKPOINTS, 'last.pt')}",
                               spelled=lambda key: f"--set {key}")
    location = os.path.abspath(run_dir)
    if os.path.abspath(os.path.join(own["run_dir"], own["name"])) != location:  # moved, or another working directory
        values.update(run_dir=os.path.dirname(location), name=os.path.basename(location))
    values["resume"] = given
    return load_config(values, overrides)  # --set data_kwargs.size=...: one entry of the run's own mapping
