"""What every benchmark here shares: the device label, synchronisation, the ratio table and the JSON report."""
import contextlib
import datetime
import gc
import json
import platform
import time

import torch
import torch.utils.data


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def collecting_new_objects_only():
    """A block whose gc.collect() calls (each run's cyclic garbage freed between runs) scan only the objects made in
    it: what exists on entry (torch's modules, the benchmark's data) is frozen out of the collections, since a scan of
    it costs about 0.1 s a call. Unfrozen on exit."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def cpu_description() -> str:
    """The CPU's model and the vector units that decide torch's kernels and `precision: auto` (e.g.
    "AMD EPYC: AVX2, AVX-512, AVX512-BF16; torch kernels AVX512"): the machines differ from run to run."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    units = [name for flag, name in (("avx2", "AVX2"), ("avx512f", "AVX-512"), ("avx512_bf16", "AVX512-BF16"),
                                     ("amx_tile", "AMX")) if flag in flags]
    return f"{model}: {', '.join(units) or 'no AVX2'}; torch kernels {torch.backends.cpu.get_cpu_capability()}"


def device_label(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU {cpu_description()} ({torch.get_num_threads()} threads)"


def report(title: str, unit: str, rates: dict, reference: str, facts: dict, json_path=None) -> dict:
    """Prints `rates` (higher is better) with `reference`'s ratio to each, writes the JSON, returns it."""
    width = max(len(name) for name in rates) + 2
    print(title)
    print(f"{'implementation':<{width}}{unit:>17}   ratio of '{reference}' to this")
    for name, value in rates.items():
        print(f"{name:<{width}}{value:>17.1f}{rates[reference] / value:>12.2f}x")
    return result_json(dict(facts, per_second=rates,
                            ratio={name: rates[reference] / value for name, value in rates.items()}), json_path)


def result_json(result: dict, json_path=None) -> dict:
    """`result` with the date and versions, written to `json_path` when given."""
    result = dict(result, date=datetime.date.today().isoformat(), torch=torch.__version__,
                  python=platform.python_version(), cpu=cpu_description())
    if json_path:
        with open(json_path, "w") as handle:
            json.dump(result, handle, indent=2)
    return result


class PilImageFolder(torch.utils.data.Dataset):
    """What a torchvision user writes: one subfolder per class (sorted names are the classes), each file decoded by
    PIL as RGB, then `transform(picture)` per sample (torch's DataLoader workers run it)."""

    def __init__(self, root, transform):
        import os

        self.items = [(os.path.join(root, c, f), i) for i, c in enumerate(sorted(os.listdir(root)))
                      for f in sorted(os.listdir(os.path.join(root, c)))]
        self.transform = transform

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        from PIL import Image

        path, label = self.items[index]
        with Image.open(path) as picture:
            return self.transform(picture.convert("RGB")), label


class PilSegmentationFolder(PilImageFolder):
    """Segmentation pairs as a torchvision user reads them: images/ and masks/ paired by file name (without
    extension), the image decoded by PIL as RGB, the grey mask as a tv_tensors.Mask of class ids, then
    `transform(picture, mask)` (torchvision.transforms.v2 applies geometric transforms to both, nearest for the
    mask, and colour transforms to the image only). Yields (image, int64 H x W mask)."""

    def __init__(self, images, masks, transform):
        import os

        def stems(folder):
            return {os.path.splitext(f)[0]: os.path.join(folder, f) for f in sorted(os.listdir(folder))}

        image_files, mask_files = stems(images), stems(masks)
        if image_files.keys() != mask_files.keys():
            unpaired = sorted(image_files.keys() ^ mask_files.keys())
            raise ValueError(f"'{unpaired[0]}' has an image or a mask but not both ({len(unpaired)} unpaired in "
                             f"'{images}' and '{masks}')")
        self.items = [(image_files[stem], mask_files[stem]) for stem in sorted(image_files)]
        self.transform = transform

    def __getitem__(self, index):
        import numpy as np
        from PIL import Image
        from torchvision import tv_tensors

        image_path, mask_path = self.items[index]
        with Image.open(image_path) as picture, Image.open(mask_path) as mask:
            image, mask = self.transform(picture.convert("RGB"), tv_tensors.Mask(torch.from_numpy(np.array(mask))))
        return image, mask.as_subclass(torch.Tensor).long()

def import_torchvision():
    """torchvision, also where its compiled ops cannot load (its PyPI wheel is built for a CUDA torch; on a
    CPU-only torch its _C library fails to load). Its models are plain Python, but importing it registers
    fake kernels for torchvision::nms and qnms, which only that library defines: define the two schemas
    first. Raises ImportError when torchvision is not installed."""
    import importlib
    import sys

    try:
        return importlib.import_module("torchvision")
    except RuntimeError as exc:
        if "torchvision::nms does not exist" not in str(exc):
            raise
    for name in [name for name in sys.modules if name == "torchvision" or name.startswith("torchvision.")]:
        del sys.modules[name]
    library = torch.library.Library("torchvision", "FRAGMENT")
    for op in ("nms", "qnms"):
        library.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    import_torchvision.library = library  # a Library object unregisters its ops when collected
    return importlib.import_module("torchvision")


def import_lightning():
    """lightning, or None when it is not installed. It imports torchvision (through torchmetrics) when that is
    installed, so torchvision goes through import_torchvision first."""
    try:
        import_torchvision()
    except ImportError:
        pass
    try:
        import lightning
    except ImportError:
        return None
    return lightning


class EpochClock:
    """Times epochs: CUDA events on a GPU (the GPU's time, ended by one sync), the host clock on a CPU."""

    def __init__(self, device):
        self.device = device
        self.times = []

    def start(self):
        if self.device.type == "cuda":
            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._start = time.perf_counter()

    def stop(self):
        if self.device.type == "cuda":
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            end.synchronize()
            self.times.append(self._start.elapsed_time(end) / 1000)
        else:
            self.times.append(time.perf_counter() - self._start)


def lightning_module(L, net, loss, optimizers):
    """How the Lightning comparisons wrap a model: a LightningModule holding `net`, whose training_step returns
    `loss(net, batch)` and whose configure_optimizers returns `optimizers(net)`."""

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = net

        def training_step(self, batch, _):
            return loss(self.net, batch)

        def configure_optimizers(self):
            return optimizers(self.net)

    return Module()


def stepped_per_batch(optimizer, schedule) -> dict:
    """configure_optimizers' answer for a schedule stepped after every batch, as the plain loops step theirs."""
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def lightning_epoch_timer(L, device):
    """A Lightning callback that times each training epoch with an EpochClock into its `times`: how both Lightning
    comparisons measure an epoch."""

    class EpochTimer(L.Callback):
        def __init__(self):
            self.clock = EpochClock(device)
            self.times = self.clock.times

        def on_train_epoch_start(self, trainer, module):
            self.clock.start()

        def on_train_epoch_end(self, trainer, module):
            self.clock.stop()

    return EpochTimer()
