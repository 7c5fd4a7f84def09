"""Guide 000's task on gpucore: find the handwriting on cards (binary segmentation, Dice + BCE loss, IoU), on
generated cards: printed-looking text blocks (background) and pen strokes (foreground). Then Grad-CAM for the
segmentation target shows what the network looked at. The model: a small built-in U-Net, the guide's own
SegFormer (`--model transformers:SegformerForSemanticSegmentation`, mit-b0's layout at half its widths so
it trains on a CPU) or segmentation_models_pytorch's U-Net (`--model smp:Unet`, a ResNet-18 encoder).
`--data fashion_mnist_foreground` trains on real images instead: Fashion-MNIST's garments pasted onto textured
backgrounds (gpucore's built-in set of that name), validated on garments of its test files.

    python examples/card_handwriting/train_segmentation.py [--model unet] [--data cards] [--epochs 10] [--images 2000]
"""
import argparse
import os
import sys

import torch
from torch import nn

import gpucore
from gpucore.cam import segmentation_target
from gpucore.data.tensor_inputs import model_inputs


def handwriting_cards(count: int, size: int = 64, seed: int = 0):
    """uint8 cards (N, 3, size, size) and stroke masks (N, size, size): printed blocks are not handwriting."""
    generator = torch.Generator().manual_seed(seed)
    rand = lambda *shape: torch.rand(*shape, generator=generator)  # noqa: E731
    images = (200 + 40 * rand(count, 1, size, size)).expand(count, 3, size, size).clone()
    masks = torch.zeros(count, size, size)
    for i in range(count):
        for _ in range(int(rand(1) * 3) + 1):  # printed text: rows of small dark boxes
            row, start = int(rand(1) * (size - 6)), int(rand(1) * size / 2)
            for k in range(int(rand(1) * 6) + 2):
                left = start + 5 * k
                if left + 3 < size:
                    images[i, :, row:row + 4, left:left + 3] = 40
        for _ in range(int(rand(1) * 2) + 1):  # handwriting: thick quadratic Bezier strokes in pen colours
            p0, p1, p2 = (rand(2) * size for _ in range(3))
            t = torch.linspace(0, 1, 4 * size)[:, None]
            points = ((1 - t) ** 2 * p0 + 2 * (1 - t) * t * p1 + t ** 2 * p2).round().long()
            ink = torch.tensor([20.0, 30.0, 150.0]) if rand(1) < 0.5 else torch.tensor([25.0, 25.0, 25.0])
            for dy in (0, 1):
                for dx in (0, 1):
                    y = (points[:, 0] + dy).clamp(0, size - 1)
                    x = (points[:, 1] + dx).clamp(0, size - 1)
                    images[i, :, y, x] = ink[:, None]
                    masks[i, y, x] = 1.0
    return images.clamp(0, 255).to(torch.uint8), masks


class UNet(nn.Module):
    """Two-level U-Net, (N, 3, H, W) -> (N, 1, H, W) logits."""

    def __init__(self, width: int = 16):
        super().__init__()

        def block(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                                 nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

        self.down1, self.down2 = block(3, width), block(width, 2 * width)
        self.bottleneck = block(2 * width, 4 * width)
        self.up2, self.dec2 = nn.ConvTranspose2d(4 * width, 2 * width, 2, 2), block(4 * width, 2 * width)
        self.up1, self.dec1 = nn.ConvTranspose2d(2 * width, width, 2, 2), block(2 * width, width)
        self.head = nn.Conv2d(width, 1, 1)

    def forward(self, x):
        d1 = self.down1(x)
        d2 = self.down2(nn.functional.max_pool2d(d1, 2))
        b = self.bottleneck(nn.functional.max_pool2d(d2, 2))
        u2 = self.dec2(torch.cat([self.up2(b), d2], 1))
        u1 = self.dec1(torch.cat([self.up1(u2), d1], 1))
        return self.head(u1)


# Each model by name with its config, and the layer Grad-CAM explains (the decoder's last spatial features).
MODELS = {
    "unet": (None, {}, "bottleneck"),
    "transformers:SegformerForSemanticSegmentation": (
        "transformers:SegformerForSemanticSegmentation",
        {"num_labels": 1, "depths": [2, 2, 2, 2], "hidden_sizes": [16, 32, 80, 128], "decoder_hidden_size": 64},
        "decode_head.linear_fuse"),
    "smp:Unet": ("smp:Unet", {"encoder_name": "resnet18", "encoder_depth": 4, "decoder_channels": [128, 64, 32, 16],
                              "classes": 1}, "decoder"),
}


def main(argv=None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=list(MODELS), default="unet")
    parser.add_argument("--data", choices=["cards", "fashion_mnist_foreground"], default="cards")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--images", type=int, default=2000, help="training images; a tenth more are held out")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--dir", default="runs")
    parser.add_argument("--out", default="cards_out")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)  # the model's initial weights
    held_out = max(1, args.images // 10)
    if args.data == "cards":
        images, masks = handwriting_cards(args.images + held_out)
        (train_x, train_y), (images, masks) = (images[held_out:], masks[held_out:]), (images[:held_out], masks[:held_out])
    else:
        (train_x, train_y), (images, masks) = gpucore.data.builtin.fashion_mnist_foreground(
            train_size=args.images, val_size=held_out, seed=args.seed)
    name, kwargs, cam_layer = MODELS[args.model]
    model = UNet() if name is None else gpucore.models.build_model(name, kwargs)
    result = gpucore.train(
        {"loss": "dice_bce", "epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr,
         "schedule": "cosine", "monitor": "val_iou", "run_dir": args.dir, "name": args.data, "seed": args.seed},
        model=model, train_data=(train_x, train_y), val_data=(images, masks))
    print(f"best val IoU {result.best_metric:.3f} (epoch {result.best_epoch}) on {result.device}")

    # What the model looked at to find the foreground of the first held-out images.
    device = torch.device(result.device)
    checkpoint = torch.load(os.path.join(result.checkpoint_dir, "best.pt"), map_location=device, weights_only=True)
    model.load_state_dict(checkpoint["model"])
    x = model_inputs(images[:8].to(device), checkpoint["input_stats"])
    cams = gpucore.gradcam(model, cam_layer, x, targets=segmentation_target(0, masks[:8].to(device)))
    paths = cams.save(args.out, images=images[:8].to(device))
    print(f"{len(paths)} Grad-CAM overlays in {args.out}")
    return result.best_metric


if __name__ == "__main__":
    sys.exit(0 if main(sys.argv[1:]) >= 0 else 1)
