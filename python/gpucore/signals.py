"""The signals that stop a run as Ctrl-C does: SIGTERM (docker stop, systemd, Kubernetes, SLURM's preemption) and
SIGUSR1 (SLURM's early warning, `#SBATCH --signal=USR1@90`). While training, each raises `Stopped`, a
KeyboardInterrupt, so the fit loop's Ctrl-C path saves interrupted.pt at the current step and the run ends
"interrupted"; `gpucore train` then exits with 128 + the signal's number (143 for SIGTERM), as a process killed by it
would. After SIGUSR1 under SLURM the job is requeued (`scontrol requeue`), so it starts again and resumes."""
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
from typing import Iterator, List, Optional

# What stops a run besides SIGINT; SIGUSR1 does not exist on Windows.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGUSR1") if hasattr(signal, name))


class Stopped(KeyboardInterrupt):
    """A stop signal arrived: handled where Ctrl-C is, and says which signal it was."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def signal_name(exc: BaseException) -> str:
    """The signal a KeyboardInterrupt stands for: SIGINT for Ctrl-C, else Stopped's."""
    return signal.Signals(exc.signum).name if isinstance(exc, Stopped) else "SIGINT"


def exit_code(name: Optional[str]) -> int:
    """The exit status of a run that the signal `name` stopped: 128 + its number, as the shell reports a process the
    signal ended (130 for SIGINT, 143 for SIGTERM)."""
    return 128 + int(signal.Signals[name or "SIGINT"])


def _raise_stopped(signum, frame):
    raise Stopped(signum)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """Inside the block, SIGTERM and SIGUSR1 raise Stopped in the main thread (elsewhere Python cannot take signals,
    and the block changes nothing). Handlers set before the block, other than the defaults, are left in place: a
    program that handles these signals itself keeps its own behaviour."""
    if not _in_main_thread():
        yield
        return
    previous = {}
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) in (signal.SIG_DFL, None):
            previous[signum] = signal.signal(signum, _raise_stopped)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGUSR1 during the block are held back and raised once the block is done (KeyboardInterrupt,
    or Stopped for the others, where their handler raises), so a write is never cut in the middle. The main thread
    only: Python delivers signals there."""
    if not _in_main_thread():
        yield
        return
    received: List[int] = []
    previous = {signum: signal.signal(signum, lambda number, frame: received.append(number))
                for signum in (signal.SIGINT, *STOP_SIGNALS)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if received:
            first = received[0]
            if first == signal.SIGINT and previous[first] is not signal.SIG_IGN:
                raise KeyboardInterrupt
            if first != signal.SIGINT and previous[first] is _raise_stopped:
                raise Stopped(first)
            if first != signal.SIGINT and callable(previous[first]):
                previous[first](first, None)  # a program's own handler, called late


def requeue_slurm_job() -> Optional[str]:
    """After SIGUSR1 under SLURM: asks SLURM to requeue this job (`scontrol requeue $SLURM_JOB_ID`). Returns what
    happened, for the log; None outside SLURM."""
    job = os.environ.get("SLURM_ARRAY_JOB_ID") or os.environ.get("SLURM_JOB_ID")
    if not job:
        return None
    if os.environ.get("SLURM_ARRAY_TASK_ID") and os.environ.get("SLURM_ARRAY_JOB_ID"):
        job = f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        return f"SLURM job {job}: scontrol is not on PATH, so the job was not requeued; resubmit it to resume"
    done = subprocess.run([scontrol, "requeue", job], capture_output=True, text=True)
    if done.returncode != 0:
        return f"SLURM job {job}: scontrol requeue failed ({done.returncode}): {done.stderr.strip()}"
    return f"SLURM job {job} requeued: it resumes from interrupted.pt when it starts again (resume: auto)"


def report_requeue(name: Optional[str]) -> None:
    """Requeues the SLURM job when SIGUSR1 stopped the run, and says so on stderr."""
    if name == "SIGUSR1":
        message = requeue_slurm_job()
        if message:
            print(f"gpucore: {message}", file=sys.stderr, flush=True)
