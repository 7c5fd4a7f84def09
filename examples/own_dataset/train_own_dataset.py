"""A script as people already have it, calling gpucore.train: its own torch Dataset (IDX files read with gzip and
NumPy, PIL images and labels out, a `classes` list), its own loss function (label-smoothed cross-entropy written by
hand), its own model. Only the training loop is replaced: `gpucore.train(config, model=..., train_data=...,
val_data=..., loss=...)`.

    python examples/own_dataset/train_own_dataset.py                 # Fashion-MNIST where Debian installs it
    python examples/own_dataset/train_own_dataset.py --data DIR --epochs 5
    python examples/own_dataset/train_own_dataset.py --quick         # 2,000 images, 1 epoch: seconds

--data is a folder with the four Fashion-MNIST IDX files (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,
t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz; plain or gzipped); the default is Debian's
dataset-fashion-mnist (/usr/share/datasets/fashion-mnist). The test set is the validation data.
"""
import argparse
import gzip
import os
import sys

import numpy as np
import torch
from PIL import Image
from torch import nn

import gpucore

CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
DEBIAN = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """An IDX file (plain or .gz) as a NumPy array: the magic number's last byte is the rank, then the sizes."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as handle:
        data = handle.read()
    rank = data[3]
    shape = np.frombuffer(data, ">i4", count=rank, offset=4)
    return np.frombuffer(data, np.uint8, offset=4 + 4 * rank).reshape(shape)


class FashionMNIST(torch.utils.data.Dataset):
    """Fashion-MNIST from its IDX files: (PIL image, label) pairs, as torchvision's datasets return them."""

    classes = CLASSES

    def __init__(self, folder, train=True, limit=None):
        prefix = "train" if train else "t10k"
        self.images = read_idx(self._file(folder, f"{prefix}-images-idx3-ubyte"))[:limit]
        self.labels = read_idx(self._file(folder, f"{prefix}-labels-idx1-ubyte"))[:limit]

    @staticmethod
    def _file(folder, name):
        for candidate in (os.path.join(folder, name + ".gz"), os.path.join(folder, name)):
            if os.path.exists(candidate):
                return candidate
        raise FileNotFoundError(f"{name}[.gz] is not in '{folder}'")

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        return Image.fromarray(self.images[index], mode="L"), int(self.labels[index])


def smoothed_cross_entropy(logits, target, smoothing=0.1):
    """Cross-entropy against targets smoothed towards the uniform distribution (as nn.CrossEntropyLoss's
    label_smoothing), written out: the script's own loss. In float32 whatever the precision the logits come in."""
    log_probs = torch.log_softmax(logits.float(), dim=1)
    nll = -log_probs.gather(1, target.long()[:, None]).squeeze(1)
    return ((1 - smoothing) * nll - smoothing * log_probs.mean(1)).mean()


class Net(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.2), nn.Linear(64 * 7 * 7, classes))

    def forward(self, x):
        return self.head(self.features(x))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=DEBIAN, help=f"folder of the Fashion-MNIST IDX files (default {DEBIAN})")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", default="runs", help="where gpucore writes the run (checkpoints, logs)")
    parser.add_argument("--quick", action="store_true", help="2,000 training and 500 test images, 1 epoch")
    args = parser.parse_args(argv)
    try:
        train_set = FashionMNIST(args.data, train=True, limit=2000 if args.quick else None)
        test_set = FashionMNIST(args.data, train=False, limit=500 if args.quick else None)
    except FileNotFoundError as error:
        print(f"{error}; give the folder of the Fashion-MNIST IDX files with --data (Debian: apt install "
              "dataset-fashion-mnist)", file=sys.stderr)
        return None

    torch.manual_seed(args.seed)  # the model's initial weights
    result = gpucore.train(
        {"epochs": 1 if args.quick else args.epochs, "batch_size": args.batch_size, "lr": args.lr,
         "optimizer": "adamw", "seed": args.seed, "run_dir": args.dir, "name": "own_dataset",
         # gpucore's transforms, run on each PIL image once it is a uint8 tensor; validation takes neither
         "transforms": [{"RandomCrop": {"size": 28, "padding": 2}}, "RandomHorizontalFlip"],
         "progress": not args.quick},
        model=Net(len(CLASSES)), train_data=train_set, val_data=test_set, loss=smoothed_cross_entropy)
    print(f"best {result.monitor} {result.best_metric:.4f} (epoch {result.best_epoch}) on {result.device}, "
          f"precision {result.precision}; run in {result.run_dir}")
    return result


if __name__ == "__main__":
    sys.exit(0 if main(sys.argv[1:]) is not None else 2)
