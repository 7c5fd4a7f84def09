"""One PNG grid of the overlays that run_gradcam.py wrote (a classifier project's visualize_gradcam.py).

    python scripts/visualize_gradcam.py [--out gradcam_out] [--columns 8]
"""
import argparse
import os

import torch

from gpucore.cam import CamResult
from gpucore.data.png import encode_png, grid


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gradcam_out")
    parser.add_argument("--columns", type=int, default=8)
    args = parser.parse_args(argv)
    saved = torch.load(os.path.join(args.out, "cams.pt"), weights_only=True)
    overlays = CamResult(saved["cams"], "gradcam", []).overlay(saved["images"])
    path = os.path.join(args.out, "grid.png")
    with open(path, "wb") as handle:
        handle.write(encode_png(grid(overlays, columns=args.columns)))
    print(f"grid of {len(overlays)} overlays: {path}")
    return path


if __name__ == "__main__":
    main()
