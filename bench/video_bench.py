"""Video clips per second on the CPU, two measurements on the same H.264 .mp4 clips of moving shapes made here with
PyAV's encoder, each keeping every `--stride`-th frame at `--out` x `--out` RGB:

- decoders: PyAV (the decoder gpucore.data.video uses) and OpenCV's VideoCapture, decoding the kept frames resized at
  decode time, in one thread and in a pool of `--threads` (a pool that does not scale means the decoder holds the GIL);
- batches: gpucore's ClipSequences (only the kept frames converted, resized as they are converted, a batch's clips on a
  thread pool) against the loader of the public CSLR code (a torch Dataset that decodes every frame of a clip at full
  size with PyAV, then resizes the kept ones with torch, served by torch's DataLoader with `--workers` worker
  processes), batches of `--batch` clips padded to their longest.

    python bench/video_bench.py [decoders|batches|all] [--clips 8] [--width 640] [--height 360] [--frames 48]
                                [--stride 2] [--out 112] [--threads 2] [--batch 4] [--workers 2] [--json out.json]
"""
import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import report  # noqa: E402


def pyav_clip(path, keep, out):
    """The kept frames of a clip decoded by PyAV (one decoder thread), each converted to RGB at out x out by swscale."""
    import av

    frames = []
    with av.open(path) as container:
        stream = container.streams.video[0]
        stream.thread_type = "NONE"  # one core per clip: the pool spreads clips over the cores
        for index, frame in enumerate(container.decode(stream)):
            if index in keep:
                frames.append(frame.to_ndarray(width=out, height=out, format="rgb24"))
    return np.stack(frames)


def opencv_clip(path, keep, out):
    """The kept frames of a clip read by OpenCV: grab() every frame, retrieve() (convert) only the kept ones."""
    import cv2

    capture = cv2.VideoCapture(path)
    frames, index = [], 0
    while capture.grab():
        if index in keep:
            ok, frame = capture.retrieve()
            frames.append(cv2.cvtColor(cv2.resize(frame, (out, out), interpolation=cv2.INTER_AREA),
                                       cv2.COLOR_BGR2RGB))
        index += 1
    capture.release()
    return np.stack(frames)


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


def rate(run, clips: int) -> float:
    """Clips per second of `run()`, which handles `clips` clips."""
    start = time.perf_counter()
    run()
    return clips / (time.perf_counter() - start)


def decoders(paths, args) -> dict:
    keep = set(range(0, args.frames, args.stride))
    rates = {}
    for name, decode in (("PyAV", pyav_clip), ("OpenCV", opencv_clip)):
        decode(paths[0], keep, args.out)  # warm-up: libraries loaded
        for threads in sorted({1, args.threads}):
            def run():
                with ThreadPoolExecutor(threads) as pool:
                    list(pool.map(lambda path: decode(path, keep, args.out), paths))
            rates[f"{name}, {threads} thread{'s' if threads > 1 else ''}"] = rate(run, len(paths))
    return rates


def batches(paths, args) -> dict:
    from gpucore.data.clip_sequences import ClipSequences
    from gpucore.data.sign_layouts import BLANK, UNKNOWN, GlossClip

    clips = ClipSequences([GlossClip(p, ("a",), p) for p in paths], [BLANK, "a", UNKNOWN], size=args.out,
                          frame_stride=args.stride, threads=os.cpu_count())
    loaders = {f"gpucore ClipSequences, {os.cpu_count()} decoding threads":
               torch.utils.data.DataLoader(clips, batch_size=args.batch, collate_fn=clips.collate)}
    for workers in sorted({0, args.workers}):
        loaders[f"plain PyAV Dataset, DataLoader num_workers={workers}"] = torch.utils.data.DataLoader(
            PlainClips(paths, args.stride, args.out), batch_size=args.batch, collate_fn=padded, num_workers=workers)
    return {name: rate(lambda: list(loader), len(paths)) for name, loader in loaders.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("measure", nargs="?", choices=("decoders", "batches", "all"), default="all")
    parser.add_argument("--clips", type=int, default=8)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=360)
    parser.add_argument("--frames", type=int, default=48)
    parser.add_argument("--stride", type=int, default=2)
    parser.add_argument("--out", type=int, default=112)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args()
    from gpucore.data.synthetic import moving_shapes
    from gpucore.data.video import encode_clip

    facts = {"clips": f"{args.clips} x {args.width}x{args.height}, {args.frames} frames, H.264 (.mp4)",
             "kept": f"every {args.stride}. frame at {args.out}x{args.out}", "cpus": os.cpu_count()}
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        paths = [os.path.join(folder, f"clip{clip}.mp4") for clip in range(args.clips)]
        for clip, path in enumerate(paths):
            encode_clip(path, moving_shapes(args.frames, args.height, args.width, seed=clip))
        if args.measure in ("decoders", "all"):
            rates = decoders(paths, args)
            results["decoders"] = report("Video decoders (the kept frames, resized at decode time)", "clips/s", rates,
                                         "PyAV, 1 thread", facts)
        if args.measure in ("batches", "all"):
            rates = batches(paths, args)
            results["batches"] = report(f"Clip batches of {args.batch}", "clips/s", rates,
                                        next(iter(rates)), dict(facts, batch=args.batch))
    if args.json:
        import json

        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)


if __name__ == "__main__":
    main()
