"""Guide 003's mnist-gpu.py on gpucore: the same flags, CUDA > MPS > CPU chosen (and explained) by gpucore,
the training loop, AMP/TF32, checkpoints and logs in gpucore's C++ core.

    python examples/fashion_mnist/mnist_gpu.py --epochs 10 --save-model        # Fashion-MNIST where gpucore finds it
    python examples/fashion_mnist/mnist_gpu.py --dataset data/FashionMNIST/raw --epochs 10
    python examples/fashion_mnist/mnist_gpu.py --synthetic --epochs 3          # no download, generated data

--dataset is a folder with the four Fashion-MNIST IDX files (train-images-idx3-ubyte[.gz],
train-labels-idx1-ubyte[.gz], t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]); without it gpucore's
`data: fashion_mnist` looks in $GPUCORE_FASHION_MNIST, /usr/share/datasets/fashion-mnist (Debian's
dataset-fashion-mnist) and ~/.cache/gpucore/fashion-mnist. The test set is the validation split.
"""
import argparse
import os
import shutil
import sys

import torch

import gpucore

IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Fashion-MNIST on gpucore (the flags of the usual mnist-gpu.py script)")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--test-batch-size", type=int, default=500)
    parser.add_argument("--lr", type=float, default=0.002)
    parser.add_argument("--momentum", type=float, default=None, help="use SGD with this momentum (default: AdamW)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-cuda", action="store_true", help="never use CUDA")
    parser.add_argument("--no-mps", action="store_true", help="never use Apple's MPS")
    parser.add_argument("--save-model", action="store_true", help="also save the best weights as a plain state_dict")
    parser.add_argument("--save-model-dir", default="./models")
    parser.add_argument("--dataset", help="folder of the Fashion-MNIST IDX files (default: where gpucore finds them)")
    parser.add_argument("--dir", default="./runs", help="where gpucore writes the run (checkpoints, logs)")
    parser.add_argument("--log-interval", type=int, default=50, help="optimizer steps between progress updates")
    parser.add_argument("--synthetic", action="store_true", help="train on gpucore's generated Fashion-MNIST-shaped data")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.synthetic:
        data = "synthetic_fashion"
    elif args.dataset is None:
        data = "fashion_mnist"
    else:
        present = [name for name in IDX_FILES
                   if any(os.path.isfile(os.path.join(args.dataset, name + ext)) for ext in ("", ".gz"))]
        if len(present) != len(IDX_FILES):
            missing = [name for name in IDX_FILES if name not in present]
            print(f"Fashion-MNIST is not in '{args.dataset}' (missing {', '.join(missing)}). Put the four IDX files "
                  "there (from the Fashion-MNIST release, .gz or not), point --dataset at them, or run with "
                  "--synthetic.", file=sys.stderr)
            return 2
        data = args.dataset
    config = {
        "model": "fashion_mnist_cnn", "data": data, "epochs": args.epochs, "batch_size": args.batch_size,
        "eval_batch_size": args.test_batch_size, "lr": args.lr, "seed": args.seed, "no_cuda": args.no_cuda,
        "no_mps": args.no_mps, "run_dir": args.dir, "name": "fashion_mnist", "log_every_n_steps": args.log_interval,
        "schedule": "cosine", "weight_decay": 0.05, "label_smoothing": 0.05,
    }
    if args.momentum is not None:
        config.update(optimizer="sgd", momentum=args.momentum, weight_decay=5e-4)
    result = gpucore.train(config)
    print(f"best {result.monitor} {result.best_metric:.4f} (epoch {result.best_epoch}) on {result.device}, "
          f"precision {result.precision}, {result.samples_per_second:.0f} samples/s; run in {result.run_dir}")
    if args.save_model:
        os.makedirs(args.save_model_dir, exist_ok=True)
        best = torch.load(os.path.join(result.checkpoint_dir, "best.pt"), weights_only=True)
        target = os.path.join(args.save_model_dir, "fashion_mnist_cnn.pt")
        torch.save(best["model"], target + ".tmp")
        shutil.move(target + ".tmp", target)
        print(f"saved the best weights to {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
