"""Data-parallel training over torch.distributed (DDP), one process per GPU (or CPU process with gloo).

Under torchrun (or `devices: N`, which starts the N processes itself) every process runs gpucore.train:
the process group comes from the environment, the model is wrapped in DistributedDataParallel, each rank
gets an equal shard of the data, accumulation skips the all-reduce on all but the last micro-batch,
metrics are averaged over ranks at the end of each epoch, and only rank 0 writes files.
"""
from __future__ import annotations

import datetime
import itertools
import json
import os
import socket
import time
from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist

from ..errors import ConfigError, TrainingError
from ..signals import StepBoundaries


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    launched: bool = False  # started by torchrun, srun or devices: N (DDP even for one process)
    launcher: str = ""  # what described the world: "torchrun" (or devices: N), "slurm", "" (one process)
    master_addr: str = ""  # where rank 0's (or torchrun's) store listens
    master_port: int = 0
    # 0 on the first attempt, N after the Nth restart: torchrun's TORCHELASTIC_RESTART_COUNT, else SLURM's
    # SLURM_RESTART_COUNT (a job requeued, e.g. after SIGUSR1)
    restart: int = 0

    @property
    def restart_variable(self) -> str:
        return "TORCHELASTIC_RESTART_COUNT" if self.launcher == "torchrun" else "SLURM_RESTART_COUNT"

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _int_variable(env, name: str, default: Optional[str] = None, low: int = 0, high: Optional[int] = None) -> int:
    """Environment variable `name` as an integer in [low, high), or ConfigError naming it and the valid range."""
    text = env.get(name, default)
    if text is None:
        raise ConfigError(f"environment variable {name} is not set; the launcher sets it (torchrun, srun)")
    valid = f"an integer >= {low}" + (f" and < {high}" if high is not None else "")
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"environment variable {name} is {text!r}; it must be {valid}") from None
    if value < low or (high is not None and value >= high):
        raise ConfigError(f"environment variable {name} is {value}; it must be {valid}")
    return value


def environment(env=None) -> World:
    """The world the launcher describes in the environment: torchrun (or devices: N) by WORLD_SIZE, RANK,
    LOCAL_RANK, MASTER_ADDR, MASTER_PORT and TORCHELASTIC_RESTART_COUNT; srun (without torchrun) by SLURM's
    variables (`slurm_world`); one process without either."""
    env = os.environ if env is None else env
    if "WORLD_SIZE" in env:
        size = _int_variable(env, "WORLD_SIZE", low=1)
        rank = _int_variable(env, "RANK", "0", high=size)
        local_rank = _int_variable(env, "LOCAL_RANK", str(rank))
        return World(rank, size, local_rank, True, "torchrun", _master_addr(env, None),
                     _int_variable(env, "MASTER_PORT", low=1, high=65536),
                     _int_variable(env, "TORCHELASTIC_RESTART_COUNT", "0"))
    if _srun_used(env):
        return slurm_world(env)
    return World(restart=_int_variable(env, "SLURM_RESTART_COUNT", "0"))


def _master_addr(env, default: Optional[str]) -> str:
    address = env.get("MASTER_ADDR", default)
    if not address:
        raise ConfigError("environment variable MASTER_ADDR is not set (or empty); it must name the host of rank 0, "
                          "as torchrun sets it")
    return address


# ---- SLURM, as Lightning's SLURMEnvironment reads it ----------------------------------------------------

def _srun_used(env) -> bool:
    """Tasks started by srun: SLURM_NTASKS is set and the job is not an interactive shell (salloc's bash)."""
    return "SLURM_NTASKS" in env and env.get("SLURM_JOB_NAME") not in ("bash", "interactive")


def slurm_world(env) -> World:
    """The world of tasks started by `srun` without torchrun: rank SLURM_PROCID of SLURM_NTASKS, local rank
    SLURM_LOCALID; rank 0's store at MASTER_ADDR (default: the first host of SLURM_JOB_NODELIST) and
    MASTER_PORT (default: 15000 + the last four digits of SLURM_JOB_ID, else 12910), as Lightning's."""
    size = _int_variable(env, "SLURM_NTASKS", low=1)
    rank = _int_variable(env, "SLURM_PROCID", high=size)
    local_rank = _int_variable(env, "SLURM_LOCALID")
    nodelist = env.get("SLURM_JOB_NODELIST", env.get("SLURM_NODELIST", "127.0.0.1"))
    address = _master_addr(env, first_host(nodelist))
    if "MASTER_PORT" in env:
        port = _int_variable(env, "MASTER_PORT", low=1, high=65536)
    elif env.get("SLURM_JOB_ID", "").isdigit():
        port = 15000 + int(env["SLURM_JOB_ID"][-4:])
    else:
        port = 12910
    return World(rank, size, local_rank, True, "slurm", address, port, _int_variable(env, "SLURM_RESTART_COUNT", "0"))


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list: 'node[001-004,007],gpu5' -> 'node001', 'a,b' -> 'a', 'a b' -> 'a',
    'host[5]' -> 'host5' (Lightning's rules: the first entry, and of a bracketed range its first number, its
    zero padding kept)."""
    text = nodelist.strip()
    depth, end = 0, len(text)
    for index, char in enumerate(text):  # the first entry ends at a comma or space outside brackets
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth == 0 and char in ", ":
            end = index
            break
    entry = text[:end]
    opening = entry.find("[")
    if opening < 0:
        host = entry
    else:
        closing = entry.find("]", opening)
        if closing < 0:
            raise ConfigError(f"environment variable SLURM_JOB_NODELIST is {nodelist!r}: '[' without ']'")
        first = entry[opening + 1:closing].split(",")[0].split("-")[0]
        host = entry[:opening] + first + entry[closing + 1:]
    if not host:
        raise ConfigError(f"environment variable SLURM_JOB_NODELIST is {nodelist!r}: it names no host; set "
                          "MASTER_ADDR to the host of rank 0")
    return host


# ---- the process group ----------------------------------------------------------------------------------

def rendezvous_store(world: World, timeout: datetime.timedelta) -> dist.Store:
    """The store the ranks meet in, under a prefix of the restart attempt. torchrun's agent hosts the store
    (TORCHELASTIC_USE_AGENT_STORE) and keeps it across restarts, so without the prefix a restarted group
    reads the dead attempt's keys (gloo's peer addresses, NCCL's unique id) and never forms (pytorch issue
    167288). Elsewhere rank 0 hosts it."""
    agent_hosts = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(world.master_addr, world.master_port, world.size, is_master=world.is_main and not agent_hosts,
                          timeout=timeout)
    return dist.PrefixStore(f"gpucore/attempt_{world.restart}", store)


def start(world: World, device: torch.device, timeout_s: int) -> Optional[dist.Store]:
    """Joins the process group (NCCL on CUDA, gloo otherwise); its store when this call created it, else None."""
    if not world.launched or dist.is_initialized():
        return None
    backend = "nccl" if device.type == "cuda" else "gloo"
    timeout = datetime.timedelta(seconds=timeout_s)
    try:
        store = rendezvous_store(world, timeout)
        dist.init_process_group(backend, store=store, timeout=timeout, rank=world.rank, world_size=world.size)
    except RuntimeError as exc:  # torch.distributed.DistError among them
        raise TrainingError(
            f"rank {world.rank} of {world.size} could not join the process group at {world.master_addr}:"
            f"{world.master_port} (set by {world.launcher}, restart attempt {world.restart}, dist_timeout "
            f"{timeout_s} s): {exc}. Every rank must start with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE; "
            "ranks of different restart attempts never meet") from exc
    return store


# Where a collective failed because a peer is gone or stuck: gloo's and NCCL's words for it.
_PEER_FAILURES = ("timed out", "timeout", "connection reset", "connection closed", "connection refused",
                  "broken pipe", "nccl")


def is_peer_failure(exc: BaseException) -> bool:
    return isinstance(exc, dist.DistError) or (isinstance(exc, RuntimeError) and
                                                any(words in str(exc).lower() for words in _PEER_FAILURES))


def missing_ranks(world: World, store: dist.Store, wait_s: float) -> Optional[list]:
    """After a collective failed: the ranks that do not report the failure too within `wait_s` (stopped, hung
    or dead), or None when the store cannot tell (its host is the one gone). Every live rank reports, so
    all of them name the same ranks."""
    try:
        store.set(f"failed/{world.rank}", "1")
        rank_of = {f"failed/{rank}": rank for rank in range(world.size)}
        return [rank_of[key] for key in _absent_after(store, list(rank_of), wait_s)]
    except RuntimeError:
        return None


def peer_failure_error(world: World, store: dist.Store, timeout_s: int, exc: BaseException) -> TrainingError:
    """The error for a collective that failed on this rank: which ranks did not arrive, so the launcher
    (torchrun --max-restarts) can restart the job knowing whom to look at."""
    missing = missing_ranks(world, store, min(timeout_s, 5))
    if missing is None:
        who = f"the store's host at {world.master_addr}:{world.master_port} does not answer either"
    elif missing:
        who = (f"rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of {world.size} did not arrive "
               "(stopped, hung or dead)")
    else:
        who = "every rank is alive, but a collective failed"
    return TrainingError(f"rank {world.rank}: a collective failed within dist_timeout {timeout_s} s: {who}. "
                         f"{type(exc).__name__}: {str(exc).strip()[:500]}")


# ---- exchanges between the ranks ------------------------------------------------------------------------
# gpucore's own exchanges (the config and data checks, rank 0's choices, the epoch's metrics, waiting for a
# checkpoint) go through the process group's store, not its backend. A tensor handed to gloo is released by gloo's
# worker thread after the collective returns; when Python had dropped it first, that release needs the GIL, and
# near the process's end it came after the interpreter had begun to exit: SIGABRT ("terminate called without an
# active exception", seen in CI). Through the store no tensor of ours is held by the backend's threads, and no
# object passes through GPU memory. Every rank makes the same exchanges in the same order: the count names each.
_EXCHANGES = itertools.count()


# The longest a rank waiting on the store for its peers goes without running Python's signal handlers. A blocking
# store.wait or store.get runs in C++, where a handler never runs: a rank waiting for a peer that died (rank 0 killed
# while writing a checkpoint) did not answer torchrun's SIGTERM, and torchrun SIGKILLed it 30 s later. Between
# polls the handlers run: the fit loop's StepBoundaries raise the stop there; one that an epoch's end holds (its row,
# callbacks and checkpoints are written whole) is raised once the wait has lasted the grace that
# StepBoundaries.raise_held_in_peer_wait names (no store wait happens during a step or inside interrupts_deferred). store.check, not store.wait with a short timeout: each
# timed-out wait logs two c10d warnings, every slice.
_LONGEST_POLL_S = 0.1


def _absent_after(store: dist.Store, keys: list, wait_s: float) -> list:
    """The keys still absent from the store after waiting up to `wait_s` seconds for all of them ([] as soon as all
    are there). Polls, first every millisecond, then less often, up to every _LONGEST_POLL_S."""
    started = time.monotonic()
    deadline, pause = started + wait_s, 0.001
    while not store.check(keys):  # one request for all of them
        now = time.monotonic()
        if now >= deadline:
            return [key for key in keys if not store.check([key])]
        StepBoundaries.raise_held_in_peer_wait(now - started)
        time.sleep(min(pause, deadline - now))
        pause = min(pause * 2, _LONGEST_POLL_S)
    return []


def wait_for_keys(store: dist.Store, keys: list) -> None:
    """Until every key is in the store, as store.wait(keys): up to the store's timeout (dist_timeout), then the same
    DistStoreError; a signal's handler runs meanwhile (see _LONGEST_POLL_S)."""
    timeout = store.timeout.total_seconds()
    absent = _absent_after(store, keys, timeout)
    if absent:
        raise dist.DistStoreError(f"wait timeout after {int(timeout * 1000)}ms, keys: {', '.join(absent)}")


def default_store() -> dist.Store:
    """The process group's store, which gpucore's own exchanges go through."""
    return dist.distributed_c10d._get_default_store()


def _exchange_key(number: int, rank: int) -> str:
    return f"gpucore/exchange/{number}/{rank}"


def all_values(value):
    """Every rank's `value` (JSON), in rank order; [value] without a process group. Also a barrier."""
    if not dist.is_initialized():
        return [value]
    store, number = default_store(), next(_EXCHANGES)
    store.set(_exchange_key(number, dist.get_rank()), json.dumps(value))
    keys = [_exchange_key(number, rank) for rank in range(dist.get_world_size())]
    wait_for_keys(store, keys)
    return [json.loads(store.get(key)) for key in keys]


class StopVotes:
    """The ranks' votes to stop, through the process group's store (signals.StepBoundaries says how they decide):
    `vote(boundary)` once per fit, written from the signal's handler; `all_voted_before(boundary)` reads them at each
    step boundary while this rank stops, and nothing is read before. A store that no longer answers (its host, rank 0,
    is gone) counts as a decision to stop: no collective can succeed any more."""

    def __init__(self, store: dist.Store, world: World):
        number = next(_EXCHANGES)  # every rank makes one per fit, in the same order: a second fit's votes are apart
        self.store, self.world = store, world
        self.keys = [f"gpucore/stop/{number}/{rank}" for rank in range(world.size)]

    def vote(self, boundary: int) -> None:
        try:
            self.store.set(self.keys[self.world.rank], str(boundary))
        except RuntimeError:  # from a signal handler: never raise; the reads below then find the store gone
            pass

    def all_voted(self) -> bool:
        try:
            return self.store.check(self.keys)
        except RuntimeError:
            return False

    def all_voted_before(self, boundary: int) -> bool:
        try:
            return self.store.check(self.keys) and all(int(vote) < boundary for vote in self.store.multi_get(self.keys))
        except RuntimeError:
            return True


def check_same(value, what: str) -> None:
    """Stops every rank with a clear message when the ranks disagree on `value` (config, data length)."""
    values = all_values(value)
    if any(v != values[0] for v in values):
        raise ConfigError(f"the ranks disagree on {what}: " + ", ".join(f"rank {r}: {v}" for r, v in enumerate(values)))


def broadcast(value):
    """Rank 0's value (JSON) on every rank."""
    if not dist.is_initialized():
        return value
    store, number = default_store(), next(_EXCHANGES)
    if dist.get_rank() == 0:
        store.set(_exchange_key(number, 0), json.dumps(value))
    key = _exchange_key(number, 0)
    wait_for_keys(store, [key])
    return json.loads(store.get(key))


def average_metrics(metrics: dict, samples: int) -> dict:
    """Per-rank epoch means -> means over all ranks' samples, summed in rank order (the same floats on every rank)."""
    if not dist.is_initialized() or not metrics:
        return metrics
    names = sorted(metrics)
    ranks = all_values([[metrics[n] * samples for n in names], samples])
    total = float(sum(rank_samples for _, rank_samples in ranks))
    return {n: sum(sums[i] for sums, _ in ranks) / total for i, n in enumerate(names)}


def barrier() -> None:
    all_values(None)


def free_port() -> int:
    """A TCP port free on this machine now, for a process group's store."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
