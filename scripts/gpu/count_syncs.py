"""Counts the host syncs of `gpucore.train` steps on CUDA with torch's sync debugger.

    python scripts/gpu/count_syncs.py [--steps 150]

For each configuration (plain; the transforms list, mixup/cutmix and EMA on; that with a step checkpoint
every 50 steps; cuda_graphs plain and with the transforms list, mixup/cutmix and EMA) trains one epoch of steps/3 and one of `steps` optimizer steps (after a short warm-up run,
so one-time set-up such as copying the model to the GPU is not counted) and prints
"CONFIG: N host syncs in an epoch of S steps, M in one of S/3: P per step". Setting up, validating and
checkpointing at the end of an epoch sync a fixed number of times per epoch; only a difference between
the two epochs is a sync inside the steps (or, with step checkpoints, in the step checkpoints: the
host copy of the state, one per checkpoint). Exit status 1 if a configuration without step checkpoints
syncs inside its steps.
"""
import argparse
import sys
import tempfile
import warnings

import torch

import gpucore

BATCH = 64
AUGMENTED = {
    "transforms": [{"RandomResizedCrop": {"size": 28, "scale": [0.6, 1.0]}}, "RandomHorizontalFlip",
                   {"ColorJitter": {"brightness": 0.2, "contrast": 0.2}}, {"RandomErasing": {"p": 0.25}}],
    "mixup_alpha": 0.2, "cutmix_alpha": 1.0, "ema_decay": 0.99,
}
CONFIGS = {
    "plain": {"cuda_graphs": False},  # eager steps; cuda_graphs auto (the default) would capture them
    "transforms+mixup+ema": dict(AUGMENTED, cuda_graphs=False),
    "transforms+mixup+ema, step checkpoint every 50": dict(AUGMENTED, checkpoint_every_n_steps=50, cuda_graphs=False),
    "cuda_graphs": {"cuda_graphs": True},
    "cuda_graphs, transforms+mixup+ema": dict(AUGMENTED, cuda_graphs=True),
}


def syncs_in_one_epoch(steps: int, extra: dict) -> tuple[int, int]:
    """(syncs the debugger reported, optimizer steps taken) for a one-epoch run of `steps` steps."""
    with tempfile.TemporaryDirectory() as run_dir, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every sync, not one per source line
        torch.cuda.set_sync_debug_mode("warn")
        try:
            result = gpucore.train(dict(run_dir=run_dir, progress=False, epochs=1, device="cuda", batch_size=BATCH,
                                        data="synthetic_fashion", log_every_n_steps=10**6, val_fraction=0,
                                        report=False, loggers=[],
                                        data_kwargs={"train_size": steps * BATCH, "val_size": BATCH}, **extra))
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
    failed = False
    for name, extra in CONFIGS.items():
        syncs_in_one_epoch(4, extra)  # warm-up: CUDA context, cuDNN and cuBLAS handles, first kernel loads
        short_syncs, short_steps = syncs_in_one_epoch(max(1, args.steps // 3), extra)
        long_syncs, long_steps = syncs_in_one_epoch(args.steps, extra)
        per_step = (long_syncs - short_syncs) / (long_steps - short_steps)
        print(f"{name}: {long_syncs} host syncs in an epoch of {long_steps} steps, {short_syncs} in one of "
              f"{short_steps}: {per_step:g} per step", flush=True)
        failed |= "checkpoint" not in name and long_syncs != short_syncs
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
