"""`devices: N`: the launcher that starts N processes of `gpucore train` on this machine, as torchrun
--nproc_per_node does, and ends as one process would.

- Rank 0's output (the batch line, progress, epoch lines) reaches the terminal as it is written; the other ranks'
  is kept for the error message of a rank that fails.
- The workers run in a process group of their own, so a signal reaches them once, through the launcher: SIGINT
  (Ctrl-C), SIGTERM and SIGUSR1 sent to the launcher are forwarded to every worker, each saves interrupted.pt as one
  process does, and the launcher waits for them. On Linux a worker also gets SIGTERM if the launcher dies without
  forwarding (SIGKILL; `follow_the_launcher`, which the worker calls): no worker is left training as an orphan.
- A rank that fails stops the others (SIGTERM, then SIGKILL after a grace period) and raises TrainingError naming it.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import List, Optional, TextIO

from ..errors import TrainingError
from ..signals import STOP_SIGNALS
from .distributed import free_port

# How long workers get to checkpoint and exit after a forwarded signal, or to exit after SIGTERM when a rank failed,
# before they are killed.
GRACE_S = 120
_PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h)
_FORWARDED = (signal.SIGINT, *STOP_SIGNALS)
LAUNCHER_PID = "GPUCORE_LAUNCHER_PID"  # set in each worker's environment


def is_worker() -> bool:
    """Whether this process is a worker that `devices: N` started (the launcher speaks for it)."""
    return LAUNCHER_PID in os.environ


def follow_the_launcher() -> None:
    """In a worker of `devices: N`: SIGTERM when the launcher dies (Linux's parent-death signal; elsewhere nothing).
    A launcher already gone before this ran leaves the worker nothing to report to: it stops at once."""
    launcher = os.environ.get(LAUNCHER_PID)
    if not launcher or sys.platform != "linux":
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (AttributeError, OSError):
        return
    if str(os.getppid()) != launcher:
        os.kill(os.getpid(), signal.SIGTERM)


class _Echo(threading.Thread):
    """Copies a worker's stream to `target` as it comes, and keeps all of it for afterwards."""

    def __init__(self, stream, target: Optional[TextIO]):
        super().__init__(daemon=True)
        self.stream, self.target, self.parts = stream, target, []

    def run(self) -> None:
        for chunk in iter(lambda: self.stream.read1(4096) if hasattr(self.stream, "read1") else self.stream.read(4096),
                          b""):
            text = chunk.decode("utf-8", "replace")
            self.parts.append(text)
            if self.target is not None:
                self.target.write(text)
                self.target.flush()

    def text(self) -> str:
        self.join(timeout=10)
        return "".join(self.parts)


def launch(config, devices: int, timeout_s: int) -> dict:
    """Starts `devices` processes of `gpucore train` and waits for them (see the module's docstring). Returns rank 0's
    summary (the JSON `gpucore train` prints)."""
    with tempfile.TemporaryDirectory() as scratch:
        config_path = os.path.join(scratch, "config.json")
        with open(config_path, "w") as handle:
            # devices stays N: config.json then says what ran, and `gpucore train --resume RUN_DIR` starts N again
            # (a worker, in a world of N, does not launch: train.py launches only from a world of one).
            json.dump(config.to_dict(), handle)
        port = free_port()
        processes: List[subprocess.Popen] = []
        outputs, errors = [], []
        received: List[int] = []
        in_main_thread = threading.current_thread() is threading.main_thread()

        def forward(signum, frame) -> None:
            received.append(signum)
            for process in processes:
                if process.poll() is None:
                    process.send_signal(signum)

        previous = {signum: signal.signal(signum, forward) for signum in _FORWARDED} if in_main_thread else {}
        try:
            for rank in range(devices):
                env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                           LOCAL_RANK=str(rank), WORLD_SIZE=str(devices), LOCAL_WORLD_SIZE=str(devices),
                           PYTHONUNBUFFERED="1", **{LAUNCHER_PID: str(os.getpid())})
                # Share the cores instead of every process starting one thread per core (torchrun does the same).
                env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // devices)))
                process = subprocess.Popen([sys.executable, "-m", "gpucore", "train", config_path], env=env,
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
                processes.append(process)
                outputs.append(_Echo(process.stdout, None))
                errors.append(_Echo(process.stderr, sys.stderr if rank == 0 else None))
                outputs[-1].start()
                errors[-1].start()
            if received:  # a signal came while the workers were being started
                forward(received[-1], None)

            def first_failure() -> Optional[int]:
                return next((rank for rank, p in enumerate(processes) if p.poll() not in (None, 0)), None)

            deadline = time.monotonic() + timeout_s
            while (any(p.poll() is None for p in processes) and time.monotonic() <= deadline
                   and (received or first_failure() is None)):
                time.sleep(0.2)
            stopping = bool(received)  # the workers are checkpointing: wait for them, as one process would
            failed = None if stopping else first_failure()
            timed_out = not stopping and failed is None and any(p.poll() is None for p in processes)
            _stop(processes, wait_first=stopping)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        texts = [(out.text(), err.text()) for out, err in zip(outputs, errors)]
    if timed_out:
        raise TrainingError(f"distributed training over {devices} processes did not finish within dist_timeout "
                            f"{timeout_s} s; rank 0's last output: {texts[0][1][-2000:]}")
    if failed is not None:
        tail = texts[failed][1].strip().splitlines()[-12:]
        raise TrainingError(f"rank {failed} of {devices} failed (exit status {processes[failed].returncode}); the "
                            "other ranks were stopped. Its error:\n" + "\n".join(tail))
    try:
        summary = json.loads(texts[0][0])
    except ValueError:
        code = processes[0].returncode
        raise TrainingError(f"rank 0 of {devices} ended (exit status {code}) without its summary; its last output:\n"
                            + "\n".join(texts[0][1].strip().splitlines()[-12:])) from None
    return summary


def _stop(processes: List[subprocess.Popen], wait_first: bool) -> None:
    """Ends every worker still running: after a forwarded signal they get GRACE_S to checkpoint and exit first;
    otherwise (a rank failed, or the time ran out) SIGTERM at once. SIGKILL after GRACE_S."""
    deadline = time.monotonic() + GRACE_S
    if wait_first:
        while any(p.poll() is None for p in processes) and time.monotonic() < deadline:
            time.sleep(0.1)
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
