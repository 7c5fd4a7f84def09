"""Seed 002's captcha recogniser on gpucore: a CNN with one classifier head per character, trained with the
multi-label soft-margin loss, AMP and gradient accumulation from flags, several GPUs with --devices.

    python examples/captcha/captcha_train.py --amp --batch-size 128 --grad-accum 2 --epochs 30
    torchrun --nproc_per_node=3 examples/captcha/captcha_train.py --amp          # one process per GPU of a 3-A100 server

Images are made on the fly with the `captcha` package when it is installed (pip install captcha), and by
gpucore's built-in generator (a bitmap font with jitter, colours, noise and lines) otherwise.
"""
import argparse
import sys

import torch

import gpucore
from gpucore.builtin_data import CAPTCHA_ALPHABET, synthetic_captcha


def captcha_package_data(count: int, length: int, seed: int):
    """Images from the captcha package (160 x 60), or None when it is not installed."""
    try:
        import numpy as np
        from captcha.image import ImageCaptcha
    except ImportError:
        return None
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, len(CAPTCHA_ALPHABET), (count, length), generator=generator)
    maker = ImageCaptcha(width=160, height=60)
    images = torch.stack([torch.from_numpy(np.asarray(maker.generate_image("".join(CAPTCHA_ALPHABET[i] for i in row))
                                                      .convert("RGB")).copy()).permute(2, 0, 1) for row in labels])
    return images, labels


def main(argv=None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    parser.add_argument("--amp", action="store_true", help="mixed precision (bf16 on A100/H100, fp16 on older GPUs)")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--train-size", type=int, default=20000)
    parser.add_argument("--val-size", type=int, default=2000)
    parser.add_argument("--length", type=int, default=4)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--dir", default="runs")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    packaged = None if args.devices > 1 else captcha_package_data(args.train_size + args.val_size, args.length,
                                                                   args.seed)
    if packaged is not None:
        images, labels = packaged
        train = (images[:args.train_size], labels[:args.train_size])
        val = (images[args.train_size:], labels[args.train_size:])
    elif args.devices == 1:
        train, val = synthetic_captcha(args.train_size, args.val_size, seed=args.seed, length=args.length)
    config = {
        "model": "captcha_cnn", "model_kwargs": {"heads": args.length, "classes": len(CAPTCHA_ALPHABET)},
        "loss": "multilabel_soft_margin", "heads": args.length, "epochs": args.epochs, "batch_size": args.batch_size,
        "accumulate_grad_batches": args.grad_accum, "precision": "auto" if args.amp else "32", "lr": args.lr,
        "schedule": "onecycle", "monitor": "val_seq_accuracy", "seed": args.seed, "run_dir": args.dir,
        "name": "captcha", "devices": args.devices,
    }
    if args.devices > 1:
        # The processes gpucore starts build model and data from the config (the built-in generator).
        config.update(data="synthetic_captcha", data_kwargs={"train_size": args.train_size, "val_size": args.val_size,
                                                             "seed": args.seed, "length": args.length})
        result = gpucore.train(config)
    else:
        result = gpucore.train(config, train_data=train, val_data=val)
    last = result.history[-1]
    print(f"captcha ({'captcha package' if packaged is not None else 'built-in generator'}): "
          f"val char accuracy {last['val_char_accuracy']:.3f}, whole-captcha accuracy {last['val_seq_accuracy']:.3f} "
          f"on {result.device} ({result.precision})")
    return last["val_char_accuracy"]


if __name__ == "__main__":
    main(sys.argv[1:])
