"""A small sequence recogniser trained with CTC on generated feature sequences: a GRU over (N, T, features) frames,
every sample as long as the others. It is not TFNet, which is a video model (continuous sign-language recognition:
a per-frame CNN, temporal convolutions and a BiLSTM over clips of different lengths): for that, the built-in models
cslr_resnet18 and cslr_keypoints train on clips whose targets carry their frame counts (docs: Training, Data).

    python examples/sequence_ctc/train_ctc.py [--epochs 8] [--batch-size 64]

The model reads (N, T, features) frames with a bidirectional GRU and emits (N, T, classes) logits;
class 0 is the CTC blank. gpucore reports the greedy-decoded sequence accuracy.
"""
import argparse
import sys

import torch
from torch import nn

import gpucore


class SequenceRecognizer(nn.Module):
    def __init__(self, features: int = 10, hidden: int = 64, classes: int = 10):
        super().__init__()
        self.rnn = nn.GRU(features, hidden, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


def main(argv=None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--train-size", type=int, default=4096)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--dir", default="runs")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)  # the model's initial weights
    result = gpucore.train(
        {"data": "synthetic_sequences", "data_kwargs": {"train_size": args.train_size, "val_size": 512},
         "loss": "ctc", "epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr, "schedule": "constant",
         "clip_grad_norm": 5.0, "normalize": False, "run_dir": args.dir, "name": "sequence_ctc",
         "seed": args.seed},
        model=SequenceRecognizer())
    print(f"best {result.monitor} {result.best_metric:.3f} (epoch {result.best_epoch}) on {result.device}")
    return result.best_metric


if __name__ == "__main__":
    main(sys.argv[1:])
