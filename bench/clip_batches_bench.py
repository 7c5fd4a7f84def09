"""Clip batches per second, the data side of a CSLR run: gpucore's ClipSequences (only the kept frames converted,
resized by FFmpeg as they are converted, a batch's clips decoded on a thread pool) against the loader of the public
CSLR code (a torch Dataset that decodes every frame of a clip at full size with PyAV, then resizes them with torch,
served by torch's DataLoader with `--workers` worker processes). Both read the same H.264 .mp4 clips of moving
shapes made here, keep every `--stride`-th frame at `--out` x `--out`, and pad a batch to its longest clip.

    python bench/clip_batches_bench.py [--clips 16] [--width 640] [--height 360] [--frames 48] [--stride 2]
                                       [--out 112] [--batch 4] [--workers 2] [--json out.json]
"""
import argparse
import json
import os
import tempfile
import time

import numpy as np
import torch


class PlainClips(torch.utils.data.Dataset):
    """The public CSLR code's way: every frame decoded to a full-size RGB array, the kept ones resized by torch."""

    def __init__(self, paths, stride, out):
        self.paths, self.stride, self.out = paths, stride, out

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        import av

        with av.open(self.paths[index]) as container:
            frames = np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)])
        kept = torch.from_numpy(frames[::self.stride]).permute(0, 3, 1, 2).float()
        return torch.nn.functional.interpolate(kept, size=(self.out, self.out), mode="bilinear",
                                               antialias=True).round().to(torch.uint8), [1]


def padded(batch):
    longest = max(len(frames) for frames, _ in batch)
    x = torch.zeros(len(batch), longest, *batch[0][0].shape[1:], dtype=torch.uint8)
    for row, (frames, _) in enumerate(batch):
        x[row, :len(frames)] = frames
    return x


def clips_per_second(loader, clips):
    start = time.perf_counter()
    for _ in loader:
        pass
    return round(clips / (time.perf_counter() - start), 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clips", type=int, default=16)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=360)
    parser.add_argument("--frames", type=int, default=48)
    parser.add_argument("--stride", type=int, default=2)
    parser.add_argument("--out", type=int, default=112)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args()
    from gpucore.data.clip_sequences import ClipSequences
    from gpucore.data.sign_layouts import BLANK, UNKNOWN, GlossClip
    from gpucore.data.synthetic import moving_shapes
    from gpucore.data.video import encode_clip

    results = {"clips": f"{args.clips} x {args.width}x{args.height}, {args.frames} frames, H.264 (.mp4)",
               "batches": f"{args.batch} clips, frame stride {args.stride}, at {args.out}x{args.out}",
               "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for clip in range(args.clips):
            paths.append(os.path.join(folder, f"clip{clip}.mp4"))
            encode_clip(paths[-1], moving_shapes(args.frames, args.height, args.width, seed=clip))
        clips = ClipSequences([GlossClip(p, ("a",), p) for p in paths], [BLANK, "a", UNKNOWN], size=args.out,
                              frame_stride=args.stride, threads=os.cpu_count())
        gpucore_loader = torch.utils.data.DataLoader(clips, batch_size=args.batch, collate_fn=clips.collate)
        plain = PlainClips(paths, args.stride, args.out)
        for workers in sorted({0, args.workers}):
            loader = torch.utils.data.DataLoader(plain, batch_size=args.batch, collate_fn=padded,
                                                 num_workers=workers)
            results[f"plain PyAV Dataset, DataLoader num_workers={workers} (clips/s)"] = clips_per_second(
                loader, args.clips)
        results[f"gpucore ClipSequences, {os.cpu_count()} decoding threads (clips/s)"] = clips_per_second(
            gpucore_loader, args.clips)
    print(json.dumps(results, indent=1))
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)


if __name__ == "__main__":
    main()
