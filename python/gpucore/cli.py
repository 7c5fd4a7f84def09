"""The `gpucore` command line."""
from __future__ import annotations

import argparse
import gc
import json
import os
import shlex
import sys
import warnings
from typing import Optional, Sequence

from .redact import masked


def _doctor(args: argparse.Namespace) -> int:
    from .device.doctor import doctor, format_report

    report = doctor(args.device, smoke_test=not args.no_smoke_test)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(format_report(report))
    return 0 if report["ok"] else 1


def _shown_path(path: str) -> str:
    """`path` relative to the working directory when it lies under it, else absolute."""
    relative = os.path.relpath(path)
    return path if relative == os.pardir or relative.startswith(os.pardir + os.sep) else relative


def _train(args: argparse.Namespace) -> int:
    from .training import distributed, launcher
    from .config import load_config, parse_overrides
    from .train import train
    from .training.fit_outcome import INTERRUPTED
    from .training.run_dir import resume_run_config

    launcher.follow_the_launcher()  # a worker of devices: N stops with its launcher

    overrides = parse_overrides(args.set or [])
    if args.devices is not None:
        overrides["devices"] = args.devices
    if args.resume is not None and args.resume != "auto" and os.path.isdir(args.resume):
        config = resume_run_config(args.resume, overrides, args.config)  # that run, with its own config.json
    else:
        if args.resume is not None:
            overrides["resume"] = args.resume
        config = load_config(args.config, overrides)
    try:
        result = train(config)
    except KeyboardInterrupt as stop:  # a stopped run (interrupted.pt written): the summary, the hint, 128 + signal
        if not hasattr(stop, "result"):
            raise
        result = stop.result
    summary = {
        "status": result.status, "best_metric": result.best_metric, "best_epoch": result.best_epoch,
        "monitor": result.monitor, "run_dir": result.run_dir, "device": result.device,
        "precision": result.precision,
        "samples_per_second": None if result.samples_per_second is None else round(result.samples_per_second, 1),
        "steps": result.steps, "skipped_steps": result.skipped_steps,
    }
    if distributed.environment().is_main:
        print(json.dumps(summary, indent=2))
    if result.status == INTERRUPTED:
        from . import signals

        if launcher.is_worker():  # the launcher prints the hint, with the user's own command
            return signals.exit_code(result.stopped_by)
        command = f"gpucore train --resume {shlex.quote(_shown_path(result.run_dir))}"
        print(f"interrupted ({result.stopped_by or 'SIGINT'}): resume with  {command}", file=sys.stderr)
        signals.report_requeue(result.stopped_by)
        return signals.exit_code(result.stopped_by)
    return 0


def _gradcam(args: argparse.Namespace) -> int:
    import os

    import torch

    from .cam import photo_gradcam
    from .errors import ConfigError
    from .evaluation.load import load
    from .data.input_files import photo_chunks

    loaded = load(args.checkpoint, args.device, args.model)
    shape = loaded.input_shape
    if shape is None or len(shape) != 3:
        raise ConfigError(f"checkpoint '{args.checkpoint}' is not of an image model (inputs {shape}); Grad-CAM needs "
                          "images")
    if args.batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {args.batch_size}")
    # each photo at its own full size, a batch of files at a time: the overlays are drawn on it, the model reads it
    # as its run read images
    maps, targets, layer = [], None, None
    for read in photo_chunks(args.images, shape[0], args.batch_size, "--images", loaded.exif_orientation):
        photos = list(read.images)
        names = ([os.path.splitext(f)[0].replace(os.sep, "_") for f in read.files] if read.files is not None
                 else [f"image_{len(maps) + i:04d}" for i in range(len(photos))])
        if not maps:
            targets = _cam_targets(args, loaded, loaded.preprocess(loaded.read_images(photos[:1], args.size)))
        result = photo_gradcam(loaded, photos, args.layer, targets, method=args.method, batch_size=args.batch_size,
                               size=args.size)
        result.save(args.out, names=[f"{name}_{args.method}" for name in names])
        maps.extend(result.cams.cams.cpu())
        layer = result.cams.layers[0]
    torch.save(torch.stack(maps), os.path.join(args.out, f"cams_{args.method}.pt"))
    print(json.dumps({"images": len(maps), "method": args.method, "layer": layer, "device": str(loaded.device),
                      "out": os.path.abspath(args.out)}, indent=2))
    return 0


def _cam_targets(args: argparse.Namespace, loaded, x):
    """gpucore gradcam's target from --class (or --target): None (each image's top class), a class index of a
    classifier, or a score of a segmentation model's outputs (the class's logits summed over the image)."""
    import torch

    from .cam import segmentation_target
    from .errors import ConfigError

    chosen = args.category
    if args.target is not None:
        if chosen is not None:
            raise ConfigError("--target and --class both name the class to explain; give one of them (--class takes "
                              "an index or a class name)")
        chosen = str(args.target)
    with torch.no_grad():
        output = loaded.module(x[:1])
    output = output[0] if isinstance(output, (tuple, list)) else output
    classes = list(loaded.classes or [])
    if output.dim() == 4:  # segmentation: N x K x H x W logits
        channels = output.shape[1]
        count = 2 if channels == 1 else channels  # one channel: background (logit < 0) and foreground
        names = classes if len(classes) == count else []
        if chosen is None:
            raise ConfigError(f"checkpoint '{args.checkpoint}' is a segmentation model (outputs N x {channels} x H x W): "
                              f"name the class to explain with --class: {_class_choices(count, names)}")
        index = _class_index(chosen, count, names)
        if channels == 1:  # the foreground's logit, or its negative for the background
            sign = 1.0 if index == 1 else -1.0
            return lambda out: sign * out[:, 0].flatten(1).sum(1)
        return segmentation_target(index)
    if output.dim() == 2:  # classification: N x classes
        if chosen is None:
            return None  # each image's predicted class
        count = output.shape[1]
        return _class_index(chosen, count, classes[:count] if len(classes) >= count else [])
    raise ConfigError(f"--class: outputs of shape {tuple(output.shape)} are neither a classifier's (N x classes) nor a "
                      "segmentation model's (N x K x H x W); explain them in Python with gpucore.gradcam and a target "
                      "callable")


def _class_choices(count: int, names) -> str:
    listed = f"; or a name: {', '.join(names)}" if names else ""
    return f"an index 0 to {count - 1}{listed}"


def _class_index(chosen: str, count: int, names) -> int:
    """--class's value as a class index: an integer below `count`, or one of `names`."""
    from .errors import ConfigError

    if chosen in names:
        return list(names).index(chosen)
    try:
        index = int(chosen)
    except ValueError:
        index = None
    if index is None or not 0 <= index < count:
        raise ConfigError(f"--class '{chosen}' is not a class of this model: give {_class_choices(count, names)}")
    return index


def _report(args: argparse.Namespace) -> int:
    from .evaluation.run_report import write_report

    try:
        print(write_report(args.run_dir, args.device, args.model, args.data, args.split))
    except KeyboardInterrupt:
        print(f"gpucore: report interrupted; report.html and plots/ of '{args.run_dir}' were left as they were "
              f"(write them with  gpucore report {shlex.quote(args.run_dir)})", file=sys.stderr)
        return 130
    return 0


def _runs(args: argparse.Namespace) -> int:
    """`gpucore runs [DIR]`: a table of the runs under DIR."""
    from .runs import find_runs, format_table

    rows = find_runs(args.folder)
    print(format_table(rows) if rows else f"no runs in '{args.folder}' (none of its folders holds a training_stats.json)")
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from .evaluation.evaluate import evaluate

    summary = evaluate(args.checkpoint, args.data, args.split, args.device, args.out, args.model)
    print(json.dumps({k: v for k, v in summary.items() if k != "per_class"}, indent=2))
    return 0


def _predict(args: argparse.Namespace) -> int:
    """`gpucore predict CHECKPOINT INPUTS`: the CSV (and mask PNGs), and a JSON summary on stdout; for video clips
    (a sign-language model), each clip's glosses instead, unless --json."""
    import os

    from .evaluation.load import load
    from .evaluation.predict import predict

    out = os.path.abspath(args.out)
    masks = args.masks or os.path.splitext(out)[0] + "_masks"
    checkpoint = load(args.checkpoint, args.device, args.model) if args.model else args.checkpoint
    result = predict(checkpoint, args.inputs, top_k=args.top_k, masks=masks, device=args.device,
                     batch_size=args.batch_size, on_error=args.on_error)
    for entry in result.skipped:
        print(f"gpucore: skipped {entry}", file=sys.stderr)
    result.write_csv(out)
    summary = {"inputs": len(result), "out": out}
    if result.skipped:
        summary["skipped"] = result.skipped
    if result.mask_files is not None:
        summary["masks"] = masks
    if result.labels is not None:
        summary["accuracy"] = result.accuracy()
    if result.notes:
        summary["notes"] = result.notes
    clips = bool(result.rows) and "glosses" in result.rows[0]  # video clips for a sign-language model
    if clips:
        summary["glosses"] = {row["input"]: row["glosses"].split() for row in result.rows}
    if clips and not args.json:  # the gloss sequence; each clip's on a line of its own for several
        for row in result.rows:
            print(row["glosses"] if len(result.rows) == 1 else f"{row['input']}: {row['glosses']}")
        return 0
    print(json.dumps(summary, indent=2))
    return 0


def _export(args: argparse.Namespace) -> int:
    """`gpucore export CHECKPOINT --format onnx|safetensors`: the files, and a JSON summary on stdout."""
    from .errors import ExportError
    from .evaluation.export import export
    from .evaluation.load import load

    checkpoint = load(args.checkpoint, "cpu", args.model) if args.model else args.checkpoint
    try:
        result = export(checkpoint, args.format, args.out, opset=args.opset)
    except ExportError as exc:
        print(f"gpucore: export failed: {masked(str(exc))}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2))
    return 0


def _model_option(command: argparse.ArgumentParser) -> None:
    command.add_argument("--model", metavar="package.module:factory",
                         help="the model to load the checkpoint's weights into (default: the one its config names); "
                         "needed for a run whose model was given to gpucore.train in Python and cannot be rebuilt by "
                         "name (config.json says model: python:...): a class or function importable from PYTHONPATH "
                         "that builds it with no arguments")


def build_parser() -> argparse.ArgumentParser:
    from .cam import METHODS
    from .evaluation.run_data import SPLITS

    parser = argparse.ArgumentParser(prog="gpucore", description="gpucore: a native training core for PyTorch")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    doctor = commands.add_parser("doctor", help="check devices, versions and precision; run a smoke test")
    doctor.add_argument("--device", default="auto", help="the device you will ask for: auto (default), cpu, cuda, cuda:N, mps")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument("--no-smoke-test", action="store_true", help="skip the matmul/conv smoke test")
    doctor.set_defaults(run=_doctor)

    train = commands.add_parser("train", help="train a model from a config file (default: the built-in config)")
    train.add_argument("config", nargs="?", default=None, help="a .yaml/.yml/.json config; omitted: the built-in defaults")
    train.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key (repeatable)")
    train.add_argument("--resume", metavar="RUN_DIR|auto|PATH",
                       help="continue a run: RUN_DIR (that run with its own config.json, from its newest checkpoint; "
                       "--set may change only how it goes on: epochs where the schedule allows, device, progress, ...), "
                       "auto (the newest checkpoint of the run CONFIG names) or PATH (a checkpoint)")
    train.add_argument("--devices", type=int, help="data-parallel processes on this machine (default 1)")
    train.set_defaults(run=_train)

    cam = commands.add_parser("gradcam", help="class activation maps of images for a trained checkpoint")
    cam.add_argument("--checkpoint", required=True, help="a gpucore checkpoint (best.pt, last.pt)")
    cam.add_argument("--layer", default="auto", help="target layer, a dotted name such as layer4 or features.7 "
                     "(default auto: the last layer with a spatial output before the head)")
    cam.add_argument("--images", required=True, help="a folder of PNG/JPEG images or a .npy/.npz uint8 array")
    cam.add_argument("--size", type=int, nargs=2, metavar=("HEIGHT", "WIDTH"),
                     help="read the images at this size for the model (default: as its run read images: the size it "
                     "was trained at, or each image's own size through its transforms' Resize + CenterCrop)")
    cam.add_argument("--out", required=True, help="folder for the overlays (PNG, each at its image's own size: the map "
                     "drawn back onto the whole image, no heat where a centre crop cut it off) and the maps of the "
                     "model's inputs (cams_METHOD.pt)")
    cam.add_argument("--method", default="gradcam", help=f"{', '.join(METHODS)} (default gradcam)")
    cam.add_argument("--class", dest="category", metavar="K",
                     help="the class to explain, an index or a class name: for a classifier instead of each image's "
                     "predicted class; required for a segmentation model (its logits of class K summed over the "
                     "image; a one-channel model: 0 the background, 1 the foreground)")
    cam.add_argument("--target", type=int, help="class index, as --class K (default: each image's predicted class)")
    cam.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N, mps")
    cam.add_argument("--batch-size", type=int, default=32, help="images per pass, and image files decoded at a time "
                     "(default 32)")
    _model_option(cam)
    cam.set_defaults(run=_gradcam)

    report = commands.add_parser("report", help="write report.html and plots/ for a run directory (also an interrupted run)")
    report.add_argument("run_dir", help="the run's directory (holds training_stats.json and checkpoints/)")
    report.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N, mps")
    report.add_argument("--data", help="a data set as config key data names it (a built-in set, a .npz, a folder: IDX "
                        "or .npy files, class subfolders, or images/ and masks/ for segmentation): the run's model "
                        "scored on it in a page BESIDE the run's own report, report-NAME.html with plots-NAME/ and "
                        "per_class-NAME.json (NAME: its folder's or file's name, -SPLIT added for a split other than "
                        "all); the run's report.html and plots/ are left as they are. Default: the run's own data, "
                        "into report.html (needed for a run whose data was given to gpucore.train in Python)")
    report.add_argument("--split", choices=list(SPLITS), help="which samples of the data the page scores, as gpucore "
                        "evaluate's --split (default: all with --data, val without)")
    _model_option(report)
    report.set_defaults(run=_report)

    runs = commands.add_parser("runs", help="a table of the runs under a folder: name, status, epochs, best metric, "
                               "device, time (from their training_stats.json)")
    runs.add_argument("folder", nargs="?", default="runs", help="the folder of the run directories (default runs)")
    runs.set_defaults(run=_runs)

    evaluate = commands.add_parser("evaluate", help="metrics and the report's plots of a checkpoint on a data set")
    evaluate.add_argument("checkpoint", help="a gpucore checkpoint (best.pt, last.pt), or a run directory (its "
                          "best.pt, else last.pt, else interrupted.pt)")
    evaluate.add_argument("--data", help="a data set as config key data names it (a built-in set, a .npz, a folder: "
                          "IDX or .npy files, class subfolders, images/ and masks/ for segmentation, train/ beside "
                          "test/ or val/), read with the run's channels and size; scored whole unless --split says "
                          "otherwise (default: the run's own data, its validation samples; needed for a run whose "
                          "data was given to gpucore.train in Python)")
    evaluate.add_argument("--split", choices=list(SPLITS), help="which samples of the data: " + "; ".join(
                          f"{name}: {meaning}" for name, meaning in SPLITS.items()) + ". A split that does not apply "
                          "to the data is refused, naming those that do")
    evaluate.add_argument("--out", help="folder for evaluation.json, per_class.json, plots/ and report.html "
                          "(default: RUN_DIR/evaluate-SPLIT for the run's own data, RUN_DIR/evaluate-NAME with "
                          "--data, NAME its folder's or file's name, -SPLIT added for a split other than all)")
    evaluate.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N, mps")
    _model_option(evaluate)
    evaluate.set_defaults(run=_evaluate)

    predict = commands.add_parser("predict", help="predictions of a trained checkpoint on images, into a CSV")
    predict.add_argument("checkpoint", help="a gpucore checkpoint (best.pt, last.pt)")
    predict.add_argument("inputs", nargs="+", help="one or more: a folder of PNG/JPEG images (class subfolders "
                         "allowed), an image, a .npy/.npz array, an IDX image file; for a sign-language model clips: "
                         "video files (.mp4, ...) or frame folders (a folder of numbered images is one clip), or T x F "
                         "keypoint .npy files for a keypoint model; one table across all, in the order given")
    predict.add_argument("--out", default="predictions.csv", help="the CSV, one row per input (default predictions.csv)")
    predict.add_argument("--top-k", type=int, default=5, help="classes per input for classification (default 5)")
    predict.add_argument("--masks", help="segmentation: folder for the mask PNGs (default: OUT's name + _masks)")
    predict.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N, mps")
    predict.add_argument("--batch-size", type=int, help="inputs per pass (default: the run's eval_batch_size)")
    predict.add_argument("--json", action="store_true", help="clips (a sign-language model): the JSON summary, "
                         "each clip's glosses under 'glosses' (default: the glosses, a line per clip)")
    predict.add_argument("--on-error", choices=["raise", "skip"], default="raise",
                         help="an image file that cannot be read or decoded: raise (default: an error naming it) or "
                         "skip (left out, listed on stderr and in the summary's skipped with the reason)")
    _model_option(predict)
    predict.set_defaults(run=_predict)

    export = commands.add_parser("export", help="a trained checkpoint as ONNX (checked with onnxruntime) or "
                                 "safetensors weights, with its preprocessing as JSON")
    export.add_argument("checkpoint", help="a gpucore checkpoint (best.pt, last.pt)")
    export.add_argument("--format", required=True, choices=["onnx", "safetensors"], help="onnx or safetensors")
    export.add_argument("--out", help="the file to write (default: the checkpoint's name with .onnx/.safetensors)")
    export.add_argument("--opset", type=int, default=18, help="ONNX opset (default 18)")
    _model_option(export)
    export.set_defaults(run=_export)
    return parser


def _current_folder_importable() -> None:
    """`model: mymodule:factory` (and other `module:name` config values) finds mymodule.py in the current folder, from
    the `gpucore` console script as from `python -m gpucore` (which puts the current folder first on sys.path
    itself); it is appended, so installed packages keep their names."""
    here = os.getcwd()
    if not any(os.path.abspath(entry or os.curdir) == here for entry in sys.path):
        sys.path.append(here)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning as a command-line user reads it: what and why, not the library's file, line and source."""
    print(f"gpucore: warning: {masked(str(message))}", file=sys.stderr if file is None else file)


def command() -> None:
    """The gpucore command's process (the console script and `python -m gpucore`, the `devices: N` ranks too):
    main's exit status as the process's, and an exit without searching torch's and gpucore's objects for reference
    cycles. The interpreter's collections at exit went over the 170,000 objects their imports leave tracked:
    `gpucore runs` took 3.36 CPU-s with them, 2.67 without (medians of 8 interleaved runs; 2-core AMD EPYC,
    2026-11-30). Frozen, the objects still go with the process (atexit handlers run, refcounting frees what it
    frees); only objects in a reference cycle are not finalized, and gpucore has closed its files and loggers by
    then."""
    status = main()
    gc.freeze()
    sys.exit(status)


def main(argv: Optional[Sequence[str]] = None) -> int:
    _current_folder_importable()
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    from .errors import ConfigError, DeviceUnavailableError, TrainingError

    try:
        with warnings.catch_warnings():  # restores showwarning after the command
            warnings.showwarning = _show_warning
            return args.run(args)
    except (ConfigError, DeviceUnavailableError, NotImplementedError) as exc:
        print(f"gpucore: error: {masked(str(exc))}", file=sys.stderr)  # a message may quote a value, URIs and all
        return 2
    except TrainingError as exc:
        print(f"gpucore: training failed: {masked(str(exc))}", file=sys.stderr)
        return 1
