"""Where a training run stands, stated once: the batching (`Batching`) and the position in the run (`RunPosition`:
the epoch, the samples of its order trained before this pass, the optimizer steps of the pass, the run's steps as
the engine last reported them, the epoch's training time). As Lightning's loops keep theirs in Progress objects, the
fit loop owns one and saves it in every checkpoint (`state_dict`); everything else (the data's resume point, the
mixup draws' batch index, step checkpoints, the schedule at another world size, the loggers' step, a resumed epoch's
time) reads it from there.

Positions in an epoch are counted in samples of the epoch's order over all ranks, so a run resumes at any world
size; the engine counts the optimizer steps (windows of accumulate_grad_batches micro-batches) of a pass and reports
them back."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Optional, Tuple

from ..errors import ConfigError


@dataclass(frozen=True)
class Batching:
    """How a run batches now: config keys batch_size and accumulate_grad_batches, until an out-of-memory retry
    halves the one and doubles the other (the same samples per optimizer step). Checkpoints keep it, so a resumed
    run serves the rest of its epoch in the batches it was trained in."""

    batch_size: int
    accumulate_grad_batches: int

    @classmethod
    def of(cls, config) -> "Batching":
        return cls(config.batch_size, config.accumulate_grad_batches)

    def halved(self) -> "Batching":
        return Batching(self.batch_size // 2, self.accumulate_grad_batches * 2)

    def to_dict(self) -> dict:
        return {"batch_size": self.batch_size, "accumulate_grad_batches": self.accumulate_grad_batches}

    def batch_samples(self, world_size: int) -> int:
        """Samples of the epoch's order one batch takes over all ranks."""
        return self.batch_size * world_size

    def samples_per_step(self, world_size: int) -> int:
        """Samples of the epoch's order one optimizer step takes over all ranks: the effective batch (DDP averages
        the ranks' gradients)."""
        return self.batch_samples(world_size) * self.accumulate_grad_batches

    def steps_in(self, batches: int) -> int:
        """Optimizer steps over `batches` micro-batches of one rank: the last window may be short."""
        return math.ceil(batches / self.accumulate_grad_batches)

    def batches_before(self, first_sample: int, world_size: int) -> Tuple[int, int]:
        """(whole batches of one rank, samples left over) before sample `first_sample` of the epoch's order."""
        return divmod(first_sample, self.batch_samples(world_size))


class RunPosition:
    """The run's position: `epoch` (epochs trained: the current one's index), `start_sample` (samples of its order
    over all ranks trained before this pass over it: a resume mid-epoch), `steps_in_pass` of `pass_steps` (optimizer
    steps of this pass done, as the engine reports them) and the run's optimizer steps taken and skipped as of the
    engine's last host read (`steps_taken`, `steps_skipped`), and the epoch's training time: `seconds_before_pass`
    (the time its parts before a resume trained, from the checkpoint) and this pass's clock (`start_clock`).
    `continues_metrics`: the engine holds the epoch's training-metric sums of its part before this pass (a
    single-process resume mid-epoch restored them), which the pass goes on from (an out-of-memory retry too: it
    restores the engine's state of the pass's start).
    `unrecorded_row`: the epoch's training metrics (its metrics.jsonl row before validation) from the end of its pass
    until the row is written: a signal in between (in validation) keeps them in interrupted.pt, and the resumed run
    validates and records that epoch before it trains the next."""

    def __init__(self, batching: Batching, world_size: int):
        self.batching = batching
        self.world_size = world_size
        self.epoch = self.start_epoch = 0  # start_epoch: where this process began (a resume's epoch)
        self.start_sample = 0
        self.pass_steps: Optional[int] = None  # None until the engine begins the epoch's pass
        self.steps_in_pass = 0
        self.steps_taken = self.steps_skipped = 0
        self.seconds_before_pass = 0.0
        self.pass_started: Optional[float] = None  # time.perf_counter() when this process's pass began
        self.continues_metrics = False
        self.unrecorded_row: Optional[dict] = None

    # ---- derived facts --------------------------------------------------------------------------------------
    def samples_per_step(self) -> int:
        return self.batching.samples_per_step(self.world_size)

    def steps_before_pass(self) -> int:
        """Optimizer steps of the epoch trained before this pass."""
        return self.start_sample // self.samples_per_step()

    def first_batch(self) -> int:
        """This rank's batches of the epoch before this pass: where the mixup draws go on."""
        return self.batching.batches_before(self.start_sample, self.world_size)[0]

    def step_in_epoch(self, steps_in_pass: int) -> int:
        """The epoch's optimizer step (from 1) after `steps_in_pass` steps of this pass."""
        return self.steps_before_pass() + steps_in_pass

    def samples_consumed(self) -> int:
        """Samples of the epoch's order over all ranks trained after the steps of this pass done so far."""
        return self.start_sample + self.steps_in_pass * self.samples_per_step()

    def epoch_seconds(self) -> float:
        """The time the epoch has trained so far: before this pass (a resume mid-epoch) and in it; what an epoch's
        epoch_time_s holds once it ends, as for one never interrupted."""
        running = time.perf_counter() - self.pass_started if self.pass_started is not None else 0.0
        return self.seconds_before_pass + running

    def pass_complete(self) -> bool:
        return self.pass_steps is not None and self.steps_in_pass >= self.pass_steps

    def run_step(self, steps_per_epoch: int) -> int:
        """The optimizer step this world size stands at: every epoch before, and this one's steps before the pass
        (all of them once the pass is complete)."""
        if self.pass_complete():
            return (self.epoch + 1) * steps_per_epoch
        return self.epoch * steps_per_epoch + self.steps_before_pass()

    # ---- changes --------------------------------------------------------------------------------------------
    def start_clock(self) -> None:
        """This process's pass over the epoch begins now (also when an out-of-memory retry starts it over)."""
        self.pass_started = time.perf_counter()

    def begin_pass(self, batches: int) -> None:
        """The engine begins the epoch's pass over this rank's `batches` remaining micro-batches."""
        self.pass_steps = self.batching.steps_in(batches)
        self.steps_in_pass = 0

    def restart_pass(self, batching: Batching) -> None:
        """The pass starts over in another batching (an out-of-memory retry)."""
        self.batching = batching
        self.pass_steps, self.steps_in_pass = None, 0

    def steps_done(self, steps_in_pass: int) -> None:
        self.steps_in_pass = steps_in_pass

    def engine_read(self, steps_taken: int, steps_skipped: int) -> None:
        """The run's step counts as a host read of the engine found them."""
        self.steps_taken, self.steps_skipped = int(steps_taken), int(steps_skipped)

    def next_epoch(self) -> None:
        self.epoch += 1
        self.start_sample = 0
        self.pass_steps, self.steps_in_pass = None, 0
        self.seconds_before_pass, self.pass_started = 0.0, None
        self.continues_metrics = False
        self.unrecorded_row = None

    # ---- checkpoints ----------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The position after the last optimizer step done: the next epoch's start once every step of the pass is
        done (also when a signal came in its last step or in validation, before the epoch's row: then with that
        row's training part, `unrecorded_row`), else the samples trained so far and the time that took
        (`epoch_seconds`: a resume's epoch then counts it)."""
        state = {"world_size": self.world_size, "batching": self.batching.to_dict()}
        if self.pass_complete():
            state.update(epoch=self.epoch + 1, samples_consumed=0, epoch_seconds=0.0)
            if self.unrecorded_row is not None:
                state["unrecorded_row"] = dict(self.unrecorded_row)
        else:
            state.update(epoch=self.epoch, samples_consumed=self.samples_consumed(), epoch_seconds=self.epoch_seconds())
        return state

    def load_state_dict(self, state: dict) -> None:
        """Goes on from a checkpoint's position (written at this or another world size; its batching)."""
        self.epoch = self.start_epoch = int(state["epoch"])
        self.start_sample = int(state["samples_consumed"])
        self.seconds_before_pass = float(state.get("epoch_seconds", 0.0))  # checkpoints from before it was kept: 0
        self.batching = Batching(**state["batching"])
        self.pass_steps, self.steps_in_pass = None, 0
        self.pass_started = None
        self.unrecorded_row = state.get("unrecorded_row")
        if self.unrecorded_row is not None:  # the epoch before was trained, its row not written: it ends first
            self.epoch = self.start_epoch = self.epoch - 1
            self.pass_steps = 0  # its pass is complete


def migrated_samples_consumed(checkpoint: dict) -> int:
    """samples_consumed of a checkpoint from before it was kept: those counted `position`, batches per rank."""
    batching = Batching(**checkpoint["batching"])
    return checkpoint["position"] * batching.batch_samples(int(checkpoint["world_size"]))


def check_whole_batches(first_sample: int, batch_size: int, world_size: int, epoch: int) -> int:
    """This rank's whole batches of `batch_size` before sample `first_sample` of epoch `epoch`: where a torch loader,
    which can only skip batches, resumes. ConfigError when the position falls inside a batch."""
    batches, rest = Batching(batch_size, 1).batches_before(first_sample, world_size)
    if rest:
        raise ConfigError(f"data position: sample {first_sample} of epoch {epoch} is not a whole number of batches of "
                          f"{batch_size} x {world_size} processes: a checkpoint of another batch size or world "
                          "size? (a torch Dataset or DataLoader resumes only at its own)")
    return batches
