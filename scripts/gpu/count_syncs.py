"""Counts the host syncs of `gpucore.train` steps on CUDA with torch's sync debugger.

    python scripts/gpu/count_syncs.py [--steps 150]

Trains one epoch of steps/3 and one of `steps` optimizer steps (after a short warm-up run, so one-time
set-up such as copying the model to the GPU is not counted) and prints
"N host syncs in an epoch of S steps, M in one of S/3: P per step". Setting up, validating and
checkpointing sync a fixed number of times per epoch; only a difference between the two epochs is
a sync inside the steps. Exit status 1 if there is one.
"""
import argparse
import sys
import tempfile
import warnings

import torch

import gpucore

BATCH = 64


def syncs_in_one_epoch(steps: int) -> tuple[int, int]:
    """(syncs the debugger reported, optimizer steps taken) for a one-epoch run of `steps` steps."""
    with tempfile.TemporaryDirectory() as run_dir, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every sync, not one per source line
        torch.cuda.set_sync_debug_mode("warn")
        try:
            result = gpucore.train(dict(run_dir=run_dir, progress=False, epochs=1, device="cuda", batch_size=BATCH,
                                        data="synthetic_fashion", log_every_n_steps=10**6, val_fraction=0,
                                        data_kwargs={"train_size": steps * BATCH, "val_size": BATCH}))
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchronizing CUDA operation" in str(w.message) for w in caught), result.steps


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("count_syncs: no CUDA device", file=sys.stderr)
        return 2
    syncs_in_one_epoch(4)  # warm-up: CUDA context, cuDNN and cuBLAS handles, first kernel loads
    short_syncs, short_steps = syncs_in_one_epoch(max(1, args.steps // 3))
    long_syncs, long_steps = syncs_in_one_epoch(args.steps)
    per_step = (long_syncs - short_syncs) / (long_steps - short_steps)
    print(f"{long_syncs} host syncs in an epoch of {long_steps} steps, {short_syncs} in one of {short_steps}: "
          f"{per_step:g} per step")
    return 0 if long_syncs == short_syncs else 1


if __name__ == "__main__":
    sys.exit(main())
