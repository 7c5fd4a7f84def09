"""Training at 224 px from a folder of JPEG photos, side by side in one run: gpucore.train (streamed and cached)
against a plain PyTorch loop fed by torch's DataLoader with torchvision.transforms.v2, PyTorch Lightning on the
same DataLoader, a plain loop fed by an NVIDIA DALI pipeline (its CPU pipeline on a CPU), and the limit: the same
step fed with tensors already in memory.

    python -m bench scale [--workloads resnet18_frozen resnet18 ...] [--images 512] [--min-size 256]
                          [--max-size 500] [--batch-size 32] [--epochs 2] [--rounds 3] [--only TRAINER ...]
                          [--data photos|camera] [--camera-size H W] [--cache-dir DIR] [--markdown table.md]
                          [--json out.json]

The data is bench/scale_data.py's photo folder (real photographs cut into random crops with sides in
[--min-size, --max-size], 10 classes: the source photograph). Recipe, the same for every trainer: RandomResizedCrop
(--crop, 224), RandomHorizontalFlip, ColorJitter(0.4, 0.4, 0.4), Normalize (ImageNet's mean and std); AdamW (no
decay on biases and norm weights, gpucore's param_groups) with a cosine schedule over the run, stepped per batch;
cross-entropy; the precision and memory format gpucore's `auto` picks on this machine (bf16 autocast and
channels-last on a CPU with native bf16, float32 otherwise). Workloads: resnet18_frozen (torchvision ResNet-18
with its backbone frozen, BatchNorm statistics too: gpucore's freeze: backbone for every epoch), resnet18 and
resnet50 (all layers train), vit_small (timm's vit_small_patch16_224), and segformer_b0: transformers'
SegformerForSemanticSegmentation (mit-b0's layout, SegformerConfig's defaults) built by gpucore's registry, on
bench/scale_data.py's segmentation set made of the same photos (images/ JPEGs beside masks/ PNGs of 4 classes, the
crop's luminance bands; all one size, the mean of --min-size and --max-size, square: gpucore refuses segmentation
pairs of mixed sizes), the same recipe with RandomResizedCrop and the flip applied to image and mask alike (nearest
for the mask) and ColorJitter and Normalize to the image only, and cross-entropy per pixel on the logits upsampled
(bilinear) to the mask's size as gpucore does (segmentation_models.logits_of). The weights are random: no
pretrained weights are on disk here and nothing is downloaded; throughput does not depend on them.

Trainers: gpucore streamed (config key cache: none: JPEGs decoded on reader threads every epoch) and cached (cache:
auto: decoded once, uint8 kept); "DataLoader + plain loop" (PIL decoding, per-sample v2 transforms, as many workers
as cores, persistent, as timm's loader is wired); Lightning 2.x with the same DataLoader; "DALI + plain loop"
(fn.readers.file, fn.decoders.image, fn.random_resized_crop, fn.color_twist, fn.crop_mirror_normalize, as many
threads as cores), left out with the reason where nvidia-dali cannot run and for segmentation
(SEGMENTATION_IN_DALI); and the limit row (the plain loop's step on a few batches made once and held in memory,
cycled for the epoch's steps). For segformer_b0 the DataLoader's v2 pipeline gets (image, tv_tensors.Mask) pairs.

Each round trains every trainer once from the same initial weights, in turn first (a noisy machine slows them
alike); a run trains --epochs epochs and its images/s are over the epochs after the first (the first starts
workers, fills the cache, creates oneDNN's kernels). Reported per trainer: images/s (median over rounds, 10th-90th
percentiles) and its ratio to gpucore streamed, seconds per epoch, peak RSS of the process and its workers during
the run, CPU busy share (CPU seconds of the process and its workers over wall seconds x cores, the whole run),
the images each saw per timed epoch and the last epoch's mean loss. Then the input pipeline alone: images/s from
files to ready batches, no model, on the photo classification set only (once, with the first classification
workload). After each workload, what share of the limit row's images/s the gpucore rows reach, later epochs and
first epochs (the cache fill of cache: auto is in its first epoch; each row's first epoch also starts its workers
and creates oneDNN's kernels, the limit's too). Not a test: quote the numbers with the machine; --quick sizes check
the runner.

--data camera: the training workloads on photos as cameras take them instead (bench/scale_data.py's camera set:
--images 12-megapixel JPEGs of --camera-size, 1.7-2.4 MB each, one class per source photograph): the issue's end to
end goal, gpucore streamed and its cache's first epoch against the limit.

--camera N: instead, the input pipeline alone on photos as cameras take them (bench/scale_data.py's camera set: N
12-megapixel JPEGs, 1.7-2.4 MB each) to RandomResizedCrop(--crop) + RandomHorizontalFlip batches, no model: gpucore
streamed (cache: none) with decode: fast (the crop's box alone, at the DCT scale that keeps it at least --crop) and
decode: exact (the box alone, at full size); torch's DataLoader (as many workers as cores) with Pillow + torchvision
v2; and the same with Pillow's draft() (DCT scaling to at least 2 x --crop a side), the bound the goal names. Rounds
interleaved; ratios to the DataLoader + Pillow loop and to the draft bound.
"""
import argparse
import copy
import gc
import importlib.util
import os
import statistics
import sys
import tempfile
import threading
import time

import torch
from torch import nn

import gpucore
from gpucore.config import load_config
from gpucore.models.registry import build_model
from gpucore.models.surgery import backbone_split
from gpucore.models.segmentation_models import logits_of
from gpucore.training.engine_config import param_groups
from gpucore.device.placement import resolve_channels_last

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from augment_bench import MEAN, STD, TRANSFORMS, torchvision_pipeline  # noqa: E402
from common import (EpochClock, PilImageFolder, PilSegmentationFolder, collecting_new_objects_only,  # noqa: E402
                    device_label, import_lightning, import_torchvision, lightning_epoch_timer, lightning_module,
                    result_json, stepped_per_batch, sync)
from scale_data import (CAMERA_SIZE, DEFAULT_CACHE, SEGMENTATION_CLASSES, make_camera, make_photos,  # noqa: E402
                        make_segmentation)
from train_bench import Skip, percentile  # noqa: E402

WORKLOADS = {  # name: (gpucore's model name, frozen backbone, its data: "photos" (classes) or "segmentation")
    "resnet18_frozen": ("torchvision:resnet18", True, "photos"),
    "resnet18": ("torchvision:resnet18", False, "photos"),
    "resnet50": ("torchvision:resnet50", False, "photos"),
    "vit_small": ("timm:vit_small_patch16_224", False, "photos"),
    # SegformerConfig's defaults are mit-b0's layout (depths 2, 2, 2, 2; hidden sizes 32, 64, 160, 256; decoder 256)
    "segformer_b0": ("transformers:SegformerForSemanticSegmentation", False, "segmentation"),
}
CLASSES_KEY = {"torchvision": "num_classes", "timm": "num_classes", "transformers": "num_labels"}  # model_kwargs'
LIMIT_BATCHES = 4  # the limit row's batches held in memory


def transforms(crop: int) -> list:
    """augment_bench's ImageNet-style list with RandomResizedCrop's size set to `crop`."""
    return [{"RandomResizedCrop": {"size": crop}}, *TRANSFORMS[1:]]


class Workload:
    """What every trainer shares for one workload and round: the config (gpucore's, which the others read their
    recipe from), the folder (class subfolders, or images/ and masks/ for segmentation), the initial weights,
    precision and layout."""

    def __init__(self, name, args, device, folder):
        model_name, self.frozen, data = WORKLOADS[name]
        self.name, self.device, self.folder, self.args = name, device, folder, args
        self.segmentation = data == "segmentation"
        if self.segmentation:
            self.classes = SEGMENTATION_CLASSES
            self.images = len(os.listdir(os.path.join(folder, "images")))
        else:
            self.classes = len(os.listdir(folder))
            self.images = sum(len(os.listdir(os.path.join(folder, c))) for c in os.listdir(folder))
        # gpucore's config key data reads class folders only; segmentation pairs come as train_data (train_data()).
        self.config = load_config({
            **({} if self.segmentation else {"data": folder}), "val_fraction": 0.0, "model": model_name,
            "model_kwargs": {CLASSES_KEY[model_name.split(":")[0]]: self.classes},
            "transforms": transforms(args.crop), "optimizer": "adamw", "lr": 1e-3, "schedule": "cosine",
            "epochs": args.epochs, "batch_size": args.batch_size, "drop_last": True,
            "freeze": "backbone" if self.frozen else "none", "freeze_epochs": args.epochs, "precision": "auto",
            "channels_last": "auto", "progress": False, "report": False, "loggers": [], "seed": 0})
        self.policy = gpucore.resolve_precision(self.config.precision, device)
        self.policy.apply()
        self.channels_last = resolve_channels_last(self.config.channels_last, device, self.new_model())
        self.steps_per_epoch = self.images // args.batch_size
        self.seed = 0

    def new_model(self) -> nn.Module:
        """gpucore's registry builds it (the library's own factory, random weights); a segmentation model then
        returns its logits at the input's size (segmentation_models.logits_of), for every trainer alike."""
        return build_model(self.config.model, self.config.model_kwargs)

    def for_round(self, seed):
        workload = copy.copy(self)
        torch.manual_seed(seed)
        workload.initial = copy.deepcopy(self.new_model().state_dict())
        workload.seed = seed
        return workload

    def model(self) -> nn.Module:
        model = self.new_model()
        model.load_state_dict(self.initial)
        layout = torch.channels_last if self.channels_last else torch.preserve_format
        return model.to(self.device, memory_format=layout)

    def autocast(self):
        dtype = self.policy.autocast_dtype
        return torch.autocast(self.device.type, dtype=dtype, enabled=dtype is not None)

    def freeze(self, model) -> list:
        """The plain loop's freeze: backbone, as gpucore's: backbone parameters without gradients, its BatchNorm
        layers in eval mode (call after model.train()). Returns the parameters that train."""
        if self.frozen:
            split = backbone_split(model, "freeze")
            for param in split.backbone_params:
                param.requires_grad_(False)
            for name, module in model.named_modules():
                if isinstance(module, nn.modules.batchnorm._BatchNorm) and not split.in_head(name):
                    module.eval()
        return [param for param in model.parameters() if param.requires_grad]

    def optimizer(self, model):
        c = self.config
        groups = [{"params": g.params, "weight_decay": g.weight_decay, "lr": c.lr * g.lr_scale}
                  for g in param_groups(model, c)]
        optimizer = torch.optim.AdamW(groups, lr=c.lr, betas=tuple(c.betas), eps=c.eps, fused=True)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=c.epochs * self.steps_per_epoch,
                                                              eta_min=c.min_lr)
        return optimizer, schedule

    def inputs(self, x):
        x = x.to(self.device, non_blocking=True)
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x

    def train_data(self):
        """gpucore.train's train_data: the segmentation pairs, or None (config key data names the class folder)."""
        if not self.segmentation:
            return None
        return gpucore.data.read_segmentation(os.path.join(self.folder, "images"), os.path.join(self.folder, "masks"))

    def torch_dataset(self):
        """What a torchvision user reads: the same v2 pipeline, given (image, mask) pairs for segmentation."""
        pipeline = torchvision_pipeline(self.args.crop)
        if self.segmentation:
            return PilSegmentationFolder(os.path.join(self.folder, "images"), os.path.join(self.folder, "masks"),
                                         pipeline)
        return PilImageFolder(self.folder, pipeline)

    def torch_loader(self):
        cores = os.cpu_count() or 1
        return torch.utils.data.DataLoader(
            self.torch_dataset(), batch_size=self.args.batch_size,
            shuffle=True, drop_last=True, num_workers=cores, persistent_workers=True,
            pin_memory=self.device.type == "cuda", generator=torch.Generator().manual_seed(self.seed))


def loss_of(model, x, y):
    """The plain loops' loss: cross-entropy of the logits, per image, or per pixel for segmentation, whose logits
    are first brought to the masks' size by gpucore's rule (logits_of: bilinear; the registry's model has done that
    already, so here it leaves them as they are, as it does a classifier's N x K logits)."""
    return nn.functional.cross_entropy(logits_of(model(x), x), y)


# Each trainer returns per epoch (seconds, images seen, mean training loss).

def train_gpucore(w: Workload, cache: str):
    with tempfile.TemporaryDirectory() as run_dir:
        result = gpucore.train(load_config(w.config, {"cache": cache}), model=w.model(), seed=w.seed,
                               device=str(w.device), run_dir=run_dir, train_data=w.train_data())
    return [(row["epoch_time_s"], round(row["epoch_time_s"] * row["samples_per_s"]), row["train_loss"])
            for row in result.history]


def plain_loop(w: Workload, batches):
    """The careful plain loop: `batches()` yields one epoch of (inputs, targets); no host sync in an epoch but
    the loss read at its end."""
    model = w.model()
    optimizer, schedule = w.optimizer(model)
    clock, curve = EpochClock(w.device), []
    for _ in range(w.config.epochs):
        model.train()
        w.freeze(model)
        clock.start()
        total, seen = torch.zeros((), device=w.device), 0
        for x, y in batches():
            x, y = w.inputs(x), y.to(w.device, non_blocking=True)
            with w.autocast():
                loss = loss_of(model, x, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            total += loss.detach().float()
            seen += len(y)
        sync(w.device)
        clock.stop()
        curve.append((clock.times[-1], seen, float(total) / max(1, seen // w.args.batch_size)))
    return curve


def train_dataloader(w: Workload):
    loader = w.torch_loader()
    return plain_loop(w, lambda: loader)


def train_lightning(w: Workload):
    L = import_lightning()
    if L is None:
        raise Skip("lightning is not installed (pip install lightning)")
    seen, losses = [], []

    def loss(net, batch):
        x, y = batch
        out = loss_of(net, w.inputs(x), y)
        losses.append(out.detach().float())
        seen.append(len(y))
        return out

    class Freeze(L.Callback):
        def on_train_epoch_start(self, trainer, module):
            w.freeze(module.net)

    net = w.model()
    w.freeze(net)
    module = lightning_module(L, net, loss, lambda m: stepped_per_batch(*w.optimizer(m)))
    timer = lightning_epoch_timer(L, w.device)
    precision = {"bf16-mixed": "bf16-mixed", "16-mixed": "16-mixed"}.get(w.policy.precision, "32-true")
    trainer = L.Trainer(max_epochs=w.config.epochs, accelerator="gpu" if w.device.type == "cuda" else "cpu",
                        devices=1, precision=precision, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[Freeze(), timer],
                        num_sanity_val_steps=0)
    trainer.fit(module, w.torch_loader())
    per_epoch = w.steps_per_epoch
    return [(seconds, sum(seen[i * per_epoch:(i + 1) * per_epoch]),
             float(torch.stack(losses[i * per_epoch:(i + 1) * per_epoch]).mean()))
            for i, seconds in enumerate(timer.times)]


SEGMENTATION_IN_DALI = (
    "segmentation is not built in DALI here: fn.random_resized_crop draws its window for one input, so image and "
    "mask would need a hand-built pipeline (two readers kept in step by one seed, the window drawn once with "
    "fn.random.uniform and applied to both by fn.resize's roi arguments, nearest for the mask), not the recipe's "
    "ops as DALI users write them")


def dali_batches(w: Workload):
    """One epoch of (inputs, targets) at a time from a DALI pipeline: the same recipe's steps as DALI ops, decoded
    on the CPU here (the mixed decoder on a GPU). Raises Skip where nvidia-dali is missing or cannot run, and for
    segmentation (SEGMENTATION_IN_DALI)."""
    if w.segmentation:
        raise Skip(SEGMENTATION_IN_DALI)
    try:
        from nvidia.dali import fn, pipeline_def, types
    except ImportError as exc:
        raise Skip(f"nvidia-dali is not installed (pip install nvidia-dali-cuda130): {exc}") from exc
    except Exception as exc:  # noqa: BLE001  its import can fail in many ways on a machine it does not support
        raise Skip(f"nvidia-dali cannot run here: {type(exc).__name__}: {exc}") from exc
    gpu = w.device.type == "cuda"
    cores = os.cpu_count() or 1

    @pipeline_def(batch_size=w.args.batch_size, num_threads=cores, device_id=w.device.index or 0 if gpu else None,
                  seed=w.seed)
    def pipeline():
        jpegs, labels = fn.readers.file(file_root=w.folder, random_shuffle=True, name="reader")
        images = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB)
        images = fn.random_resized_crop(images, size=[w.args.crop, w.args.crop])
        jitter = lambda: fn.random.uniform(range=[0.6, 1.4])  # noqa: E731  ColorJitter(0.4)'s factors
        images = fn.color_twist(images, brightness=jitter(), contrast=jitter(), saturation=jitter())
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                          mean=[255 * m for m in MEAN], std=[255 * s for s in STD],
                                          mirror=fn.random.coin_flip())
        return images, labels.gpu() if gpu else labels

    try:
        pipe = pipeline()
        pipe.build()
    except Exception as exc:  # noqa: BLE001
        raise Skip(f"nvidia-dali cannot run here: {type(exc).__name__}: {exc}") from exc

    def to_torch(output):
        if gpu:
            from nvidia.dali.plugin.pytorch import feed_ndarray

            tensor = output.as_tensor()
            target = torch.empty(tensor.shape(), dtype=torch.float32 if tensor.dtype == types.FLOAT
                                 else torch.int32, device=w.device)
            feed_ndarray(tensor, target)
            return target
        return torch.from_numpy(output.as_array())

    def epoch():
        for _ in range(w.steps_per_epoch):
            images, labels = pipe.run()
            yield to_torch(images), to_torch(labels).view(-1).long()

    return epoch


def train_dali(w: Workload):
    return plain_loop(w, dali_batches(w))


def train_limit(w: Workload):
    held = []
    for x, y in w.torch_loader():  # made before the clock starts
        held.append((x.clone(), y.clone()))
        if len(held) == LIMIT_BATCHES:
            break
    return plain_loop(w, lambda: (held[i % len(held)] for i in range(w.steps_per_epoch)))


TRAINERS = {
    "gpucore streamed": lambda w: train_gpucore(w, "none"),
    "gpucore cached": lambda w: train_gpucore(w, "auto"),
    "DataLoader + plain loop": train_dataloader,
    "Lightning": train_lightning,
    "DALI + plain loop": train_dali,
    "limit: tensors in memory": train_limit,
}
REFERENCE = "gpucore streamed"
LIMIT = "limit: tensors in memory"


class ProcessMeter:
    """Peak RSS and CPU seconds of this process and the children it starts (DataLoader workers) while a trainer runs,
    sampled every 50 ms by a thread (a worker's last sample stands for it once it has exited). Children that were
    there before (a notebook's or a test session's other processes) are not the trainer's: left out."""

    def __enter__(self):
        import psutil

        self.process, self.peak, self.cpu = psutil.Process(), 0, {}
        self._others = {child.pid for child in self.process.children(recursive=True)}
        self._base = self._cpu_of(self.process)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._start = time.perf_counter()
        self._thread.start()
        return self

    @staticmethod
    def _cpu_of(process):
        times = process.cpu_times()
        return times.user + times.system

    def _sample(self):
        import psutil

        while True:
            rss = self.process.memory_info().rss
            for child in self.process.children(recursive=True):
                if child.pid in self._others:
                    continue
                try:
                    rss += child.memory_info().rss
                    self.cpu[child.pid] = self._cpu_of(child)
                except psutil.Error:
                    pass
            self.peak = max(self.peak, rss)
            if self._stop.wait(0.05):
                return

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.wall = time.perf_counter() - self._start
        self.cpu_seconds = self._cpu_of(self.process) - self._base + sum(self.cpu.values())
        self.busy_share = self.cpu_seconds / (self.wall * (os.cpu_count() or 1))


def input_pipeline_alone(w: Workload, rounds: int) -> dict:
    """Images/s of each input path from files to ready batches on the device, no model: the second of two epochs,
    median over rounds (rows interleaved)."""
    from augment_bench import later_epochs_rate

    def gpucore_loader(cache):
        dataset = gpucore.data.read_image_folder(w.folder, threads=os.cpu_count())
        return gpucore.DataLoader(dataset, w.args.batch_size, device=w.device, transforms=transforms(w.args.crop),
                                  cache=cache, shuffle=True, drop_last=True)

    def dali():
        epoch = dali_batches(w)
        return type("Epochs", (), {"__iter__": lambda self: epoch()})()

    paths = {"gpucore streamed": lambda: gpucore_loader("none"), "gpucore cached": lambda: gpucore_loader("auto"),
             "DataLoader": w.torch_loader, "DALI": dali}
    rates, skipped = {name: [] for name in paths}, {}
    images = w.steps_per_epoch * w.args.batch_size
    for index in range(rounds):
        names = list(paths)
        for name in names[index % len(names):] + names[:index % len(names)]:
            if name in skipped:
                continue
            try:
                rates[name].append(later_epochs_rate(paths[name], 2, images, w.device))
            except Skip as exc:
                skipped[name] = str(exc)
            gc.collect()  # DALI's pipeline and gpucore's reader threads gone before the DataLoader forks workers
    return {name: {"images_per_s": statistics.median(values), "p10": percentile(values, 0.1),
                   "p90": percentile(values, 0.9)} if values else {"skipped": skipped[name]}
            for name, values in rates.items()}


class PilDraftFolder(PilImageFolder):
    """PilImageFolder with Pillow's JPEG draft mode: each file decoded at the smallest DCT scale that keeps both sides
    at least `least` pixels (Image.draft), then `transform`."""

    def __init__(self, root, transform, least):
        super().__init__(root, transform)
        self.least = least

    def __getitem__(self, index):
        from PIL import Image

        path, label = self.items[index]
        with Image.open(path) as picture:
            picture.draft("RGB", (self.least, self.least))
            return self.transform(picture.convert("RGB")), label


def camera_pipeline(args, device) -> dict:
    """The input pipeline alone on camera-sized JPEGs (--camera): images/s per path, second of two epochs, median over
    rounds (paths interleaved, each round starting with the next), and the ratios the goal names."""
    from augment_bench import later_epochs_rate
    from torchvision.transforms import v2

    root = os.path.join(make_camera(args.camera, cache_dir=args.cache_dir, size=args.camera_size), "train")
    recipe = [{"RandomResizedCrop": {"size": args.crop}}, "RandomHorizontalFlip"]
    pipeline = v2.Compose([v2.PILToTensor(), v2.RandomResizedCrop(args.crop, antialias=True),
                           v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True)])
    cores = os.cpu_count() or 1
    batch = min(args.batch_size, args.camera)
    images = args.camera // batch * batch

    def gpucore_loader(decode):
        files = gpucore.data.read_image_folder(root, threads=cores, decode=decode)
        return gpucore.DataLoader(files, batch, device=device, transforms=recipe, cache="none", shuffle=True,
                                  drop_last=True, normalize=False)

    def torch_loader(dataset):
        return torch.utils.data.DataLoader(dataset, batch_size=batch, shuffle=True, drop_last=True,
                                           num_workers=cores, persistent_workers=True,
                                           generator=torch.Generator().manual_seed(0))

    paths = {"gpucore streamed, decode: fast": lambda: gpucore_loader("fast"),
             "gpucore streamed, decode: exact": lambda: gpucore_loader("exact"),
             "DataLoader + Pillow": lambda: torch_loader(PilImageFolder(root, pipeline)),
             "DataLoader + Pillow draft": lambda: torch_loader(PilDraftFolder(root, pipeline, 2 * args.crop))}
    rates = {name: [] for name in paths}
    for index in range(args.rounds):
        names = list(paths)
        for name in names[index % len(names):] + names[:index % len(names)]:
            rates[name].append(later_epochs_rate(paths[name], 2, images, device))
            print(f"round {index}: {name}: {rates[name][-1]:.1f} images/s", flush=True)
            gc.collect()
    rows = {name: {"images_per_s": statistics.median(values), "p10": percentile(values, 0.1),
                   "p90": percentile(values, 0.9)} for name, values in rates.items()}
    fast = rows["gpucore streamed, decode: fast"]["images_per_s"]
    return {"data": root, "images": images, "batch_size": batch, "crop": args.crop, "rounds": args.rounds,
            "paths": rows, "fast_over_dataloader": fast / rows["DataLoader + Pillow"]["images_per_s"],
            "fast_over_pillow_draft": fast / rows["DataLoader + Pillow draft"]["images_per_s"]}


def camera_markdown(result: dict, header: str) -> str:
    lines = [header, "", "| input pipeline alone (no model) | images/s (p10-p90) | x DataLoader + Pillow | x Pillow draft |",
             "|---|---|---|---|"]
    loader = result["paths"]["DataLoader + Pillow"]["images_per_s"]
    draft = result["paths"]["DataLoader + Pillow draft"]["images_per_s"]
    for name, r in result["paths"].items():
        lines.append(f"| {name} | {r['images_per_s']:.1f} ({r['p10']:.1f}-{r['p90']:.1f}) | "
                     f"{r['images_per_s'] / loader:.2f}x | {r['images_per_s'] / draft:.2f}x |")
    return "\n".join(lines) + "\n"


def run_workload(name, args, device, folder, with_pipeline=True) -> dict:
    """Every trainer on one workload, rounds interleaved; with_pipeline: then the input pipeline alone, which is
    measured on the photo classification set only (a segmentation workload never runs it)."""
    workload = Workload(name, args, device, folder)
    with_pipeline = with_pipeline and not workload.segmentation
    names = [n for n in TRAINERS if not args.only or n in args.only]
    runs, skipped = {n: [] for n in names}, {}
    for index in range(args.rounds):
        seeded = workload.for_round(index)
        for trainer in names[index % len(names):] + names[:index % len(names)]:
            if trainer in skipped:
                continue
            try:
                with ProcessMeter() as meter:
                    curve = TRAINERS[trainer](seeded)
            except Skip as exc:
                skipped[trainer] = str(exc)
                print(f"{name} {trainer}: left out: {exc}", flush=True)
                continue
            finally:
                gc.collect()  # DALI's pipeline and gpucore's reader threads gone before the DataLoader forks workers
            timed = curve[1:]
            rate = sum(n for _, n, _ in timed) / sum(s for s, _, _ in timed)
            runs[trainer].append({"images_per_s": rate, "epoch_s": [s for s, _, _ in curve],
                                  "images_per_epoch": [n for _, n, _ in curve], "loss": [v for _, _, v in curve],
                                  "peak_rss_mb": meter.peak / 2**20, "cpu_busy_share": meter.busy_share})
            print(f"{name} round {index + 1} {trainer}: {rate:.1f} images/s, epochs "
                  + ", ".join(f"{s:.1f} s" for s, _, _ in curve) + f", loss {curve[-1][2]:.3f}, peak RSS "
                  f"{meter.peak / 2**20:.0f} MB, CPU busy {meter.busy_share:.0%}", flush=True)
    rows = {}
    for trainer, values in runs.items():
        if not values:
            rows[trainer] = {"skipped": skipped.get(trainer, "did not run")}
            continue
        rates = [v["images_per_s"] for v in values]
        rows[trainer] = {"images_per_s": statistics.median(rates), "p10": percentile(rates, 0.1),
                         "p90": percentile(rates, 0.9),
                         "epoch_s": statistics.median(s for v in values for s in v["epoch_s"][1:]),
                         "first_epoch_s": statistics.median(v["epoch_s"][0] for v in values),
                         "first_epoch_images_per_s": statistics.median(v["images_per_epoch"][0] / v["epoch_s"][0]
                                                                       for v in values),
                         "images_per_epoch": sorted({n for v in values for n in v["images_per_epoch"]}),
                         "last_loss": statistics.median(v["loss"][-1] for v in values),
                         "peak_rss_mb": max(v["peak_rss_mb"] for v in values),
                         "cpu_busy_share": statistics.median(v["cpu_busy_share"] for v in values), "runs": values}
    reference = rows.get(REFERENCE, {}).get("images_per_s")
    for row in rows.values():
        if "images_per_s" in row:
            row["ratio_to_gpucore_streamed"] = row["images_per_s"] / reference if reference else None
    return {"model": workload.config.model, "frozen_backbone": workload.frozen, "data": folder,
            "task": "segmentation" if workload.segmentation else "classification", "images": workload.images,
            "classes": workload.classes, "steps_per_epoch": workload.steps_per_epoch,
            "precision": workload.policy.precision, "channels_last": workload.channels_last, "trainers": rows,
            "of_limit": of_limit(rows),
            **({"input_pipeline": input_pipeline_alone(workload, args.rounds)} if with_pipeline else {})}


def of_limit(rows: dict) -> dict:
    """The gpucore rows' images/s as shares of the limit row's, later epochs and first epochs ({} when the limit or
    both gpucore rows did not run)."""
    limit = rows.get(LIMIT, {})
    if "images_per_s" not in limit:
        return {}
    return {f"{name}{', first epoch' if first else ''}": rows[name][key] / limit[key]
            for first, key in ((False, "images_per_s"), (True, "first_epoch_images_per_s"))
            for name in (REFERENCE, "gpucore cached") if key in rows.get(name, {})}


def markdown(results: dict, header: str) -> str:
    """The docs table: one row per workload and trainer, then the input pipeline alone."""
    lines = [header, "",
             "| workload | trainer | images/s (p10-p90) | x gpucore streamed | s/epoch | first epoch s | peak RSS MB "
             "| CPU busy | last loss |", "|---|---|---|---|---|---|---|---|---|"]
    for name, workload in results["workloads"].items():
        if "skipped" in workload:
            lines.append(f"| {name} | every trainer | left out: {workload['skipped']} |||||||")
            continue
        for trainer, r in workload["trainers"].items():
            if "skipped" in r:
                lines.append(f"| {name} | {trainer} | left out: {r['skipped']} |||||||")
                continue
            ratio = r["ratio_to_gpucore_streamed"]
            lines.append(f"| {name} | {trainer} | {r['images_per_s']:.1f} ({r['p10']:.1f}-{r['p90']:.1f}) | "
                         f"{'' if ratio is None else f'{ratio:.2f}x'} | {r['epoch_s']:.1f} | {r['first_epoch_s']:.1f} | "
                         f"{r['peak_rss_mb']:.0f} | {r['cpu_busy_share']:.0%} | {r['last_loss']:.3f} |")
    shares = [f"{name}: " + ", ".join(f"{row} {share:.0%}" for row, share in workload["of_limit"].items())
              for name, workload in results["workloads"].items() if workload.get("of_limit")]
    if shares:
        lines += ["", "Share of the limit's images/s (first epoch: against the limit's first epoch): "
                  + "; ".join(shares) + "."]
    first = next((w for w in results["workloads"].values() if "input_pipeline" in w), None)
    if first is None:  # a segmentation workload alone: the input pipeline is measured on the photo classes only
        return "\n".join(lines) + "\n"
    lines += ["", "| input pipeline alone (no model) | images/s (p10-p90) |", "|---|---|"]
    for path, r in first["input_pipeline"].items():
        lines.append(f"| {path} | " + (f"left out: {r['skipped']}" if "skipped" in r else
                                      f"{r['images_per_s']:.1f} ({r['p10']:.1f}-{r['p90']:.1f})") + " |")
    return "\n".join(lines) + "\n"


def segmentation_side(args) -> int:
    """The one side of the segmentation set's square images: the photos' mean side. One size because gpucore
    trains segmentation pairs of one size only (cache none: "image ... is 89x65 but the data set's images are
    66x64; a data set needs images of one size"; cache auto the same, when decoding them)."""
    return (args.min_size + args.max_size) // 2


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--workloads", nargs="+", choices=list(WORKLOADS),
                        help="default: every workload on a GPU; resnet18_frozen and resnet18 on a CPU (the others take "
                             "tens of minutes on a few cores)")
    parser.add_argument("--images", type=int, default=512, help="training images (a multiple of --batch-size)")
    parser.add_argument("--min-size", type=int, default=256, help="the photos' smallest side")
    parser.add_argument("--max-size", type=int, default=500, help="the photos' largest side")
    parser.add_argument("--crop", type=int, default=224, help="RandomResizedCrop's size")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=2, help="per run; the first is not timed")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", action="append", choices=list(TRAINERS), help="run only these (repeatable)")
    parser.add_argument("--cache-dir", default=DEFAULT_CACHE, help="where bench/scale_data.py keeps the photos")
    parser.add_argument("--camera", type=int, metavar="N",
                        help="instead: the input pipeline alone on N 12-megapixel camera JPEGs (see above)")
    parser.add_argument("--data", choices=["photos", "camera"], default="photos",
                        help="the classification workloads' photos: mixed sizes in [--min-size, --max-size], or "
                             "--images camera JPEGs (see above)")
    parser.add_argument("--camera-size", type=int, nargs=2, default=list(CAMERA_SIZE), metavar=("H", "W"),
                        help="the camera photos' height and width, landscape (the portrait ones are turned)")
    parser.add_argument("--markdown", help="also write the table here (the docs' form)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    if args.epochs < 2:
        raise SystemExit("--epochs must be >= 2: images/s are over the epochs after the first")
    if args.images % args.batch_size:
        raise SystemExit("--images must be a multiple of --batch-size: every trainer then sees the same images")
    import_torchvision()  # before gpucore's model registry imports it (see import_torchvision)
    device = gpucore.select_device(args.device).device
    if args.camera is not None:
        if args.camera < 1:
            raise SystemExit("--camera must be >= 1 (photos)")
        with collecting_new_objects_only():  # the gc.collect() after each path
            camera = camera_pipeline(args, device)
        result = result_json({"device": device_label(device), "cores": os.cpu_count(), "camera": camera}, args.json)
        table = camera_markdown(camera, f"{result['device']}, {os.cpu_count()} cores, torch {torch.__version__}, "
                                        f"{result['date']}; {camera['images']} camera JPEGs of {args.camera_size[0]} x "
                                        f"{args.camera_size[1]} px, "
                                        f"RandomResizedCrop({args.crop}) + flip, batch {camera['batch_size']}, 2 "
                                        f"epochs a path (the first untimed), {args.rounds} interleaved rounds")
        if args.markdown:
            with open(args.markdown, "w") as handle:
                handle.write(table)
        print("\n" + table)
        return result
    if args.workloads is None:
        args.workloads = list(WORKLOADS) if device.type == "cuda" else ["resnet18_frozen", "resnet18"]
    side = segmentation_side(args)
    camera = args.data == "camera"
    if camera and any(WORKLOADS[name][2] != "photos" for name in args.workloads):
        raise SystemExit("--data camera trains the classification workloads only (its photos have no masks)")

    def photos():
        if camera:
            return make_camera(args.images, cache_dir=args.cache_dir, size=args.camera_size)
        return make_photos(args.images, 0, args.min_size, args.max_size, cache_dir=args.cache_dir)

    try:  # the sets the workloads read, made once
        roots = {data: photos() if data == "photos" else make_segmentation(args.images, 0, side, side,
                                                                           cache_dir=args.cache_dir)
                 for data in sorted({WORKLOADS[name][2] for name in args.workloads})}
    except ImportError as exc:  # scikit-image or scikit-learn, whose photos these are
        print(f"every workload left out: {exc}", flush=True)
        return result_json({"device": device_label(device), "skipped": str(exc)}, args.json)
    results = {"device": device_label(device), "cores": os.cpu_count(), "data": roots.get("photos"),
               **({"camera_size": args.camera_size} if camera else {"photo_sides": [args.min_size, args.max_size]}),
               "batch_size": args.batch_size, "epochs": args.epochs,
               "rounds": args.rounds, "crop": args.crop, "workloads": {}}
    if "segmentation" in roots:
        results.update(segmentation_data=roots["segmentation"], segmentation_side=side)
    policy = gpucore.resolve_precision("auto", device)
    for name in args.workloads:
        model_name, _, data = WORKLOADS[name]
        library = model_name.split(":")[0]
        try:
            if importlib.util.find_spec(library) is None:  # gpucore's registry would say so as a ConfigError
                raise ImportError(f"{library} is not installed (pip install {library})")
            with collecting_new_objects_only():  # the gc.collect() after each trainer and input pipeline
                results["workloads"][name] = run_workload(  # the input pipeline alone once: it has no model
                    name, args, device, os.path.join(roots[data], "train"),
                    not any("input_pipeline" in w for w in results["workloads"].values()))
        except ImportError as exc:  # timm for vit_small, transformers for segformer_b0
            results["workloads"][name] = {"skipped": f"{model_name} cannot be built here: {exc}"}
            print(f"{name}: left out: {exc}", flush=True)
        result = result_json(results, args.json)  # after every workload: a long run's finished part is kept
        header = (f"{result['device']}, {os.cpu_count()} cores, torch {torch.__version__}, {result['date']}; "
                  f"precision {policy.precision} (`auto`; channels-last for the conv nets); {args.images} "
                  + (f"camera JPEGs of {args.camera_size[0]} x {args.camera_size[1]} px" if camera else
                     f"JPEG photos with sides {args.min_size}-{args.max_size} px")
                  + f", RandomResizedCrop({args.crop}) + flip + ColorJitter "
                  f"+ Normalize, batch {args.batch_size}, {args.epochs} epochs a run (the first untimed), "
                  f"{args.rounds} interleaved rounds; random weights"
                  + (f"; segformer_b0: {args.images} crops of the same photos, all {side} x {side} px (gpucore "
                     f"refuses segmentation pairs of mixed sizes), each with a PNG mask of {SEGMENTATION_CLASSES} "
                     "luminance bands, the crop and flip on both, per-pixel cross-entropy"
                     if "segmentation" in roots else ""))
        table = markdown(results, header)
        if args.markdown:
            with open(args.markdown, "w") as handle:
                handle.write(table)
    print("\n" + table)
    return result


if __name__ == "__main__":
    main()
