"""A user's whole workflow on a GPU, on real data, in one go (scripts/gpu/verify.sh's `realrun` step):

    python scripts/gpu/real_run.py [--device cuda] [--epochs 3] [--train-size N] [--out DIR]

1. `gpucore train` on the real Fashion-MNIST with a transforms list, mixup/CutMix and EMA, the report on;
2. the same with `cuda_graphs: true` (CUDA only): both accuracies and the graphs' stats;
3. `gpucore report`, `gpucore evaluate` (its accuracy against the run's), `gpucore export --format onnx`
   (onnxruntime on the CPU against the model on the CPU);
4. a SegFormer saved to a local folder (no download) fine-tuned a few steps from it (`pretrained: FOLDER`) on
   fashion_mnist_foreground.
Prints one line per check (learning means above 50% accuracy, chance being 10%: the numbers are printed) and a
summary; exit status 1 if a check failed. Needs the real Fashion-MNIST where
`data: fashion_mnist` finds it ($GPUCORE_FASHION_MNIST, /usr/share/datasets/fashion-mnist, ...).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

import gpucore

TRANSFORMS = [{"RandomCrop": {"size": 28, "padding": 2}}, "RandomHorizontalFlip", {"RandomErasing": {"p": 0.2}}]


def cli(*args: str) -> dict:
    """`gpucore ARGS` in a new process; its exit status and the last line it printed."""
    done = subprocess.run([sys.executable, "-m", "gpucore", *args], capture_output=True, text=True)
    lines = (done.stdout + done.stderr).strip().splitlines()
    return {"rc": done.returncode, "last": lines[-1] if lines else ""}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--train-size", type=int, default=None, help="the first N training images (default: all)")
    parser.add_argument("--out", default=None, help="run directories here (default: a temporary folder)")
    args = parser.parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="gpucore-real-")
    data_kwargs = {} if args.train_size is None else {"train_size": args.train_size}
    base = {"data": "fashion_mnist", "data_kwargs": data_kwargs, "device": args.device, "epochs": args.epochs,
            "batch_size": 128, "progress": False, "run_dir": out, "transforms": TRANSFORMS, "ema_decay": 0.999,
            "loggers": ["csv"]}
    checks = []

    def check(name: str, ok: bool, detail) -> None:
        checks.append((name, bool(ok)))
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}", flush=True)

    # 1. transforms, mixup/CutMix, EMA, the report
    start = time.perf_counter()
    mixed = gpucore.train(dict(base, name="mixed", mixup_alpha=0.2, cutmix_alpha=1.0, cuda_graphs=False))
    check("train: transforms + mixup/CutMix + EMA", mixed.status == "completed" and mixed.best_metric > 0.5,
          f"{mixed.monitor} {mixed.best_metric:.4f} after {args.epochs} epochs, {time.perf_counter() - start:.0f} s, "
          f"{mixed.samples_per_second:,.0f} samples/s")
    check("report.html", os.path.getsize(os.path.join(mixed.run_dir, "report.html")) > 10_000, mixed.run_dir)

    # 2. the same run with cuda_graphs
    if torch.device(args.device).type == "cuda":
        graphed = gpucore.train(dict(base, name="graphed", mixup_alpha=0.2, cutmix_alpha=1.0, cuda_graphs=True))
        with open(os.path.join(graphed.run_dir, "training_stats.json")) as handle:
            graphs = json.load(handle)["cuda_graphs"]
        check("cuda_graphs on real data", graphs["captured"] >= 1 and graphs["reason"] is None
              and abs(graphed.best_metric - mixed.best_metric) < 0.01,
              f"eager {mixed.best_metric:.4f} at {mixed.samples_per_second:,.0f}/s, graphed {graphed.best_metric:.4f} "
              f"at {graphed.samples_per_second:,.0f}/s; {graphs}")

    # 3. report, evaluate, export from the command line
    best = os.path.join(mixed.checkpoint_dir, "best.pt")
    report = cli("report", mixed.run_dir)
    check("gpucore report", report["rc"] == 0, report["last"])
    evaluate = cli("evaluate", best, "--device", args.device, "--out", os.path.join(out, "evaluate"))
    with open(os.path.join(out, "evaluate", "evaluation.json")) as handle:
        evaluation = json.load(handle)
    metric = evaluation["metrics"].get(mixed.monitor.removeprefix("val_ema_").removeprefix("val_"))
    check("gpucore evaluate", evaluate["rc"] == 0 and metric is not None and abs(metric - mixed.best_metric) < 0.002,
          f"{metric} against the run's {mixed.best_metric:.4f}")
    onnx_file = os.path.join(out, "model.onnx")
    export = cli("export", best, "--format", "onnx", "--out", onnx_file)
    import onnxruntime

    loaded = gpucore.load(best, "cpu")
    images = torch.randint(0, 256, (16, 1, 28, 28), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    inputs = loaded.preprocess(images)
    with torch.no_grad():
        expected = loaded.module(inputs).numpy()
    session = onnxruntime.InferenceSession(onnx_file, providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: inputs.numpy()})[0]
    error = float(np.abs(got - expected).max())
    check("gpucore export onnx, onnxruntime on the CPU", export["rc"] == 0 and error < 1e-3, f"largest difference {error:.2g}")

    # 4. SegFormer from a local folder
    try:
        from transformers import SegformerConfig, SegformerForSemanticSegmentation
    except ImportError as exc:  # transformers missing, or a torchvision that does not match torch
        print(f"skip SegFormer: transformers cannot be imported here ({exc})")
        return summary(checks)
    folder = os.path.join(out, "segformer")
    SegformerForSemanticSegmentation(SegformerConfig(
        num_labels=150, depths=[1, 1, 1, 1], hidden_sizes=[16, 32, 64, 128], num_attention_heads=[1, 1, 2, 4],
        decoder_hidden_size=32)).save_pretrained(folder)
    segformer = gpucore.train({"model": "transformers:SegformerForSemanticSegmentation",
                               "model_kwargs": {"num_labels": 1}, "pretrained": folder, "loss": "dice_bce",
                               "data": "fashion_mnist_foreground", "data_kwargs": {"train_size": 512, "val_size": 128},
                               "epochs": 2, "batch_size": 32, "device": args.device, "progress": False,
                               "run_dir": out, "name": "segformer", "loggers": []})
    check("SegFormer from a local folder", segformer.status == "completed" and segformer.best_metric > 0.3,
          f"{segformer.monitor} {segformer.best_metric:.3f} after 2 epochs")

    return summary(checks)


def summary(checks) -> int:
    failed = [name for name, ok in checks if not ok]
    print(f"{len(checks) - len(failed)} of {len(checks)} checks passed" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
