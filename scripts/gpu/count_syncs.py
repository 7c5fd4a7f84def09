"""Counts host syncs in one epoch of `gpucore.train` on CUDA with torch's sync debugger.

    python scripts/gpu/count_syncs.py [--steps 150]

Prints "N host syncs in an epoch of S optimizer steps (M inside steps)": syncs reported while the
training loop ran, and how many of them came from inside the steps (anything beyond the end-of-epoch
reads, the validation read and the checkpoint write).
"""
import argparse
import sys
import tempfile
import warnings

import torch

import gpucore

# Reads the loop does on purpose once per epoch: metrics, counters, validation, the checkpoint copy.
END_OF_EPOCH_READS = 12


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("count_syncs: no CUDA device", file=sys.stderr)
        return 2
    batch = 64
    with tempfile.TemporaryDirectory() as run_dir, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every sync, not one per source line
        torch.cuda.set_sync_debug_mode("warn")
        result = gpucore.train(dict(run_dir=run_dir, progress=False, epochs=1, device="cuda", batch_size=batch,
                                    data="synthetic_fashion", log_every_n_steps=10**6, val_fraction=0,
                                    data_kwargs={"train_size": args.steps * batch, "val_size": 0}))
        torch.cuda.set_sync_debug_mode("default")
    syncs = sum("synchronizing CUDA operation" in str(w.message) for w in caught)
    inside = max(0, syncs - END_OF_EPOCH_READS)
    print(f"{syncs} host syncs in an epoch of {result.steps} optimizer steps ({inside} inside steps); "
          f"gpucore counted {result.host_syncs} host reads")
    return 0 if inside == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
