"""channels-last against the default (contiguous) memory format: one training step (forward under the device's
autocast, loss, backward, fused AdamW) of guide 003's Fashion-MNIST CNN, the speedrun's fast_cnn and torchvision's
ResNet-18 and ResNet-50 at 224 px, side by side in one run. This is the measurement config key `channels_last: auto`
rests on.

    python -m bench layout [--device auto] [--steps 30] [--rounds 5] [--models seeds_cnn,fast_cnn,resnet18,resnet50]

Per model, both layouts train on the same random batch; each round times `steps` steps of each layout, in turn
(CUDA events on a GPU, the host clock on a CPU), after warm-up steps that let cuDNN pick its algorithms. Reports the
median ms per step over the rounds and the ratio contiguous / channels-last (> 1: channels-last is faster).
"""
import argparse
import os
import statistics
import sys
import time

import torch
from torch import nn

import gpucore
from gpucore.models import build_model

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import device_label, import_torchvision, result_json, sync  # noqa: E402

# name -> (builds the model, input size C x H x W, batch size, classes)
MODELS = {
    "seeds_cnn": (lambda: build_model("fashion_mnist_cnn", {}), (1, 28, 28), 256, 10),
    "fast_cnn": (lambda: build_model("fast_cnn", {"widths": [32, 64, 128], "extra": [0, 1, 0]}), (1, 28, 28), 256, 10),
    "resnet18": (lambda: import_torchvision().models.resnet18(num_classes=100), (3, 224, 224), 64, 100),
    "resnet50": (lambda: import_torchvision().models.resnet50(num_classes=100), (3, 224, 224), 64, 100),
}
LAYOUTS = {"contiguous": torch.contiguous_format, "channels_last": torch.channels_last}


class Step:
    """One model in one memory format, with its optimizer and batch, ready to train."""

    def __init__(self, make, shape, batch, classes, layout, device, autocast_dtype):
        torch.manual_seed(0)
        self.model = make().to(device, memory_format=layout)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3, fused=device.type == "cuda")
        self.x = torch.randn(batch, *shape, device=device).contiguous(memory_format=layout)
        self.y = torch.randint(0, classes, (batch,), device=device)
        self.device, self.dtype = device, autocast_dtype

    def run(self, steps: int) -> None:
        for _ in range(steps):
            with torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype is not None):
                loss = nn.functional.cross_entropy(self.model(self.x), self.y)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()


def milliseconds_per_step(step: Step, steps: int) -> float:
    if step.device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step.run(steps)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / steps
    begin = time.perf_counter()
    step.run(steps)
    return 1000 * (time.perf_counter() - begin) / steps


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps per model and layout first")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batch", type=int, help="one batch size for every model (default: each model's)")
    parser.add_argument("--size", type=int, help="the ResNets' image size (default 224)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.models.split(",") if name.strip()]
    unknown = [name for name in names if name not in MODELS]
    if unknown:
        raise SystemExit(f"--models: unknown {unknown}; valid: {', '.join(MODELS)}")

    device = gpucore.select_device(args.device).device
    policy = gpucore.resolve_precision("auto", device)
    policy.apply()
    results = {}
    print(f"{device_label(device)}, torch {torch.__version__}, precision {policy.precision}; ms per training step "
          f"(median of {args.rounds} rounds of {args.steps} steps)")
    print(f"  {'model':<10}{'batch':>6}{'contiguous':>12}{'channels_last':>15}{'ratio':>8}")
    for name in names:
        make, shape, batch, classes = MODELS[name]
        if args.size and shape[0] == 3:
            shape = (3, args.size, args.size)
        batch = args.batch or batch
        steps = {layout: Step(make, shape, batch, classes, fmt, device, policy.autocast_dtype)
                 for layout, fmt in LAYOUTS.items()}
        for step in steps.values():
            step.run(args.warmup)
        sync(device)
        times = {layout: [] for layout in steps}
        for index in range(args.rounds):
            order = list(steps) if index % 2 == 0 else list(reversed(steps))  # each layout first in turn
            for layout in order:
                times[layout].append(milliseconds_per_step(steps[layout], args.steps))
        median = {layout: statistics.median(values) for layout, values in times.items()}
        ratio = median["contiguous"] / median["channels_last"]
        results[name] = {"batch": batch, "shape": list(shape), "ms_per_step": median, "times": times,
                         "channels_last_speedup": ratio}
        print(f"  {name:<10}{batch:>6}{median['contiguous']:>12.2f}{median['channels_last']:>15.2f}{ratio:>7.2f}x",
              flush=True)
        del steps
    return result_json({"device": device_label(device), "precision": policy.precision, "steps": args.steps,
                        "rounds": args.rounds, "models": results}, args.json)


if __name__ == "__main__":
    main()
