"""Data-parallel training over torch.distributed (DDP), one process per GPU (or CPU process with gloo).

Under torchrun (or `devices: N`, which starts the N processes itself) every process runs gpucore.train:
the process group comes from the environment, the model is wrapped in DistributedDataParallel, each rank
gets an equal shard of the data, accumulation skips the all-reduce on all but the last micro-batch,
metrics are averaged over ranks at the end of each epoch, and only rank 0 writes files.
"""
from __future__ import annotations

import datetime
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist

from ..errors import ConfigError, TrainingError


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    launched: bool = False  # started by torchrun / devices: N (DDP even for one process)

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def environment() -> World:
    """The world torchrun (or `devices: N`) describes in the environment; size 1 without one."""
    try:
        size = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local_rank = int(os.environ.get("LOCAL_RANK", str(rank)))
    except ValueError as exc:
        raise ConfigError(f"WORLD_SIZE, RANK and LOCAL_RANK must be integers ({exc})") from exc
    return World(rank, size, local_rank, "WORLD_SIZE" in os.environ)


def start(world: World, device: torch.device, timeout_s: int) -> bool:
    """Joins the process group (NCCL on CUDA, gloo otherwise); True when this call created it."""
    if not world.launched or dist.is_initialized():
        return False
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s), rank=world.rank,
                            world_size=world.size)
    return True


def check_same(value, what: str) -> None:
    """Stops every rank with a clear message when the ranks disagree on `value` (config, data length)."""
    if not dist.is_initialized():
        return
    values = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    if any(v != values[0] for v in values):
        raise ConfigError(f"the ranks disagree on {what}: " + ", ".join(f"rank {r}: {v}" for r, v in enumerate(values)))


def broadcast(value):
    """Rank 0's value on every rank."""
    if not dist.is_initialized():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def average_metrics(metrics: dict, samples: int, device: torch.device) -> dict:
    """Per-rank epoch means -> means over all ranks' samples (one all-reduce per epoch)."""
    if not dist.is_initialized() or not metrics:
        return metrics
    names = sorted(metrics)
    values = torch.tensor([metrics[n] * samples for n in names] + [float(samples)], dtype=torch.float64,
                          device=device if device.type == "cuda" else "cpu")
    dist.all_reduce(values)
    total = values[-1].item()
    return {n: values[i].item() / total for i, n in enumerate(names)}


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch(config, devices: int, timeout_s: int) -> dict:
    """Starts `devices` processes of `gpucore train` on this machine (what torchrun --nproc_per_node does)
    and waits for them; a failing rank stops the others and raises TrainingError naming it.
    Returns rank 0's summary (the JSON `gpucore train` prints)."""
    with tempfile.TemporaryDirectory() as scratch:
        config_path = os.path.join(scratch, "config.json")
        with open(config_path, "w") as handle:
            json.dump(dict(config.to_dict(), devices=1), handle)
        port = _free_port()
        processes, logs = [], []
        for rank in range(devices):
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                       LOCAL_RANK=str(rank), WORLD_SIZE=str(devices), LOCAL_WORLD_SIZE=str(devices))
            # Share the cores instead of every process starting one thread per core (torchrun does the same).
            env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // devices)))
            out = open(os.path.join(scratch, f"rank{rank}.out"), "w+")
            err = open(os.path.join(scratch, f"rank{rank}.err"), "w+")
            logs.append((out, err))
            processes.append(subprocess.Popen([sys.executable, "-m", "gpucore", "train", config_path], env=env,
                                              stdout=out, stderr=err))
        def first_failure() -> Optional[int]:
            return next((rank for rank, p in enumerate(processes) if p.poll() not in (None, 0)), None)

        deadline = time.monotonic() + timeout_s
        while any(p.poll() is None for p in processes) and first_failure() is None and time.monotonic() <= deadline:
            time.sleep(0.2)
        failed = first_failure()
        timed_out = failed is None and any(p.poll() is None for p in processes)
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        texts = []
        for out, err in logs:
            out.seek(0)
            err.seek(0)
            texts.append((out.read(), err.read()))
            out.close()
            err.close()
    if timed_out:
        raise TrainingError(f"distributed training over {devices} processes did not finish within dist_timeout "
                               f"{timeout_s} s; rank 0's last output: {texts[0][1][-2000:]}")
    if failed is not None:
        tail = texts[failed][1].strip().splitlines()[-12:]
        raise TrainingError(f"rank {failed} of {devices} failed (exit status {processes[failed].returncode}); the "
                               "other ranks were stopped. Its error:\n" + "\n".join(tail))
    return json.loads(texts[0][0])
