"""Fine-tune a torchvision or timm model on an image folder, starting from a local weights file: timm's
`train.py --model resnet18 --pretrained --num-classes N` and fastai's `fine_tune` on gpucore.

    python examples/finetune/finetune_folder.py --data my_images --weights resnet18-f37072fd.pth
    python examples/finetune/finetune_folder.py --data my_images --model timm:convnext_atto --weights model.safetensors

--data is a folder with one subfolder per class (optionally under train/ and val/); --weights a torchvision or
timm .pth, a .safetensors file or a gpucore checkpoint (e.g. torchvision's resnet18-f37072fd.pth from
https://download.pytorch.org/models/). The classifier head is replaced by one with as many outputs as there are
classes; the backbone is frozen for --freeze-epochs epochs (head only, BatchNorm statistics frozen), then trains
at --lr-backbone times the head's rate. Nothing is downloaded.
"""
import argparse
import os
import sys

import gpucore


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="fine-tune a pretrained torchvision or timm model on an image folder")
    parser.add_argument("--data", required=True, help="image folder: one subfolder per class (optionally train/, val/)")
    parser.add_argument("--weights", required=True, help="pretrained weights: .pth, .safetensors or a gpucore checkpoint")
    parser.add_argument("--model", default="torchvision:resnet18", help="torchvision:NAME or timm:NAME")
    parser.add_argument("--size", type=int, default=224, help="images are resized to size x size")
    parser.add_argument("--channels", type=int, default=3, choices=(1, 3), help="1: grey (the first conv is adapted)")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--freeze-epochs", type=int, default=1, help="epochs that train the new head alone")
    parser.add_argument("--lr", type=float, default=1e-3, help="the head's learning rate")
    parser.add_argument("--lr-backbone", type=float, default=0.1, help="the backbone's rate, as a multiple of --lr")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--dir", default="./runs", help="where gpucore writes the run (checkpoints, logs)")
    parser.add_argument("--device", default="auto")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    train_folder = os.path.join(args.data, "train") if os.path.isdir(os.path.join(args.data, "train")) else args.data
    classes = gpucore.data.read_image_folder(train_folder).classes  # the subfolders' names
    config = {
        "model": args.model, "model_kwargs": {"num_classes": len(classes), "in_channels": args.channels},
        "pretrained": args.weights, "freeze": "backbone", "freeze_epochs": args.freeze_epochs,
        "lr": args.lr, "lr_backbone": args.lr_backbone, "data": args.data,
        "data_kwargs": {"channels": args.channels, "size": [args.size, args.size]}, "epochs": args.epochs,
        "batch_size": args.batch_size, "run_dir": args.dir, "name": "finetune", "device": args.device,
    }
    result = gpucore.train(config)
    print(f"{args.model} on {len(classes)} classes: best {result.monitor} {result.best_metric:.4f} "
          f"(epoch {result.best_epoch}); checkpoints in {result.checkpoint_dir}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
