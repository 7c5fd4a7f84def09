"""Image files decoded while training runs (cache none): the same batches as the in-memory path, resize,
unreadable files, resume, shards, memory; segmentation masks that follow the images' crop and flip."""
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import gpucore
from gpucore import _C, data
from gpucore.data.png import encode_png
from conftest import assert_no_growth, require, settled


def write_png(path, image):
    with open(path, "wb") as handle:
        handle.write(encode_png(image))


def image_folder(root, classes=3, per_class=14, size=(10, 12), seed=0, sizes=None):
    """PNGs (and a few JPEGs when Pillow is installed) whose class is the dominant colour; `sizes`
    cycles through image sizes for mixed-size folders."""
    generator = torch.Generator().manual_seed(seed)
    try:
        from PIL import Image
    except ImportError:
        Image = None
    for label in range(classes):
        os.makedirs(root / f"class_{label}", exist_ok=True)
        for i in range(per_class):
            height, width = sizes[i % len(sizes)] if sizes else size
            image = torch.randint(0, 60, (height, width, 3), generator=generator, dtype=torch.uint8)
            image[:, :, label] += 150
            if Image is not None and i % 5 == 4:
                Image.fromarray(image.numpy()).save(root / f"class_{label}" / f"{i:03d}.jpg", quality=95)
            else:
                write_png(root / f"class_{label}" / f"{i:03d}.png", image)
    return root


def batches(loader, epochs=2):
    return [(x.clone(), y.clone()) for _ in range(epochs) for x, y in loader]


def assert_same_batches(a, b):
    assert len(a) == len(b)
    for (x, y), (ex, ey) in zip(a, b):
        assert torch.equal(y, ey)
        assert torch.equal(x, ex)


@pytest.mark.parametrize("threads,prefetch", [(1, 1), (4, 3)])
def test_streamed_batches_equal_the_in_memory_batches(tmp_path, threads, prefetch):
    root = str(image_folder(tmp_path / "train"))
    options = dict(batch_size=8, device="cpu", seed=5, crop_padding=2, hflip=True)
    streamed = gpucore.DataLoader(data.read_image_folder(root, threads=threads), cache="none", prefetch=prefetch, **options)
    in_memory = gpucore.DataLoader(data.read_image_folder(root), cache="device", **options)
    assert streamed.cache == "none" and in_memory.cache == "device"
    assert len(streamed) == len(in_memory) == 6
    assert_same_batches(batches(streamed), batches(in_memory))


def reader_threads():
    """The thread ids of this process's streamed-set readers (named gpucore-reader)."""
    tasks = "/proc/self/task"
    named = []
    for tid in os.listdir(tasks):
        try:
            with open(os.path.join(tasks, tid, "comm")) as handle:
                if handle.read().strip() == "gpucore-reader":
                    named.append(int(tid))
        except FileNotFoundError:  # a thread that ended meanwhile
            pass
    return named


LINUX_ONLY = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and CPU affinity are Linux's")


@LINUX_ONLY
def test_reader_threads_are_named_idle_on_a_cpu_device_and_end_with_their_loader(tmp_path):
    """Training on the CPU the readers run as SCHED_IDLE (they decode in the time the step's threads leave idle);
    this thread, which decodes what they have not, keeps its own policy."""
    root = str(image_folder(tmp_path / "train"))
    own_policy = os.sched_getscheduler(0)
    loader = gpucore.DataLoader(data.read_image_folder(root, threads=3), cache="none", batch_size=8, device="cpu")
    next(iter(loader))
    readers = reader_threads()
    assert len(readers) == 3
    assert [os.sched_getscheduler(tid) for tid in readers] == [os.SCHED_IDLE] * 3
    assert os.sched_getscheduler(0) == own_policy != os.SCHED_IDLE
    del loader
    assert settled(reader_threads, []) == []


@pytest.mark.kernel_build
@LINUX_ONLY
@pytest.mark.parametrize("sizes", [None, [(10, 12), (13, 9)]], ids=["one_size", "own_sizes"])
def test_batches_are_the_same_when_the_readers_get_no_core(tmp_path, sizes):
    """The readers share one core with a busy process: the training thread decodes what no reader has taken of the
    batch it waits for, and the batches are those of an unloaded run, bit for bit, whoever decoded each image."""
    root = str(image_folder(tmp_path / "train", per_class=24, sizes=sizes))
    transforms = [{"RandomResizedCrop": {"size": 8}}, "RandomHorizontalFlip"] if sizes else ()

    def loader():
        return gpucore.DataLoader(data.read_image_folder(root, threads=2), cache="none", batch_size=8, device="cpu",
                                  seed=3, transforms=transforms)

    expected = batches(loader())
    cores = os.sched_getaffinity(0)
    core = min(cores)
    busy = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{core}}})\nwhile True: pass"])
    try:
        time.sleep(0.3)  # the busy loop runs
        os.sched_setaffinity(0, {core})  # this thread, and the readers it starts from now on
        starved = batches(loader())
    finally:
        os.sched_setaffinity(0, cores)
        busy.kill()
        busy.wait()
    assert_same_batches(starved, expected)


@pytest.mark.kernel_build
def test_resize_matches_torchvision_and_streaming_resizes_alike(tmp_path):
    # torchvision's Resize: torch's uint8 kernel on CPUs with AVX2, float32 rounded on others (ATEN_CPU_CAPABILITY
    # default), where torch's own uint8 kernel rounds otherwise.
    TF = require("torchvision.transforms.v2.functional")
    root = image_folder(tmp_path / "mixed", per_class=6, sizes=[(10, 12), (23, 17), (8, 8)])
    with pytest.raises(gpucore.ConfigError, match=r"data_kwargs: \{size: \[H, W\]\} .* start config key transforms "
                                                  r"with RandomResizedCrop: \{size: S\} \(training\) or Resize: "
                                                  r"\{size: S\} \+ CenterCrop: \{size: S\}"):
        data.read_image_folder(str(root)).inputs
    files = data.read_image_folder(str(root), size=(9, 11))
    for path, image in zip(files.paths, files.inputs):
        original = _C.decode_image(path, 3).permute(2, 0, 1)[None]
        expected = TF.resize(original, [9, 11], antialias=True)[0]
        assert torch.equal(image, original[0] if original.shape[-2:] == (9, 11) else expected), path
    options = dict(batch_size=5, device="cpu", seed=1, shuffle=True)
    streamed = gpucore.DataLoader(data.read_image_folder(str(root), size=(9, 11)), cache="none", **options)
    assert_same_batches(batches(streamed, 1), batches(gpucore.DataLoader(files, cache="host", **options), 1))
    with pytest.raises(gpucore.ConfigError, match=r"image size must be .*got \(9, 0\)"):
        data.read_image_folder(str(root), size=(9, 0))


@pytest.mark.kernel_build
def test_resize_is_close_to_pillow(tmp_path):
    Image = require("PIL.Image")
    pixels = np.random.default_rng(0).integers(0, 256, (40, 52, 3), dtype=np.uint8)
    write_png(tmp_path / "a.png", torch.from_numpy(pixels))
    ours = data.read_files([str(tmp_path / "a.png")], [0], size=(17, 23)).inputs[0].permute(1, 2, 0).numpy().astype(int)
    theirs = np.asarray(Image.fromarray(pixels).resize((23, 17), Image.BILINEAR)).astype(int)
    assert np.abs(ours - theirs).max() <= 1


def test_unreadable_files_raise_naming_the_file_or_are_skipped(tmp_path):
    root = image_folder(tmp_path / "data", classes=2, per_class=6)
    (root / "class_1" / "999_cut.png").write_bytes((root / "class_1" / "000.png").read_bytes()[:50])
    loader = gpucore.DataLoader(data.read_image_folder(str(root)), batch_size=4, device="cpu", cache="none", shuffle=False)
    with pytest.raises(gpucore.ConfigError, match=r"999_cut.png' \(index 12\): corrupt PNG"):
        list(loader)
    skipping = gpucore.DataLoader(data.read_image_folder(str(root), on_error="skip"), batch_size=4, device="cpu",
                                  cache="none", shuffle=False)
    labels = torch.cat([y for _, y in skipping])
    assert labels.tolist() == [0] * 6 + [1] * 6
    assert len(skipping.skipped) == 1 and "999_cut.png" in skipping.skipped[0]


def test_streaming_resumes_mid_epoch_and_shards_cover_every_sample(tmp_path):
    root = str(image_folder(tmp_path / "train", per_class=10))
    options = dict(batch_size=4, device="cpu", seed=3, crop_padding=1, hflip=True, cache="none")
    whole = gpucore.DataLoader(data.read_image_folder(root), **options)
    list(whole)
    expected = batches(whole, 1)
    first = gpucore.DataLoader(data.read_image_folder(root), **options)
    list(first)
    iterator = iter(first)
    taken = [next(iterator) for _ in range(3)]
    resumed = gpucore.DataLoader(data.read_image_folder(root), **options)
    resumed.load_state_dict(first.state_dict())
    assert_same_batches(taken + batches(resumed, 1), expected)
    seen, lengths = [], []
    for rank in range(4):
        shard = gpucore.DataLoader(data.read_image_folder(root), rank=rank, world_size=4, **options)
        served = torch.cat([x.flatten(1) for x, _ in shard])
        lengths.append(served.shape[0])
        seen.append(served)
    assert lengths == [8, 8, 8, 8]  # 30 samples, 2 served twice for equal shards
    assert torch.cat(seen).unique(dim=0).shape[0] == 30


@pytest.mark.slow
def test_streaming_memory_is_flat_and_freed(tmp_path):
    # One epoch's batches are 3.3 MB (120 x 3 x 48 x 48 float32). 8 epochs may grow the process by a quarter of
    # one epoch: keeping one batch per epoch alive (8 x 442 KB) fails. Five loaders dropped after one batch may
    # too: one loader left alive with its 8 prefetched batches (3.5 MB) fails.
    root = str(image_folder(tmp_path / "train", per_class=40, size=(48, 48)))

    loader = gpucore.DataLoader(data.read_image_folder(root), batch_size=16, device="cpu", cache="none", hflip=True)
    epoch_bytes = sum(x.nbytes + y.nbytes for x, y in loader)

    def epoch():
        for _ in loader:
            pass

    assert_no_growth(epoch, 8, epoch_bytes // 4, warmup=2, what=f"after each epoch of {epoch_bytes} bytes")

    def one_batch_of_a_new_loader():
        loader = gpucore.DataLoader(data.read_image_folder(root), batch_size=16, device="cpu", cache="none", prefetch=8)
        next(iter(loader))

    # warm-up: the first loaders' threads each leave the C library an arena (about 0.5 MB)
    assert_no_growth(one_batch_of_a_new_loader, 6, epoch_bytes // 4, warmup=3, what="after each new loader")


def test_cache_choices_and_errors(tmp_path):
    root = str(image_folder(tmp_path / "train", per_class=4))
    tensors = (torch.zeros(8, 1, 4, 4, dtype=torch.uint8), torch.zeros(8, dtype=torch.long))
    with pytest.raises(gpucore.ConfigError, match="cache 'none' streams image files"):
        gpucore.DataLoader(tensors, batch_size=2, device="cpu", cache="none")
    with pytest.raises(gpucore.ConfigError, match="cache must be one of auto, device, host, none, got 'disk'"):
        gpucore.DataLoader(data.read_image_folder(root), batch_size=2, device="cpu", cache="disk")
    with pytest.raises(gpucore.ConfigError, match="config key 'cache' is 'disk'; valid values: auto, device, host, none"):
        gpucore.train(dict(cache="disk", progress=False, run_dir=str(tmp_path / "r")))
    assert gpucore.DataLoader(data.read_image_folder(root), batch_size=2, device="cpu").cache == "device"
    with pytest.raises(gpucore.ConfigError, match="prefetch must be >= 1, got 0"):
        gpucore.DataLoader(data.read_image_folder(root), batch_size=2, device="cpu", cache="none", prefetch=0)


@pytest.mark.kernel_build
def test_training_streams_an_image_folder_like_it_trains_in_memory(tmp_path):
    image_folder(tmp_path / "data" / "train", per_class=16, sizes=[(12, 12), (14, 10)])
    image_folder(tmp_path / "data" / "val", per_class=4, seed=1, sizes=[(12, 12)])

    def run(cache):
        config = dict(data=str(tmp_path / "data"), data_kwargs={"size": [12, 12], "threads": 3}, cache=cache,
                      epochs=4, batch_size=8, lr=0.01, hflip=True, crop_padding=1, progress=False,
                      run_dir=str(tmp_path / cache))
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 12 * 12, 3))
        return gpucore.train(config, model=model)

    streamed, in_memory = run("none"), run("device")
    assert streamed.best_metric == 1.0
    for a, b in zip(streamed.history, in_memory.history):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-6)
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-6)


def test_segmentation_masks_follow_the_crop_and_flip():
    generator = torch.Generator().manual_seed(0)
    masks = torch.randint(0, 3, (12, 9, 11), generator=generator)
    images = (masks * 100).to(torch.uint8)[:, None].expand(12, 3, 9, 11).contiguous()
    config = _C.AugmentConfig()
    config.enabled = True
    config.transforms = gpucore.transforms.specs(gpucore.transforms.training_form([], 3, True, (9, 11)))
    source = _C.TensorBatches(images, masks, 4, True, False, 7, torch.device("cpu"), config)
    moved = 0
    while (batch := source.next()) is not None:
        x, y = batch
        assert y.dtype == masks.dtype
        assert torch.equal((x[:, 0] * 255 / 100).round().long(), y)
        moved += int(not any(torch.equal(m, t) for m in masks for t in y))
    assert moved > 0  # the transform did move pixels


@pytest.mark.needs_cuda
def test_cuda_streaming_pinned_ring_side_stream_matches_the_cpu(tmp_path):
    root = str(image_folder(tmp_path / "train", per_class=30, size=(16, 16)))
    options = dict(batch_size=8, seed=2, crop_padding=2, hflip=True)
    streamed = gpucore.DataLoader(data.read_image_folder(root, threads=4), device="cuda", cache="none", prefetch=3, **options)
    resident = gpucore.DataLoader(data.read_image_folder(root), device="cuda", cache="device", **options)
    on_cpu = gpucore.DataLoader(data.read_image_folder(root), device="cpu", cache="device", **options)
    got, expected = batches(streamed, 3), batches(resident, 3)
    assert all(x.is_cuda for x, _ in got)
    assert_same_batches(got, expected)
    for (x, y), (cx, cy) in zip(got, batches(on_cpu, 3)):
        assert torch.equal(y.cpu(), cy)
        torch.testing.assert_close(x.cpu(), cx, rtol=1e-5, atol=1e-5)
    # The training stream never waits on the host for a copy: consuming an epoch syncs only at its end.
    torch.cuda.set_sync_debug_mode("error")
    try:
        for x, _ in streamed:
            x.mul_(2)
    finally:
        torch.cuda.set_sync_debug_mode(0)


@pytest.mark.parametrize("cache", ["none", "device"])
def test_half_precision_channels_last_batches(tmp_path, cache):
    root = str(image_folder(tmp_path / "train", per_class=4))
    options = dict(batch_size=6, device="cpu", seed=1, hflip=True, cache=cache)
    plain = batches(gpucore.DataLoader(data.read_image_folder(root), **options), 1)
    for dtype in (torch.bfloat16, torch.float16):
        loader = gpucore.DataLoader(data.read_image_folder(root), dtype=dtype, channels_last=True, **options)
        for (x, y), (px, py) in zip(batches(loader, 1), plain):
            assert x.dtype == dtype and x.is_contiguous(memory_format=torch.channels_last)
            assert torch.equal(y, py)
            torch.testing.assert_close(x.float(), px, rtol=1e-2, atol=2e-2)
    with pytest.raises(gpucore.ConfigError, match="batch dtype must be float32, float16 or bfloat16, got 'int8'"):
        gpucore.DataLoader(data.read_image_folder(root), dtype=torch.int8, **options)


@pytest.mark.parametrize("cache", ["none", "device"])
def test_training_reports_skipped_files(tmp_path, cache):
    import json

    root = image_folder(tmp_path / "data", classes=2, per_class=8)
    (root / "class_0" / "broken.png").write_bytes(b"not an image")
    config = dict(data=str(root), data_kwargs={"on_error": "skip"}, cache=cache, epochs=1, batch_size=4,
                  val_fraction=0.25, progress=False, run_dir=str(tmp_path / "runs"))
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 10 * 12, 2))
    result = gpucore.train(config, model=model)
    assert len(result.skipped_files) == 1 and "broken.png" in result.skipped_files[0]
    assert json.load(open(result.stats_path))["skipped_files"] == result.skipped_files
    with pytest.raises(gpucore.ConfigError, match="broken.png"):
        gpucore.train(dict(config, data_kwargs={}, run_dir=str(tmp_path / "raise")), model=model)


def segmentation_folders(root, count=10, size=(9, 11)):
    """Images whose grey value is 100 x the mask's class (0..2); every third mask marks class 1's pixels void (255)."""
    generator = torch.Generator().manual_seed(4)
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    for i in range(count):
        classes = torch.randint(0, 3, size, generator=generator).to(torch.uint8)
        write_png(root / "images" / f"{i:02d}.png", (classes * 100)[..., None].expand(*size, 3).contiguous())
        stored = torch.where(classes == 1, 255, classes).to(torch.uint8) if i % 3 == 0 else classes
        write_png(root / "masks" / f"{i:02d}.png", stored)
    return str(root / "images"), str(root / "masks")


def test_segmentation_pairs_stream_like_they_load_and_masks_follow_the_images(tmp_path):
    images, masks = segmentation_folders(tmp_path)
    options = dict(batch_size=4, device="cpu", seed=6, crop_padding=2, hflip=True, normalize=False)
    streamed = batches(gpucore.DataLoader(data.read_segmentation(images, masks, threads=3), cache="none", **options))
    in_memory = batches(gpucore.DataLoader(data.read_segmentation(images, masks), cache="device", **options))
    assert_same_batches(streamed, in_memory)
    voids = 0
    for x, y in streamed:
        assert y.dtype == torch.long and y.shape == (x.shape[0], 9, 11) and set(y.unique().tolist()) <= {0, 1, 2, 255}
        assert torch.equal((x[:, 0] * 255 / 100).round().long(), torch.where(y == 255, 1, y))  # void stays 255
        voids += int((y == 255).sum())
    assert voids > 0
    resized = dict(options, crop_padding=0, hflip=False)
    small = data.read_segmentation(images, masks, size=(6, 7))
    assert small.inputs.shape == (10, 3, 6, 7) and small.targets.shape == (10, 6, 7)
    assert set(small.targets.unique().tolist()) <= {0, 1, 2, 255}  # nearest: no blended class ids
    assert_same_batches(batches(gpucore.DataLoader(data.read_segmentation(images, masks, size=(6, 7)), cache="none",
                                                   **resized)),
                        batches(gpucore.DataLoader(small, cache="host", **resized)))
    write_png(tmp_path / "masks" / "03.png", torch.zeros(5, 5, dtype=torch.uint8))
    with pytest.raises(gpucore.ConfigError, match=r"03.png' \(index 3\): is 5x5 but the data set's images are 9x11.*"
                                                  r"for segmentation pairs gpucore.data.read_segmentation\(images, "
                                                  r"masks, size=\(H, W\)\), which resizes the masks alike"):
        list(gpucore.DataLoader(data.read_segmentation(images, masks), cache="none", **options))
    with pytest.raises(gpucore.ConfigError, match=r"03.png' is 5x5 but .*00.png' is 9x11"):
        data.read_segmentation(images, masks).inputs


def test_a_model_that_does_not_fit_the_data_gets_a_clear_error(tmp_path):
    root = image_folder(tmp_path / "data", classes=2, per_class=4)
    config = dict(data=str(root), epochs=1, batch_size=4, progress=False, run_dir=str(tmp_path / "runs"),
                  val_fraction=0.0, model_kwargs={"in_channels": 1})  # given: not taken from the RGB data
    with pytest.raises(gpucore.TrainingError, match=r"first training batch \(\d+ images \(3 x 10 x 12 uint8\) from .*"
                                                    r"expected input\[4, 3, 10, 12\] to have 1 channels"):
        gpucore.train(config)  # the default model, the Fashion-MNIST CNN, with 1 input channel
