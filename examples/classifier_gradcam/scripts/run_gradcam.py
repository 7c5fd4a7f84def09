"""Grad-CAM for validation images of the trained classifier (a classifier project's run_gradcam.py): overlays as PNG files
and the maps as cams.pt, on the device gpucore picks. Device mismatches cannot happen: gpucore moves
nothing behind your back and computes on the input's device.

    python scripts/run_gradcam.py CHECKPOINT_DIR [--method gradcam++] [--count 16] [--out gradcam_out]
"""
import argparse
import os

import torch

import gpucore
from gpucore.data.builtin import load_data
from gpucore.data.tensor_inputs import model_inputs

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = os.path.join(HERE, "..", "configs", "config.yaml")


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint_dir")
    parser.add_argument("--method", default="gradcam++")
    parser.add_argument("--layer", default="features.4")
    parser.add_argument("--count", type=int, default=16)
    parser.add_argument("--out", default="gradcam_out")
    args = parser.parse_args(argv)

    config = gpucore.load_config(CONFIG)
    device = gpucore.select_device("auto", no_cuda=config.no_cuda).device
    checkpoint = torch.load(os.path.join(args.checkpoint_dir, "best.pt"), map_location=device, weights_only=True)
    model = gpucore.models.build_model(config.model, config.model_kwargs).to(device)
    model.load_state_dict(checkpoint["model"])
    _, (images, labels) = load_data(config.data, config.data_kwargs, config.val_fraction, config.seed)
    images, labels = images[:args.count], labels[:args.count]
    x = model_inputs(images.to(device), checkpoint["input_stats"])
    result = gpucore.gradcam(model, args.layer, x, targets=labels.tolist(), method=args.method)
    paths = result.save(args.out, images=images.to(device))
    torch.save({"cams": result.cams.cpu(), "labels": labels, "images": images}, os.path.join(args.out, "cams.pt"))
    print(f"{len(paths)} overlays ({args.method}, layer {args.layer}) in {args.out}")
    return args.out


if __name__ == "__main__":
    main()
