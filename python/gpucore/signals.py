"""The signals that stop a run as Ctrl-C does: SIGTERM (docker stop, systemd, Kubernetes, SLURM's preemption) and
SIGUSR1 (SLURM's early warning, `#SBATCH --signal=USR1@90`). While training, each raises `Stopped`, a
KeyboardInterrupt, at the next step boundary (StepBoundaries), so the fit loop's Ctrl-C path saves interrupted.pt
after the last whole optimizer step and the run ends "interrupted"; `gpucore train` then exits with 128 + the signal's number (143 for SIGTERM), as a process killed by it
would. After SIGUSR1 under SLURM the job is requeued (`scontrol requeue`), so it starts again and resumes."""
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
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


def interrupt_for(signum: int) -> KeyboardInterrupt:
    """What a signal raises: KeyboardInterrupt for Ctrl-C, Stopped for SIGTERM and SIGUSR1."""
    return KeyboardInterrupt() if signum == signal.SIGINT else Stopped(signum)


def run_interrupted(result) -> KeyboardInterrupt:
    """What gpucore.train raises once a signal stopped the run and interrupted.pt is written, so that a script looping
    over runs stops: the signal's own interrupt (interrupt_for; for Ctrl-C exactly KeyboardInterrupt, so an uncaught
    one ends Python as Ctrl-C does), saying where the run is, with the run's TrainResult as `result`."""
    stop = interrupt_for(signal.Signals[result.stopped_by or "SIGINT"])
    stop.args = (f"{result.stopped_by or 'SIGINT'} stopped the run in '{result.run_dir}' after {result.steps} "
                 "optimizer steps; checkpoints/interrupted.pt holds it: resume it with resume: auto (the same "
                 f"config) or gpucore train --resume {result.run_dir}",)
    stop.result = result
    return stop


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


# How long a wait for other processes keeps a stop signal held (StepBoundaries.held) before it raises it: the ranks
# of a run reach the epoch's exchanges within milliseconds of each other, and a peer that has not come by then may be
# dead (torchrun SIGTERMs the ranks left, and SIGKILLs those still there 30 s later). Peers that took the stop signal
# too (they voted, see StepBoundaries) are alive and stopping: they get VOTED_PEER_GRACE_S, under torchrun's 30 s.
HELD_STOP_GRACE_S = 1.0
VOTED_PEER_GRACE_S = 20.0
# A rank whose peers did not take the stop signal (one process signalled by hand) stops alone once this many step
# boundaries, and at least HELD_STOP_GRACE_S, passed since its vote; its peers' next collective then fails.
LONE_STOP_BOUNDARIES = 3


class StepBoundaries:
    """Ctrl-C, SIGTERM and SIGUSR1 during training, raised only between optimizer steps. A model's forward updates
    BatchNorm's running statistics, so an interrupt inside a step would leave them counted for a step the checkpoint
    says was not taken, and the resumed run would differ. While `holding` (an epoch's steps run), a signal waits in
    `pending` and is raised at the next step boundary: the first forward of the next optimizer step (a forward
    pre-hook), the log and step-checkpoint callbacks, or the end of the epoch's steps; so does one during the epoch's
    end (`held`: its row, callbacks and checkpoints), raised at the next epoch's start, or in a wait for other
    processes once HELD_STOP_GRACE_S passed. Elsewhere (validation, the report, set-up) it is raised at once, as
    Ctrl-C always was.

    With several processes (`peers`, distributed.StopVotes) the ranks must stop at the same step boundary: a rank that
    stopped a step before the others leaves them inside the next step's all-reduce, which fails ("Connection closed
    by peer"), and the run ends "training failed" without interrupted.pt. torchrun, SLURM and `devices: N` signal
    every rank, but each takes the signal at its own moment. So the ranks vote: each boundary is named by the
    optimizer steps taken in this fit (`steps`, the same on every rank), a rank that takes a signal votes at once
    (the next boundary, steps + 1), and a rank raises at boundary b only when every rank's vote is below b. A vote
    for b is written before its rank ends boundary b, so every rank past the next step's all-reduce sees it: all
    ranks decide alike, costing one step more than one process would and nothing before a signal. Where not every
    step's boundary passes here (no forward pre-hook: a compiled model), `steps` may be behind when the signal comes,
    so the rank votes at the next boundary it passes instead."""

    running: Optional["StepBoundaries"] = None  # those installed in this process now: what a peer wait consults

    def __init__(self, peers=None):
        self.holding = False
        self.pending: Optional[int] = None  # the first signal that arrived while holding; kept until the run ends
        self.pending_since = 0.0  # when it arrived (time.monotonic())
        self.peers = peers  # distributed.StopVotes with several processes, else None
        self.steps = 0  # the last step boundary passed: optimizer steps taken in this fit
        self.every_step = True  # whether each step's boundary is passed here (not so without the forward pre-hook)
        self.voted_at: Optional[int] = None  # the boundary this rank voted to stop after
        self.boundaries_since_vote = 0  # distinct deciding boundaries passed since the vote

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Inside the block these signals go through `on_signal` (in the main thread: elsewhere Python cannot take
        signals, and the block changes nothing). A handler a program set itself before is left in place."""
        if not _in_main_thread():
            yield
            return
        previous = {}
        for signum in (signal.SIGINT, *STOP_SIGNALS):
            current = signal.getsignal(signum)
            if current in (signal.SIG_DFL, None) or (signum == signal.SIGINT and current is signal.default_int_handler):
                previous[signum] = signal.signal(signum, self.on_signal)
        outer, StepBoundaries.running = StepBoundaries.running, self
        try:
            yield
        finally:
            StepBoundaries.running = outer
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def on_signal(self, signum, frame) -> None:
        if not self.holding:
            raise interrupt_for(signum)
        if self.pending is None:
            self.pending, self.pending_since = signum, time.monotonic()
            if self.peers is not None and self.every_step:  # else `steps` may be behind: the next boundary votes
                self._vote(self.steps + 1)

    def _vote(self, boundary: int) -> None:
        self.voted_at = boundary
        self.peers.vote(boundary)

    def raise_pending(self, steps: Optional[int] = None, decide: bool = True) -> None:
        """At a step boundary, after `steps` optimizer steps of this fit (None: the last one named): raises the signal
        that arrived before it, if any; with peers, once every rank voted before this boundary. decide False: a
        boundary only this rank passes (rank 0's step checkpoints), where the ranks cannot decide alike."""
        if steps is not None and steps != self.steps:
            self.steps = steps
            if self.voted_at is not None and decide:
                self.boundaries_since_vote += 1
        if self.pending is None:
            return
        if self.peers is not None:
            if self.voted_at is None:
                self._vote(self.steps)
            if not decide or not self._peers_stop():
                return
        raise interrupt_for(self.pending)

    def _peers_stop(self) -> bool:
        if self.peers.all_voted_before(self.steps):
            return True
        # A vote alone (its peers took no signal) stops the rank after a grace: waiting on would keep it training.
        return (self.boundaries_since_vote >= LONE_STOP_BOUNDARIES
                and time.monotonic() - self.pending_since >= HELD_STOP_GRACE_S)

    @classmethod
    def raise_held_in_peer_wait(cls, waited_s: float) -> None:
        """In a wait for other processes of `waited_s` seconds: raises the stop signal a held section keeps waiting,
        once it waited HELD_STOP_GRACE_S since the wait began and the signal came (a peer that died never comes; a
        rank waiting for it must answer torchrun's SIGTERM), VOTED_PEER_GRACE_S when every peer voted to stop too
        (they are alive and on their way). Outside one a signal was raised when it came, and is not raised again."""
        boundaries = cls.running
        if boundaries is None or not boundaries.holding or boundaries.pending is None:
            return
        grace = VOTED_PEER_GRACE_S if boundaries.peers is not None and boundaries.peers.all_voted() else HELD_STOP_GRACE_S
        if min(waited_s, time.monotonic() - boundaries.pending_since) >= grace:
            raise interrupt_for(boundaries.pending)

    @contextlib.contextmanager
    def holding_steps(self, module, accumulate_grad_batches: int, steps_before: int) -> Iterator[None]:
        """While an epoch's steps run (after `steps_before` optimizer steps of the fit): signals wait for the step's
        end; the first forward of each optimizer step (every accumulate_grad_batches-th call of `module`) raises one
        that arrived before it. module None: no such hook (a torch.compile'd model, whose compiled code would be
        specialised on the hook's call count); the signal then waits for the next log or step-checkpoint callback, or
        the epoch's end."""
        calls = 0

        def at_step_start(_module, _inputs):
            nonlocal calls
            if calls % accumulate_grad_batches == 0:
                self.raise_pending(steps_before + calls // accumulate_grad_batches)
            calls += 1

        hook = module.register_forward_pre_hook(at_step_start) if module is not None else None
        every_step, self.every_step = self.every_step, hook is not None
        try:
            with self.held():
                yield
        finally:
            self.every_step = every_step
            if hook is not None:
                hook.remove()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Signals during the block wait in `pending` (raised at the next step boundary or `raise_pending`): for
        what must be done whole or not at all, such as the epoch's row with its callbacks and checkpoints."""
        holding, self.holding = self.holding, True
        try:
            yield
        finally:
            self.holding = holding


@contextlib.contextmanager
def interrupts_deferred(replay: bool = True) -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGUSR1 during the block are held back and handled once the block is done, by the handler
    that was in place before it (during training: StepBoundaries'; outside: KeyboardInterrupt for Ctrl-C, the default
    action for the others), so a write is never cut in the middle. replay False: they are dropped instead (a run
    already stopping by a signal, writing interrupted.pt: a second Ctrl-C, or `timeout` and container runtimes
    sending SIGTERM to a process and its group alike). The main thread only: Python delivers signals there."""
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
        if received and replay:
            handler = previous[received[0]]
            if callable(handler):
                handler(received[0], None)
            elif handler in (signal.SIG_DFL, None):
                signal.raise_signal(received[0])  # the default action (SIGTERM ends the process), now the write is done


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
