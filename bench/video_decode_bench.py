"""Video decoders side by side: clips per second decoding the frames a sampling keeps (every `--stride`-th frame),
each resized to `--out` x `--out` RGB at decode time, in one thread and in a thread pool of `--threads` (whether the
decoder releases the GIL: a pool that does not scale means it holds it). The clips are H.264 .mp4 files of moving
shapes made here with PyAV's encoder. Compared: PyAV (the decoder gpucore.data.video uses) and OpenCV's VideoCapture.

    python bench/video_decode_bench.py [--clips 8] [--width 640] [--height 360] [--frames 48] [--stride 2]
                                       [--out 112] [--threads 2] [--json out.json]
"""
import argparse
import json
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np


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


def clips_per_second(decode, paths, keep, out, threads):
    start = time.perf_counter()
    if threads == 1:
        for path in paths:
            decode(path, keep, out)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda p: decode(p, keep, out), paths))
    return len(paths) / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clips", type=int, default=8)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=360)
    parser.add_argument("--frames", type=int, default=48)
    parser.add_argument("--stride", type=int, default=2)
    parser.add_argument("--out", type=int, default=112)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args()
    from gpucore.data.synthetic import moving_shapes
    from gpucore.data.video import encode_clip

    keep = set(range(0, args.frames, args.stride))
    results = {"clip": f"{args.width}x{args.height}, {args.frames} frames, H.264 (.mp4)",
               "kept": f"{len(keep)} frames at {args.out}x{args.out}", "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for clip in range(args.clips):
            path = os.path.join(folder, f"clip{clip}.mp4")
            encode_clip(path, moving_shapes(args.frames, args.height, args.width, seed=clip))
            paths.append(path)
        for name, decode in (("pyav", pyav_clip), ("opencv", opencv_clip)):
            decode(paths[0], keep, args.out)  # warm-up: libraries loaded
            for threads in sorted({1, args.threads}):
                results[f"{name}, {threads} thread{'s' if threads > 1 else ''} (clips/s)"] = round(
                    clips_per_second(decode, paths, keep, args.out, threads), 2)
    print(json.dumps(results, indent=1))
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)


if __name__ == "__main__":
    main()
