"""Continuous sign-language recognition on a generated CE-CSL folder: real encoded .mp4 clips, each a sentence of
glosses signed one after the other, read by `data: ROOT` as CE-CSL ships (label/{train,dev,test}.csv, clips by
Number under video/{split}/<Translator>/), trained with CTC and scored by word error rate (WER) on the test split.

    python examples/sign_language/train_cecsl.py [--epochs 7] [--data data/CE-CSL-shapes] [--quick]

Each gloss is one shape (圆 disc, 方 square, 环 ring, 十 cross: gpucore.data.synthetic.moving_shapes) moving across
a striped background for 6 to 8 frames; its path, colours and background are drawn anew each time it is signed, so
only the shape says which gloss it is. A sentence is 1 to 4 glosses, never one twice in a row (so every sentence has
an output step per gloss at temporal_stride 4), encoded as H.264 by gpucore.data.video's
encode_clip. The dev split is the validation set; gpucore.evaluate decodes the test split greedily.

The model: by default (--model frames) a small convolutional network on every frame under the CSLR models' own
temporal head (gpucore.models.cslr.TemporalHead: two kernel-5 temporal convolutions each pooled by 2, temporal_stride
4, a BiLSTM, a classifier over the vocabulary with the CTC blank). --model cslr_resnet18 trains the built-in
ResNet-18 one instead, the one to use on real CE-CSL clips with a GPU; it is not the default because on a CPU of two
cores a ResNet-18 on every frame of every clip takes minutes an epoch, and because it needs a working torchvision
(the build here is the CUDA one beside a CPU-only torch: gpucore refuses it, saying which torchvision to install).

Measured on this machine (2 cores of an AMD EPYC VM shared with four other jobs, float32, 2026-11-29): the defaults
(128 training sentences of 24 x 24 frames, 21 dev and 21 test, 7 epochs, 151 s with generation) reached a test WER
of 0.689 (best dev WER 0.600); --quick (64 training sentences, 16 dev and 16 test, 12 epochs, 53 s with generation)
reached a test WER of 0.689 (chance, 0 glosses right: 1.0); on 2026-11-29 two --quick runs on an Intel Xeon VM
reached 0.689 and 0.622: the generated clips are not byte-identical from one generation to the next (the frames are,
their H.264 encoding by FFmpeg differs in a few clips between processes, also with one encoder thread; cause not
found), so the WER varies by generation. The shapes are small (a radius of 5 pixels) on busy
backgrounds, and training overfits 64 sentences after about 10 epochs; more sentences and epochs, or the GPU and
cslr_resnet18, do better.
"""
import argparse
import csv
import os
import sys
import warnings

import torch

from torch import nn

import gpucore
from gpucore.data.sign_layouts import gloss_vocabulary, read_sign_layout
from gpucore.data.synthetic import moving_shapes
from gpucore.data.video import encode_clip
from gpucore.models.cslr import TemporalHead

GLOSSES = ("圆", "方", "环", "十")  # moving_shapes' shapes 0 to 3: disc, square, ring, cross
TRANSLATORS = ("A", "B", "C")
COLUMNS = ("Number", "Translator", "Chinese Sentences", "Gloss")


def make_cecsl(root: str, sizes: dict, frame_size: int, seed: int = 0) -> str:
    """Writes a CE-CSL folder under `root`: for each split in `sizes` (name -> sentences), label/{split}.csv and one
    .mp4 per sentence at video/{split}/<Translator>/<Number>.mp4. Sentences, paths and colours are drawn from
    `seed` (each split from its own draws)."""
    for offset, (split, count) in enumerate(sizes.items()):
        generator = torch.Generator().manual_seed(seed * 1000 + offset)
        rows = []
        for i in range(count):
            number, translator = f"{split}-{i + 1:05d}", TRANSLATORS[i % len(TRANSLATORS)]
            glosses = [int(torch.randint(0, len(GLOSSES), (1,), generator=generator))]
            for _ in range(int(torch.randint(0, 4, (1,), generator=generator))):  # never one gloss twice in a row
                glosses.append((glosses[-1] + int(torch.randint(1, len(GLOSSES), (1,), generator=generator)))
                               % len(GLOSSES))
            signs = [moving_shapes(int(torch.randint(6, 9, (1,), generator=generator)), frame_size, frame_size,
                                   seed=int(torch.randint(0, 2 ** 31, (1,), generator=generator)), shape=gloss)
                     for gloss in glosses]
            folder = os.path.join(root, "video", split, translator)
            os.makedirs(folder, exist_ok=True)
            encode_clip(os.path.join(folder, f"{number}.mp4"), torch.cat(signs))
            words = [GLOSSES[g] for g in glosses]
            rows.append((number, translator, "".join(words), "/".join(words)))
        os.makedirs(os.path.join(root, "label"), exist_ok=True)
        with open(os.path.join(root, "label", f"{split}.csv"), "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(COLUMNS)
            writer.writerows(rows)
    return root


class FrameCNN(nn.Module):
    """Clips (N, T, 3, H, W) -> (N, ceil(T / 4), classes): two strided convolutions on every frame (4 x 4 patches,
    then 3 x 3), pooled to `width` features, then the CSLR models' TemporalHead (its temporal_stride 4, which loss ctc reads)."""

    temporal_stride = TemporalHead.temporal_stride

    def __init__(self, classes: int, width: int = 32, hidden: int = 64):
        super().__init__()
        self.frames = nn.Sequential(
            nn.Conv2d(3, width, 4, stride=4), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride=2, padding=1), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.AdaptiveMaxPool2d(1), nn.Flatten())  # max: the shape is one place of the frame, not its average
        self.head = TemporalHead(width, classes, hidden, lstm_layers=1)

    def forward(self, clips: torch.Tensor) -> torch.Tensor:
        n, steps = clips.shape[:2]
        return self.head(self.frames(clips.flatten(0, 1)).unflatten(0, (n, steps)))


def main(argv=None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data/CE-CSL-shapes", help="the CE-CSL folder (generated when absent)")
    parser.add_argument("--epochs", type=int, default=7)
    parser.add_argument("--train-size", type=int, default=128, help="training sentences generated")
    parser.add_argument("--frame-size", type=int, default=24, help="frames generated and read at this size")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--dir", default="runs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", choices=("frames", "cslr_resnet18"), default="frames")
    parser.add_argument("--quick", action="store_true", help="64 training sentences of 24 x 24, 12 epochs")
    args = parser.parse_args(argv)
    if args.quick:
        args.train_size, args.epochs = 64, 12
    if not os.path.isdir(os.path.join(args.data, "label")):
        held_out = max(16, args.train_size // 6)
        make_cecsl(args.data, {"train": args.train_size, "dev": held_out, "test": held_out}, args.frame_size,
                   args.seed)
    warnings.filterwarnings("ignore", "Glyph .* missing from font")  # the report's plots name the Chinese glosses
    torch.manual_seed(args.seed)  # the model's initial weights
    if args.model == "frames":  # the vocabulary gpucore will build from the training split: its size is the classes
        classes = len(gloss_vocabulary(read_sign_layout(args.data).splits["train"]))
        model, named = FrameCNN(classes), {}
    else:
        model, named = None, {"model": "cslr_resnet18", "model_kwargs": {"hidden": 256}}
    result = gpucore.train(
        {"data": args.data, "data_kwargs": {"size": args.frame_size}, **named, "loss": "ctc", "epochs": args.epochs, "batch_size": args.batch_size,
         "lr": args.lr, "clip_grad_norm": 5.0, "run_dir": args.dir, "name": "sign_language", "seed": args.seed,
         "report": False}, model=model)
    print(f"best {result.monitor} {result.best_metric:.3f} (epoch {result.best_epoch}) on {result.device}")
    test = gpucore.evaluate(os.path.join(result.checkpoint_dir, "best.pt"), data=args.data, split="test", model=model,
                            out=os.path.join(args.dir, "sign_language_test"))
    wer = test["metrics"]["wer"]
    print(f"test WER {wer:.3f} on {test['samples']} sentences (greedy decoding)")
    return wer


if __name__ == "__main__":
    main(sys.argv[1:])
