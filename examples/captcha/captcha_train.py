"""Guide 002's captcha recogniser on gpucore, trained on the `captcha` package's images: a convolutional
recogniser that reads the image column by column, trained with CTC, with random crops as augmentation.

    python examples/captcha/captcha_train.py --amp          # 98.2% of 2,000 held-out captchas read whole (README)
    torchrun --nproc_per_node=3 examples/captcha/captcha_train.py --amp --batch-size 128 --epochs 3   # a 3-A100 server

Images (160 x 60, 4 characters of 0-9a-z, grey) come from the `captcha` package (pip install captcha); they are
generated once on all cores and cached as an .npz in --cache-dir (x_train, y_train, x_val, y_val; y holds indices
into the alphabet). The held-out images are generated apart from the training images. Without the package, gpucore's
built-in generator (a bitmap font with jitter, colours, noise and lines) stands in, with a warning.
"""
import argparse
import os
import sys
import warnings
from typing import Optional

import torch
from torch import nn

import gpucore
from gpucore.data.synthetic import CAPTCHA_ALPHABET, synthetic_captcha

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from captcha_images import captcha_package_data  # noqa: E402


def _block(channels_in: int, channels_out: int) -> list:
    return [nn.Conv2d(channels_in, channels_out, 3, padding=1, bias=False), nn.BatchNorm2d(channels_out),
            nn.ReLU(inplace=True)]


class CaptchaCRNN(nn.Module):
    """Conv stack that keeps the image's columns (60 x 160 in, 3 x 20 out), a bidirectional GRU along the 20 columns,
    and class scores per column: (N, 20, classes) logits for CTC, class 0 the blank."""

    def __init__(self, classes: int = len(CAPTCHA_ALPHABET) + 1, width: int = 16, in_channels: int = 1,
                 height: int = 60, hidden: int = 128):
        super().__init__()
        c = width
        self.features = nn.Sequential(
            *_block(in_channels, c), nn.MaxPool2d(2),
            *_block(c, 2 * c), nn.MaxPool2d(2),
            *_block(2 * c, 4 * c), *_block(4 * c, 4 * c), nn.MaxPool2d(2),
            *_block(4 * c, 8 * c), nn.MaxPool2d((2, 1)),
        )
        self.dropout = nn.Dropout(0.2)
        self.rnn = nn.GRU(8 * c * (height // 16), hidden, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, x):
        features = self.features(x)
        n, c, h, w = features.shape
        columns = features.permute(0, 3, 1, 2).reshape(n, w, c * h)
        return self.head(self.rnn(self.dropout(columns))[0])


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    parser.add_argument("--amp", action="store_true", help="mixed precision (bf16 on A100/H100 and bf16 CPUs, fp16 on "
                                                           "older GPUs); without it float32")
    parser.add_argument("--lr", type=float, default=3e-3, help="onecycle's peak learning rate")
    parser.add_argument("--width", type=int, default=16, help="channels of the first conv layer (then x2, x4, x8)")
    parser.add_argument("--crop-padding", type=int, default=6, help="random shifts of up to this many pixels")
    parser.add_argument("--train-size", type=int, default=60000)
    parser.add_argument("--val-size", type=int, default=2000)
    parser.add_argument("--length", type=int, default=4)
    parser.add_argument("--cache-dir", default="~/.cache/gpucore/captcha", help="where generated images are kept")
    parser.add_argument("--dir", default="runs")
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights, order and augmentation")
    parser.add_argument("--data-seed", type=int, help="seed of the generated images (default: --seed); several "
                                                      "--seed values on one --data-seed share the cached images")
    return parser


def captcha_data(args) -> tuple:
    """((x_train, y_train), (x_val, y_val)) from the captcha package (or, without it, the built-in generator)."""
    data_seed = args.seed if args.data_seed is None else args.data_seed
    packaged = captcha_package_data(args.train_size, args.val_size, args.length, data_seed, args.cache_dir)
    if packaged is None:
        warnings.warn("the captcha package is not installed (pip install captcha): training on gpucore's built-in "
                      "captcha generator instead, whose accuracy does not carry over to real captchas", RuntimeWarning)
        packaged = synthetic_captcha(args.train_size, args.val_size, seed=data_seed, length=args.length)
    return packaged


def train_captcha(args, data: tuple, overrides: Optional[dict] = None) -> gpucore.TrainResult:
    """The recogniser trained on `data` as `args` say, config keys in `overrides` on top (bench/recipe_accuracy.py)."""
    (x_train, y_train), (x_val, y_val) = data
    torch.manual_seed(args.seed)  # the model's initial weights
    model = CaptchaCRNN(width=args.width, in_channels=x_train.shape[1])
    config = {"loss": "ctc", "epochs": args.epochs, "batch_size": args.batch_size,
              "accumulate_grad_batches": args.grad_accum, "precision": "auto" if args.amp else "32", "lr": args.lr,
              "schedule": "onecycle", "weight_decay": 0.05, "clip_grad_norm": 5.0, "crop_padding": args.crop_padding,
              "monitor": "val_seq_accuracy", "seed": args.seed, "run_dir": args.dir, "name": "captcha",
              **(overrides or {})}
    return gpucore.train(config, model=model, train_data=(x_train, y_train + 1),
                         val_data=(x_val, y_val + 1))  # class 0 is CTC's blank


def main(argv=None) -> float:
    args = arguments().parse_args(argv)
    data = captcha_data(args)
    result = train_captcha(args, data)
    last = result.history[-1]
    print(f"captcha: whole-captcha accuracy {last['val_seq_accuracy']:.4f} on {len(data[1][1])} held-out images "
          f"(training {last['train_seq_accuracy']:.4f}) after {len(result.history)} epochs on {result.device} "
          f"({result.precision})")
    return last["val_seq_accuracy"]


if __name__ == "__main__":
    main(sys.argv[1:])
