"""Training continuous sign-language recognition (on the CPU, or --device cuda): gpucore.train against the plain
PyTorch loop of the public CSLR code, side by side in one run on the same CE-CSL-layout folder of generated H.264
clips, and the memory of gpucore's clip loader by source resolution.

- train: the same model (examples/sign_language's per-frame CNN under gpucore's CSLR TemporalHead, one set of initial
  weights copied to both), optimizer (AdamW, --lr, weight decay 1e-4 on every parameter), constant learning rate,
  gradient clipping at norm 5, batch size, epochs, float32, frames (every frame, resized to --out x --out) and CTC
  loss, trained (1) by `gpucore.train` on `data: ROOT` and (2) by the loop the public CSLR code writes: a torch
  Dataset reading the label CSV, whose __getitem__ decodes the clip with PyAV (every frame converted to a full-size
  RGB array), resizes each with PIL and scales it to [-1, 1]; a padding collate; torch's DataLoader with
  `--workers` worker processes (guide 001's setting: 1 on a CPU); torch.nn.functional.ctc_loss; greedy decoding and
  WER by jiwer on the dev split after every epoch. Repeats are interleaved, each runs every loop from one seed, in
  alternating order (gpucore first, then last). Reported: training clips/s (the epochs' training time), whole-run
  clips/s (training and dev clips over the wall time, validation included), CPU seconds (this process and its
  DataLoader workers) and the final dev WER of each.
- memory: the peak resident memory of reading `--clips` clips of `--frames` frames in batches of `--batch` at --out x
  --out, each reader in a fresh process, with sources of 1920x1080 and of 426x240 (--sources): gpucore's
  ClipSequences (its training-split loader as a run builds it, batches decoded --prefetch ahead) and the plain Dataset
  above (num_workers=0, so its memory is this process's). The growth over the process's memory before reading is what
  the loader holds.

    python -m bench cslr [--measure train|memory|all] [--train-size 64] [--dev-size 16] [--source 240] [--out 32]
                         [--epochs 5] [--batch-size 8] [--lr 0.01] [--workers 1 [2 ...]] [--repeats 2] [--clips 4]
                         [--frames 24] [--sources 1080p 240p] [--batch 4] [--prefetch 4] [--device auto]
                         [--json out.json]
"""
import argparse
import copy
import csv
import glob
import os
import resource
import runpy
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import device_label, report, result_json, sync  # noqa: E402

EXAMPLE = os.path.join(os.path.dirname(HERE), "examples", "sign_language", "train_cecsl.py")
MEMORY_SOURCES = {"1080p": (1080, 1920), "240p": (240, 426)}


class PlainGlossClips(torch.utils.data.Dataset):
    """A CE-CSL split as the public CSLR code reads it: label/{split}.csv's rows, each clip found by its Number under
    video/{split}/, decoded whole by PyAV (every frame to a full-size RGB array), each frame resized by PIL, scaled
    to [-1, 1]. Yields (float32 (T, 3, out, out) frames, gloss ids)."""

    def __init__(self, root, split, vocabulary, out):
        self.out = out
        index = {gloss: i for i, gloss in enumerate(vocabulary)}
        with open(os.path.join(root, "label", f"{split}.csv"), newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        self.items = []
        for row in rows:
            path, = glob.glob(os.path.join(root, "video", split, "**", f"{row['Number']}.mp4"), recursive=True)
            glosses = [g for g in row["Gloss"].split("/") if g]
            self.items.append((path, [index.get(g, len(vocabulary) - 1) for g in glosses]))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        import av
        from PIL import Image

        path, glosses = self.items[index]
        with av.open(path) as container:
            frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
        resized = np.stack([np.asarray(Image.fromarray(frame).resize((self.out, self.out), Image.BILINEAR))
                            for frame in frames])
        clip = torch.from_numpy(resized).permute(0, 3, 1, 2).float() / 127.5 - 1
        return clip, torch.tensor(glosses, dtype=torch.int64)


def pad_collate(batch):
    """Clips padded with zeros to the longest, their frame counts, the glosses concatenated and their counts."""
    lengths = torch.tensor([len(clip) for clip, _ in batch])
    clips = torch.zeros(len(batch), int(lengths.max()), *batch[0][0].shape[1:])
    for row, (clip, _) in enumerate(batch):
        clips[row, :len(clip)] = clip
    return clips, lengths, torch.cat([glosses for _, glosses in batch]), torch.tensor([len(g) for _, g in batch])


def greedy_glosses(log_probs, steps, vocabulary):
    """Each clip's best class per output step, repeats merged and blanks dropped, as gloss names."""
    best = log_probs.argmax(-1)
    decoded = []
    for row, count in zip(best, steps.tolist()):
        ids = torch.unique_consecutive(row[:count]).tolist()
        decoded.append([vocabulary[i] for i in ids if i != 0])
    return decoded


def plain_run(model, root, vocabulary, args, seed, workers, device):
    """The public CSLR loop: trains `model` and validates it on dev after every epoch. Returns the training
    seconds, the whole wall time, the CPU seconds and the last dev WER."""
    import jiwer

    torch.manual_seed(seed)
    pin = device.type == "cuda"
    train = torch.utils.data.DataLoader(PlainGlossClips(root, "train", vocabulary, args.out), args.batch_size,
                                        shuffle=True, collate_fn=pad_collate, num_workers=workers, pin_memory=pin)
    dev = torch.utils.data.DataLoader(PlainGlossClips(root, "dev", vocabulary, args.out), args.batch_size,
                                      collate_fn=pad_collate, num_workers=workers, pin_memory=pin)
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    stride = model.temporal_stride
    training = 0.0
    cpu_start, start = cpu_seconds(), time.perf_counter()
    for _ in range(args.epochs):
        model.train()
        epoch_start = time.perf_counter()
        for clips, lengths, glosses, gloss_counts in train:
            log_probs = model(clips.to(device, non_blocking=True)).log_softmax(-1)
            steps = torch.div(lengths + stride - 1, stride, rounding_mode="floor")
            loss = torch.nn.functional.ctc_loss(log_probs.transpose(0, 1), glosses, steps, gloss_counts,
                                                blank=0, zero_infinity=True)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
        sync(device)
        training += time.perf_counter() - epoch_start
        model.eval()
        references, hypotheses = [], []
        with torch.no_grad():
            for clips, lengths, glosses, gloss_counts in dev:
                steps = torch.div(lengths + stride - 1, stride, rounding_mode="floor")
                outputs = model(clips.to(device, non_blocking=True)).cpu()
                hypotheses += [" ".join(h) for h in greedy_glosses(outputs, steps, vocabulary)]
                references += [" ".join(vocabulary[i] for i in ids) for ids in glosses.split(gloss_counts.tolist())]
        wer = jiwer.wer(references, hypotheses)
    return training, time.perf_counter() - start, cpu_seconds() - cpu_start, wer


def gpucore_run(model, root, args, seed, run_dir, device):
    """The same recipe through gpucore.train: the training seconds (its epochs' own clock), the whole wall time, the
    CPU seconds and the last epoch's dev WER."""
    import gpucore

    cpu_start, start = cpu_seconds(), time.perf_counter()
    result = gpucore.train(
        {"data": root, "data_kwargs": {"size": args.out}, "loss": "ctc", "epochs": args.epochs,
         "batch_size": args.batch_size, "eval_batch_size": args.batch_size, "lr": args.lr, "optimizer": "adamw",
         "weight_decay": 1e-4, "no_decay_norm_and_bias": False, "schedule": "constant", "clip_grad_norm": 5.0,
         "precision": "32", "device": str(device), "seed": seed, "run_dir": run_dir, "name": f"seed{seed}",
         "report": False, "progress": False}, model=model)
    wall = time.perf_counter() - start
    return (sum(row["epoch_time_s"] for row in result.history), wall, cpu_seconds() - cpu_start,
            result.history[-1]["val_wer"])


def cpu_seconds():
    """User + system CPU seconds of this process and of its children that ended (the DataLoader's workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def train_measure(args, device) -> dict:
    from gpucore.data.sign_layouts import gloss_vocabulary, read_sign_layout

    example = runpy.run_path(EXAMPLE)
    with tempfile.TemporaryDirectory() as folder:
        root = os.path.join(folder, "CE-CSL")
        started = time.perf_counter()
        example["make_cecsl"](root, {"train": args.train_size, "dev": args.dev_size}, args.source, seed=0)
        generated = time.perf_counter() - started
        vocabulary = gloss_vocabulary(read_sign_layout(root).splits["train"])
        clips = args.train_size * args.epochs
        loops = ["gpucore.train", *(f"plain PyTorch loop, DataLoader num_workers={w}" for w in args.workers)]
        rows = {name: [] for name in loops}
        for repeat in range(args.repeats):
            torch.manual_seed(repeat)
            model = example["FrameCNN"](len(vocabulary))
            order = list(zip(loops, [None, *args.workers]))
            for name, workers in order[::-1] if repeat % 2 else order:  # each loop first as often as the others
                copied = copy.deepcopy(model)  # the same initial weights for every loop
                if workers is None:
                    measured = gpucore_run(copied, root, args, repeat, os.path.join(folder, "runs"), device)
                else:
                    measured = plain_run(copied, root, vocabulary, args, repeat, workers, device)
                training, wall, cpu, wer = measured
                rows[name].append({"train_clips_per_s": clips / training,
                                   "epoch_clips_per_s": (args.train_size + args.dev_size) * args.epochs / wall,
                                   "train_s": training, "wall_s": wall, "cpu_s": cpu, "dev_wer": wer,
                                   "load_average": os.getloadavg()[0]})
                print(f"repeat {repeat}, {name}: training {clips / training:.1f} clips/s, with validation "
                      f"{rows[name][-1]['epoch_clips_per_s']:.1f} clips/s, {cpu:.1f} CPU-s, dev WER {wer:.3f}",
                      flush=True)

    def median(name, key):
        return float(np.median([row[key] for row in rows[name]]))

    facts = {"clips": f"{args.train_size} training and {args.dev_size} dev sentences of 1 to 4 glosses (6 to 8 "
                      f"frames each), {args.source}x{args.source} H.264, read at {args.out}x{args.out}",
             "device": device_label(device), "epochs": args.epochs, "batch_size": args.batch_size,
             "repeats": args.repeats,
             "generation_s": generated, "runs": rows}
    result = report("Training clips/s (median of the repeats)", "clips/s",
                    {name: median(name, "train_clips_per_s") for name in rows}, "gpucore.train", facts)
    result["epoch_with_validation"] = report(
        "Whole runs with dev validation after each epoch, clips/s (median)", "clips/s",
        {name: median(name, "epoch_clips_per_s") for name in rows}, "gpucore.train", {})["per_second"]
    for name in rows:
        wers = ", ".join(f"{row['dev_wer']:.3f}" for row in rows[name])
        cpus = ", ".join(f"{row['cpu_s']:.1f}" for row in rows[name])
        print(f"{name}: dev WER {wers}; CPU seconds {cpus}")
    return result


def resident_bytes(field):
    """This process's resident memory now (VmRSS) or at its peak (VmHWM), in bytes."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(f"/proc/self/status has no {field}")


def memory_probe(reader, folder, args):
    """In a fresh process: read every clip of `folder` with `reader` in batches of args.batch; print the peak growth of
    the resident memory over the memory before reading."""
    from gpucore.data.sign_layouts import gloss_vocabulary, read_sign_layout

    import av  # noqa: F401 - both readers' libraries loaded before the memory before reading is taken
    from PIL import Image  # noqa: F401

    clips = read_sign_layout(folder).splits["train"]
    vocabulary = gloss_vocabulary(clips)
    if reader == "gpucore":  # as a run reads its training split: standardised, batches decoded ahead on a thread
        from gpucore.data.clip_sequences import ClipSequences
        from gpucore.data.epoch_data import EpochData
        from gpucore.data.plan import plan_data

        plan = plan_data(ClipSequences(clips, vocabulary, size=args.out), device=torch.device("cpu"), training=True)
        loader = EpochData(plan, args.batch, seed=0, shuffle=True, prefetch=args.prefetch).batches(0)
    else:
        loader = torch.utils.data.DataLoader(PlainGlossClips(folder, "train", vocabulary, args.out), args.batch,
                                             collate_fn=pad_collate)
    before = resident_bytes("VmRSS")
    frames = sum(batch[0].shape[0] * batch[0].shape[1] for batch in loader)
    print(resident_bytes("VmHWM") - before, frames)


def memory_measure(args) -> dict:
    from gpucore.data.synthetic import moving_shapes
    from gpucore.data.video import encode_clip

    peaks = {}
    with tempfile.TemporaryDirectory() as folder:
        for source in args.sources:
            height, width = MEMORY_SOURCES[source]
            root = os.path.join(folder, source)
            for sub in ("video/train", "label"):
                os.makedirs(os.path.join(root, sub))
            with open(os.path.join(root, "label", "train.csv"), "w", newline="", encoding="utf-8") as handle:
                writer = csv.writer(handle)
                writer.writerow(("Number", "Translator", "Chinese Sentences", "Gloss"))
                for clip in range(args.clips):
                    encode_clip(os.path.join(root, "video", "train", f"train-{clip:05d}.mp4"),
                                moving_shapes(args.frames, height, width, seed=clip, shape=clip % 4))
                    writer.writerow((f"train-{clip:05d}", "A", "x", "圆"))
        for reader in ("gpucore", "plain"):
            for source in args.sources:
                probe = subprocess.run([sys.executable, __file__, "--memory-probe", reader, "--memory-folder",
                                        os.path.join(folder, source), "--out", str(args.out), "--batch",
                                        str(args.batch), "--prefetch", str(args.prefetch)],
                                       capture_output=True, text=True)
                if probe.returncode:
                    raise RuntimeError(f"the memory probe of {reader} on {source} failed: {probe.stderr[-2000:]}")
                grown, frames = map(int, probe.stdout.split()[-2:])
                peaks[f"{reader}, {source} source"] = grown / 2 ** 20
    batch_mib = args.batch * args.frames * 3 * args.out * args.out / 2 ** 20
    print(f"Peak resident memory grown while reading {args.clips} clips of {args.frames} frames in batches of "
          f"{args.batch} at {args.out}x{args.out} (a uint8 batch: {batch_mib:.2f} MiB)")
    for name, mib in peaks.items():
        print(f"  {name:<28}{mib:>9.1f} MiB")
    return result_json({"clips": args.clips, "frames": args.frames, "batch": args.batch, "out": args.out,
                        "peak_growth_mib": peaks, "batch_uint8_mib": batch_mib})


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench cslr", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--measure", choices=("train", "memory", "all"), default="all")
    parser.add_argument("--device", default="auto", help="where both loops train (auto: CUDA when there is one)")
    parser.add_argument("--train-size", type=int, default=64, help="training sentences generated")
    parser.add_argument("--dev-size", type=int, default=16, help="dev sentences generated")
    parser.add_argument("--source", type=int, default=240, help="the generated clips' height and width")
    parser.add_argument("--out", type=int, default=32, help="frames are read at this height and width")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--workers", type=int, nargs="+", default=[1],
                        help="the plain loop's DataLoader worker processes (several: a plain loop each)")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved pairs of runs")
    parser.add_argument("--clips", type=int, default=4, help="memory: clips per source resolution")
    parser.add_argument("--frames", type=int, default=24, help="memory: frames per clip")
    parser.add_argument("--sources", nargs="+", choices=list(MEMORY_SOURCES), default=list(MEMORY_SOURCES),
                        help="memory: the source resolutions read (each reader on each in a process of its own)")
    parser.add_argument("--batch", type=int, default=4, help="memory: clips per batch")
    parser.add_argument("--prefetch", type=int, default=4, help="memory: gpucore's batches decoded ahead (config key "
                        "prefetch)")
    parser.add_argument("--json")
    parser.add_argument("--memory-probe", choices=("gpucore", "plain"), help=argparse.SUPPRESS)
    parser.add_argument("--memory-folder", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_probe:
        memory_probe(args.memory_probe, args.memory_folder, args)
        return {}
    try:
        import av  # noqa: F401
        import jiwer  # noqa: F401
    except ImportError as missing:
        print(f"cslr: left out, {missing.name} is not installed (pip install av jiwer)")
        return {"skipped": f"needs PyAV and jiwer ({missing.name} is not installed)"}
    import gpucore

    device = gpucore.select_device(args.device).device
    print(f"{device_label(device)}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}", flush=True)
    results = {}
    if args.measure in ("train", "all"):
        results["train"] = train_measure(args, device)
    if args.measure in ("memory", "all"):
        results["memory"] = memory_measure(args)
    return result_json(results, args.json)


if __name__ == "__main__":
    main()
