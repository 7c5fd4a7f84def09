"""How long a step checkpoint holds the training thread: the host copy it waits for, against the whole synchronous
write (torch.save to a temporary file, fsync, rename) that the background thread does instead.

    python bench/checkpoint_bench.py [--params-millions 11] [--rounds 5] [--device auto]

The payload is what a checkpoint of an MLP with that many parameters and its AdamW state holds (weights, two
moments, step counters), built from the engine's own state() so the figures are gpucore's."""
import argparse
import os
import statistics
import tempfile
import time

import torch
from torch import nn

from gpucore import _C
from gpucore.checkpoint import host_snapshot, write_snapshot


def _payload(params_millions: float, device: torch.device):
    width = max(int((params_millions * 1e6 / 4) ** 0.5), 8)
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(4)]).to(device)
    config = _C.EngineConfig()
    config.device = device
    config.optimizer.kind = "adamw"
    engine = _C.Engine([_C.ParamGroup(list(model.parameters()), 0.01, 1.0)], config)
    inputs = torch.randn(8, width, device=device)
    source = _C.TensorBatches(inputs, torch.zeros(8, width, device=device), 8, False, False, 0, device)
    engine.train_epoch(source, model, lambda out, target: (out - target).pow(2).mean())  # the moments exist
    return model, engine, sum(p.numel() for p in model.parameters())


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params-millions", type=float, default=11.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args(argv)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    model, engine, params = _payload(args.params_millions, device)
    copies, writes = [], []
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "step.pt")
        for _ in range(args.rounds):
            start = time.perf_counter()
            snapshot = host_snapshot({"model": model.state_dict(), "engine": engine.state()}, copy=True)
            copies.append(time.perf_counter() - start)
            start = time.perf_counter()
            write_snapshot(path, snapshot)
            writes.append(time.perf_counter() - start)
        size = os.path.getsize(path)
    result = {"device": str(device), "parameters": params, "file_bytes": size,
              "host_copy_ms": statistics.median(copies) * 1e3, "write_ms": statistics.median(writes) * 1e3}
    result["training_thread_share"] = result["host_copy_ms"] / (result["host_copy_ms"] + result["write_ms"])
    print(f"{params / 1e6:.1f} M parameters, {size / 2**20:.0f} MiB checkpoint on {device}: the training thread waits "
          f"{result['host_copy_ms']:.1f} ms (host copy), the background thread writes for {result['write_ms']:.1f} ms "
          f"(median of {args.rounds}); a synchronous checkpoint would hold training for both")
    return result


if __name__ == "__main__":
    main()
