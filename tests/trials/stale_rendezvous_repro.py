"""The upstream failure gpucore works around, in plain PyTorch: a gloo group restarted by torchrun on the store
torchrun keeps across restarts (pytorch issue 167288), with and without a prefix per restart attempt.

    python tests/trials/stale_rendezvous_repro.py --trials 5

Each trial runs `torchrun --nproc_per_node=2 --max-restarts=1` twice on this file: rank 1 is SIGKILLed after the
first all-reduce, torchrun restarts both ranks, and rank 1 joins the restarted group 2 s after rank 0. Without the
prefix (env://, as torchrun's documentation shows) rank 0 may read rank 1's address of the dead attempt and fail
(`Connection refused`, `connectFullMesh failed`): not in every trial, and a failure can take a minute of
connect retries, which is why this is a script and not a test. With the prefix every trial forms the group.
Prints how many trials of each formed the restarted group.
"""
from __future__ import annotations

import argparse
import datetime
import os
import signal
import socket
import subprocess
import sys
import time


def worker(mode: str) -> None:
    import torch
    import torch.distributed as dist

    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    timeout = datetime.timedelta(seconds=8)
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), size, is_master=False,
                          timeout=timeout)
    if attempt == 1:  # rank 0 joins 2 s before rank 1, whatever the machine's load
        if rank == 0:
            store.set("repro/attempt_1/rank_0_joins", "1")
        else:
            store.wait(["repro/attempt_1/rank_0_joins"])
            time.sleep(2)
    if mode == "prefixed":
        dist.init_process_group("gloo", store=dist.PrefixStore(f"attempt_{attempt}", store), rank=rank,
                                world_size=size, timeout=timeout)
    else:
        dist.init_process_group("gloo", timeout=timeout)
    total = torch.ones(1)
    dist.all_reduce(total)
    if attempt == 0 and rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()
    print(f"attempt {attempt} rank {rank} formed a group of {int(total.item())}", flush=True)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def trial(mode: str) -> tuple:
    """(formed, seconds) of one torchrun job whose rank 1 is killed in the first attempt."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "SLURM_"))}
    env["OMP_NUM_THREADS"] = "1"
    start = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                               "--max-restarts=1", f"--master-port={_free_port()}", __file__, "--worker", mode],
                              env=env, capture_output=True, text=True, timeout=180)
        formed = done.returncode == 0 and done.stdout.count("attempt 1 rank") == 2
    except subprocess.TimeoutExpired:
        formed = False
    return formed, time.monotonic() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--worker", choices=["env", "prefixed"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker)
        return 0
    for mode in ("env", "prefixed"):
        results = [trial(mode) for _ in range(args.trials)]
        print(f"{mode}: restarted group formed in {sum(f for f, _ in results)} of {args.trials} trials; seconds: "
              + ", ".join(f"{s:.0f}" for _, s in results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
