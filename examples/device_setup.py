"""A seed-style training script (mnist-gpu.py's flags) that lets gpucore pick the device and precision.

    python examples/device_setup.py [--no-cuda] [--no-mps] [--device cuda:1] [--precision auto] [--steps 50]

Until `gpucore.train` lands, this is how an existing script uses gpucore: the device choice (with
the reason, and a warning that says why when a GPU cannot be used), the precision policy (autocast
dtype, loss scaling, TF32, cuDNN benchmark) and memory statistics. The model and data are small and
synthetic (Fashion-MNIST-shaped), so it runs offline anywhere.
"""
import argparse
import json

import torch
from torch import nn

import gpucore


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 10),
    )


def synthetic_batches(steps: int, batch_size: int, device: torch.device, seed: int):
    """Ten fixed class templates plus noise: learnable, so the loss must fall."""
    generator = torch.Generator().manual_seed(seed)
    templates = torch.rand(10, 1, 28, 28, generator=generator)
    for _ in range(steps):
        labels = torch.randint(0, 10, (batch_size,), generator=generator)
        images = templates[labels] + 0.3 * torch.randn(batch_size, 1, 28, 28, generator=generator)
        yield images.to(device, non_blocking=True), labels.to(device, non_blocking=True)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--no-cuda", action="store_true")
    parser.add_argument("--no-mps", action="store_true")
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    choice = gpucore.select_device(args.device, no_cuda=args.no_cuda, no_mps=args.no_mps)
    policy = gpucore.resolve_precision(args.precision, choice.device)
    policy.apply()
    print(f"device: {choice}")
    print(f"precision: {policy.precision} ({policy.reason})")

    torch.manual_seed(args.seed)
    model = make_model().to(choice.device, dtype=policy.param_dtype)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    scaler = torch.amp.GradScaler(choice.device.type, enabled=policy.loss_scaling)
    losses = []
    for images, labels in synthetic_batches(args.steps, args.batch_size, choice.device, args.seed):
        with torch.autocast(choice.device.type, dtype=policy.autocast_dtype, enabled=policy.autocast_dtype is not None):
            loss = nn.functional.cross_entropy(model(images.to(policy.param_dtype)), labels)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.detach())
    losses = torch.stack(losses).float().cpu()  # one host sync for the whole run
    summary = {
        "device": str(choice.device),
        "precision": policy.precision,
        "first_loss": losses[:5].mean().item(),
        "last_loss": losses[-5:].mean().item(),
        "memory": gpucore.memory_stats(choice.device),
    }
    print(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    main()
