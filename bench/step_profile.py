"""Where a training step's time goes, by torch.profiler: the speedrun's network (examples/configs/
fashion_mnist_speedrun.yaml: fast_cnn, its batch, on 28 x 28 inputs) and ResNet-18 at 224 px with its backbone
frozen and with all layers training, each on batches held in memory, in the precision and layout gpucore's `auto`
picks, with fused AdamW: the step the plain loops run.

    python -m bench profile [--steps 10] [--batch-size 32] [--size 224] [--block-rounds 20] [--block-batch N]
                            [--skip-resnet] [--json out.json]

Per model: ms per step, and the share of the step's self CPU time by op group (convolution, batch norm, max pool,
ReLU, the optimizer, the rest), with the ten ops taking most. The groups are what the leads would save at most: a
fused max-pool + BatchNorm + ReLU op saves part of those three groups' share (their memory passes, not the
convolutions'); caching a frozen backbone's features saves the backbone's forward, but only without random
transforms (with RandomResizedCrop and ColorJitter every epoch's features differ).

The speedrun's network is profiled twice: with its max-pool + BatchNorm + ReLU blocks fused
(gpucore::maxpool_bn_relu, FastCNN's default) and as three torch modules (model_kwargs fused: false). Then the
blocks alone (`--block-rounds`, 0: not run): the three blocks' forward + backward at the speedrun's shapes (its
batch, or `--block-batch`; 32 x 28 x 28, 64 x 14 x 14, 128 x 7 x 7 in), fused against MaxPool2d + BatchNorm2d +
ReLU, in training mode, interleaved round by round, channels-last and contiguous, bfloat16 where the CPU has native
bfloat16 (else float32); the median of the rounds. `--skip-resnet` leaves out the two ResNet-18 profiles.
"""
import argparse
import collections
import functools
import os
import statistics
import sys
import time

import torch
from torch import nn

import gpucore
from gpucore.config import load_config
from gpucore.models import build_model
from gpucore.device.placement import resolve_channels_last
from gpucore.device.select import cpu_bf16_isa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import device_label, import_torchvision, result_json, sync  # noqa: E402

GROUPS = (("convolution", ("conv", "mkldnn_convolution")), ("fused max pool + BN + ReLU", ("maxpool_bn_relu",)),
          ("batch norm", ("batch_norm",)),
          ("max pool", ("max_pool",)), ("ReLU", ("relu", "threshold", "clamp_min")),
          ("dtype and layout copies", ("copy_", "_to_copy")),
          ("optimizer", ("adam", "_foreach", "lerp", "addcdiv", "sqrt")))
SPEEDRUN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "configs",
                        "fashion_mnist_speedrun.yaml")


def group_of(name: str) -> str:
    lowered = name.lower()
    for group, keys in GROUPS:
        if any(key in lowered for key in keys):
            return group
    return "rest"


def profile_step(model, x, y, steps, frozen=False):
    device = x.device
    policy = gpucore.resolve_precision("auto", device)
    policy.apply()
    layout = torch.channels_last if resolve_channels_last("auto", device, model) else torch.preserve_format
    model = model.to(device, memory_format=layout).train()
    x = x.contiguous(memory_format=layout)
    if frozen:
        for name, param in model.named_parameters():
            param.requires_grad_(name.startswith("fc."))
        for name, module in model.named_modules():
            if isinstance(module, nn.BatchNorm2d):
                module.eval()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3, fused=True)
    dtype = policy.autocast_dtype

    def step():
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for _ in range(3):  # oneDNN's kernels created, the allocator grown
        step()
    start = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        for _ in range(steps):
            step()
    ms = (time.perf_counter() - start) * 1000 / steps
    events = [e for e in profile.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    groups = collections.Counter()
    for event in events:
        groups[group_of(event.key)] += event.self_cpu_time_total
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:10]
    return {"ms_per_step_profiled": ms, "precision": policy.precision, "channels_last": layout == torch.channels_last,
            "group_share": {g: groups[g] / total for g, _ in (*GROUPS, ("rest", ()))},
            "top_ops": [(e.key, e.self_cpu_time_total / total) for e in top]}


def time_blocks(device, batch, rounds, iterations=5):
    """ms per forward + backward of the speedrun's three pool + BN + ReLU blocks, fused and unfused, by layout."""
    from gpucore.models.fused_blocks import pool_norm_relu
    native_bf16 = device.type == "cuda" or bool(cpu_bf16_isa())
    dtype = torch.bfloat16 if native_bf16 else torch.float32
    shapes = [(batch, 32, 28, 28), (batch, 64, 14, 14), (batch, 128, 7, 7)]
    results = {}
    for layout in (torch.channels_last, torch.contiguous_format):
        torch.manual_seed(0)
        inputs = [torch.randn(shape, device=device, dtype=dtype).contiguous(memory_format=layout)
                  for shape in shapes]
        grads = [torch.randn((n, c, h // 2, w // 2), device=device, dtype=dtype).contiguous(memory_format=layout)
                 for n, c, h, w in shapes]
        blocks = {
            "unfused": [nn.Sequential(nn.MaxPool2d(2), nn.BatchNorm2d(c), nn.ReLU(inplace=True)).to(device).train()
                        for _, c, _, _ in shapes],
            "fused": [functools.partial(pool_norm_relu, nn.BatchNorm2d(c).to(device).train())
                      for _, c, _, _ in shapes],
        }

        def run(variant):
            for block, x, g in zip(blocks[variant], inputs, grads):
                x = x.detach().requires_grad_()
                block(x).backward(g)

        times = {variant: [] for variant in blocks}
        for _ in range(2):
            for variant in blocks:
                run(variant)
        for _ in range(rounds):
            for variant in blocks:  # interleaved: both see the same machine load
                sync(device)
                start = time.perf_counter()
                for _ in range(iterations):
                    run(variant)
                sync(device)
                times[variant].append((time.perf_counter() - start) * 1000 / iterations)
        name = "channels-last" if layout == torch.channels_last else "contiguous"
        results[name] = {variant: statistics.median(t) for variant, t in times.items()}
        results[name]["dtype"] = str(dtype).replace("torch.", "")
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32, help="ResNet-18's batch")
    parser.add_argument("--size", type=int, default=224, help="ResNet-18's input side")
    parser.add_argument("--block-rounds", type=int, default=20, help="rounds of the fused-block timing (0: none)")
    parser.add_argument("--block-batch", type=int, help="the fused-block timing's batch (default: the speedrun's)")
    parser.add_argument("--skip-resnet", action="store_true", help="profile the speedrun's network only")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    device = gpucore.select_device(args.device).device
    tv = import_torchvision()
    config = load_config(SPEEDRUN)
    torch.manual_seed(0)
    models = {
        f"speedrun {config.model}, batch {config.batch_size}, 28 px": (
            build_model(config.model, {**config.model_kwargs, "fused": True}), torch.randn(config.batch_size, 1, 28, 28),
            False),
        f"speedrun {config.model} unfused (fused: false), batch {config.batch_size}, 28 px": (
            build_model(config.model, {**config.model_kwargs, "fused": False}),
            torch.randn(config.batch_size, 1, 28, 28), False),
        f"ResNet-18 frozen backbone, batch {args.batch_size}, {args.size} px": (
            tv.models.resnet18(num_classes=10), torch.randn(args.batch_size, 3, args.size, args.size), True),
        f"ResNet-18 all layers, batch {args.batch_size}, {args.size} px": (
            tv.models.resnet18(num_classes=10), torch.randn(args.batch_size, 3, args.size, args.size), False),
    }
    if args.skip_resnet:
        models = {name: value for name, value in models.items() if "ResNet" not in name}
    results = {}
    for name, (model, x, frozen) in models.items():
        y = torch.randint(0, 10, (len(x),), device=device)
        r = results[name] = profile_step(model, x.to(device), y, args.steps, frozen)
        print(f"\n{name}: {r['ms_per_step_profiled']:.1f} ms/step under the profiler, {r['precision']}"
              f"{' + channels-last' if r['channels_last'] else ''}")
        print("  by group: " + ", ".join(f"{g} {share:.0%}" for g, share in r["group_share"].items()))
        print("  top ops:  " + ", ".join(f"{op} {share:.0%}" for op, share in r["top_ops"]))
    block_batch = args.block_batch or config.batch_size
    blocks = time_blocks(device, block_batch, args.block_rounds) if args.block_rounds > 0 else {}
    for layout, r in blocks.items():
        print(f"\nspeedrun's 3 pool + BN + ReLU blocks, forward + backward, batch {block_batch}, {layout} "
              f"{r['dtype']}: unfused {r['unfused']:.2f} ms, fused {r['fused']:.2f} ms "
              f"({r['unfused'] / r['fused']:.2f}x), median of {args.block_rounds} interleaved rounds")
    print(f"\n{device_label(device)}, torch {torch.__version__}")
    return result_json({"device": device_label(device), "steps": args.steps, "models": results, "blocks": blocks,
                        "block_batch": block_batch}, args.json)


if __name__ == "__main__":
    main()
