"""bench/scale_data.py's sets (deterministic, cached, real labels, masks from the photos) and the quick form of
python -m bench scale, classification and segmentation: every trainer that can run here saw the same images and its
loss is finite; one that cannot says why."""
import hashlib
import importlib.util
import math
import pathlib
import runpy

import pytest

from conftest import bench_all_quick, require

pytestmark = pytest.mark.slow  # trains ResNet-18 and SegFormer-B0 six times each

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"


def digests(root: pathlib.Path, pattern: str = "*.jpg") -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob(pattern))}


def made_twice(make, args, tmp_path) -> tuple:
    """The roots of the set `make(*args)` builds in two fresh caches, tmp_path/a and tmp_path/b."""
    return tuple(pathlib.Path(make(*args, cache_dir=str(tmp_path / cache))) for cache in ("a", "b"))


def test_photo_set_is_deterministic_cached_and_in_range(tmp_path):
    require("skimage")
    require("sklearn")
    from PIL import Image

    data = runpy.run_path(str(BENCH / "scale_data.py"))
    first, second = made_twice(data["make_photos"], (24, 4, 40, 60), tmp_path)
    assert digests(first) == digests(second) and len(digests(first)) == 28
    assert len({*digests(first).values()}) == 28  # distinct crops
    assert sorted(p.name for p in (first / "train").iterdir()) == sorted(
        ["astronaut", "chelsea", "coffee", "hubble_deep_field", "ihc", "motorcycle_left", "retina", "rocket", "china",
         "flower"])
    for path in first.rglob("*.jpg"):
        with Image.open(path) as picture:
            assert all(40 <= side <= 60 for side in picture.size) and picture.mode == "RGB"
    made = (first / "COMPLETE").stat().st_mtime_ns
    assert data["make_photos"](24, 4, 40, 60, cache_dir=str(tmp_path / "a")) == str(first)  # cached: not remade
    assert (first / "COMPLETE").stat().st_mtime_ns == made


def test_camera_set_is_deterministic_cached_and_of_the_size_asked(tmp_path):
    require("skimage")
    require("sklearn")
    from PIL import Image

    data = runpy.run_path(str(BENCH / "scale_data.py"))
    first, second = (pathlib.Path(data["make_camera"](4, cache_dir=str(tmp_path / cache), size=(60, 80)))
                     for cache in ("a", "b"))
    assert digests(first) == digests(second) and len(digests(first)) == 4
    for index, path in enumerate(sorted(first.rglob("*.jpg"), key=lambda p: p.name)):
        with Image.open(path) as picture:  # landscape and portrait in turn, 4:2:0 JPEG
            assert picture.size == ((80, 60) if index % 2 == 0 else (60, 80)) and picture.mode == "RGB"
    assert data["CAMERA_SIZE"] == (3000, 4000)


def test_segmentation_set_pairs_the_photo_crops_with_masks_of_their_luminance(tmp_path):
    require("skimage")
    require("sklearn")
    import numpy as np
    from PIL import Image

    data = runpy.run_path(str(BENCH / "scale_data.py"))
    first, second = made_twice(data["make_segmentation"], (12, 2, 40, 60), tmp_path)
    assert digests(first, "*.*g") == digests(second, "*.*g") and len(digests(first, "*.*g")) == 28  # jpg and png
    photos = pathlib.Path(data["make_photos"](12, 2, 40, 60, cache_dir=str(tmp_path / "a")))
    # the photo set's crops, byte for byte: one seed, one sequence of crops
    assert sorted(digests(first / "train" / "images").values()) == sorted(digests(photos / "train").values())
    classes = data["SEGMENTATION_CLASSES"]
    for image_path in sorted(first.rglob("images/*.jpg")):
        mask_path = image_path.parent.parent / "masks" / (image_path.stem + ".png")
        with Image.open(image_path) as picture, Image.open(mask_path) as mask:
            assert mask.mode == "L" and mask.size == picture.size and all(40 <= side <= 60 for side in mask.size)
            ids = np.asarray(mask)
            assert ids.max() < classes
            # the bands of the photo's own luminance (the JPEG's, so nearly all pixels)
            expected = np.asarray(data["luminance_mask"](picture.convert("RGB")))
            assert (ids == expected).mean() > 0.9, image_path.name
    assert len({int(v) for p in first.rglob("masks/*.png") for v in np.unique(np.asarray(Image.open(p)))}) == classes


def test_fashion_mnist_224_keeps_the_real_labels(tmp_path):
    from PIL import Image

    from gpucore.data.builtin import fashion_mnist, find_fashion_mnist

    if find_fashion_mnist() is None:
        pytest.skip("Fashion-MNIST's files are not on this machine")
    data = runpy.run_path(str(BENCH / "scale_data.py"))
    root = pathlib.Path(data["make_fashion_mnist_224"](20, 10, cache_dir=str(tmp_path)))
    (_, labels), (_, test_labels) = fashion_mnist(train_size=20, val_size=10)
    for split, expected in (("train", labels), ("val", test_labels)):
        found = {int(p.stem): int(p.parent.name.split("-")[0]) for p in (root / split).rglob("*.jpg")}
        assert [found[i] for i in range(len(expected))] == expected.tolist()
    with Image.open(next((root / "train").rglob("*.jpg"))) as picture:
        assert picture.size == (224, 224) and picture.mode == "RGB"


def quick_run(bench, workload, tmp_path, sides=("64", "64")) -> dict:
    return bench["main"](["--device", "cpu", "--workloads", workload, "--images", "16", "--batch-size", "8",
                          "--min-size", sides[0], "--max-size", sides[1], "--crop", "32", "--rounds", "1",
                          "--cache-dir", str(tmp_path), "--markdown", str(tmp_path / "table.md")])


def trainers_that_ran(bench, trainers: dict) -> dict:
    """The rows of the trainers that ran, checked: every trainer is listed, the core ones ran, each saw the 16 images
    every epoch with a finite loss; one that did not run says why."""
    assert set(trainers) == set(bench["TRAINERS"])
    ran = {name: row for name, row in trainers.items() if "skipped" not in row}
    assert {"gpucore streamed", "gpucore cached", "DataLoader + plain loop", "limit: tensors in memory"} <= set(ran)
    for name, row in trainers.items():
        if name not in ran:
            assert row["skipped"]  # the reason
    for name, row in ran.items():
        assert row["images_per_epoch"] == [16], name  # two steps of 8, every epoch, every trainer
        assert math.isfinite(row["last_loss"]) and 0 < row["last_loss"] < 10, name
        assert row["images_per_s"] > 0 and 0 < row["cpu_busy_share"] <= 1.05 and row["peak_rss_mb"] > 0, name
    assert ran["gpucore streamed"]["ratio_to_gpucore_streamed"] == 1.0
    return ran


@pytest.mark.prestarted(job=bench_all_quick)
def test_scale_bench_quick_form(prestarted):
    # bench/__main__.py's quick options for scale are quick_run's (resnet18_frozen): the runner's result and the
    # table it printed, checked here, rather than training the six trainers once more
    require("skimage")
    require("torchvision")
    bench = runpy.run_path(str(BENCH / "scale_bench.py"))
    report, printed = prestarted
    result = report["results"]["scale"]
    trainers_that_ran(bench, result["workloads"]["resnet18_frozen"]["trainers"])
    pipeline = result["workloads"]["resnet18_frozen"]["input_pipeline"]
    assert pipeline["gpucore streamed"]["images_per_s"] > 0 and pipeline["DataLoader"]["images_per_s"] > 0
    printed = printed.split("\n== scale ==\n")[1].split("\n== ")[0]  # scale's own output, its table last
    header = printed[:printed.index("\n\n| workload | trainer |")].rsplit("\n", 1)[-1]
    assert "| resnet18_frozen | gpucore streamed |" in printed and result["torch"] in header


def test_scale_bench_quick_form_segformer_b0(tmp_path):
    require("skimage")
    require("torchvision")
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("needs transformers (segformer_b0 is its SegformerForSemanticSegmentation; not installed)")
    bench = runpy.run_path(str(BENCH / "scale_bench.py"))
    result = quick_run(bench, "segformer_b0", tmp_path, sides=("56", "72"))
    assert result["segmentation_side"] == 64  # one size, the sides' mean: gpucore refuses mixed-size pairs
    workload = result["workloads"]["segformer_b0"]
    assert workload["task"] == "segmentation" and workload["classes"] == 4 and "input_pipeline" not in workload
    ran = trainers_that_ran(bench, workload["trainers"])
    assert "segmentation is not built in DALI" in workload["trainers"]["DALI + plain loop"]["skipped"]
    for name, row in ran.items():
        first_epoch = row["runs"][0]["loss"][0]
        assert abs(first_epoch - math.log(4)) < 0.3, (name, first_epoch)  # random weights: about ln(classes)
    # gpucore streamed and cached read the same batches (one order and augmentation for both)
    streamed, cached = (ran[name]["runs"][0]["loss"] for name in ("gpucore streamed", "gpucore cached"))
    assert streamed == pytest.approx(cached, rel=1e-2)
    table = (tmp_path / "table.md").read_text()
    assert "| segformer_b0 | DataLoader + plain loop |" in table and "all 64 x 64 px" in table
    assert "input pipeline alone" not in table  # measured on the photo classes only


def test_the_process_meter_counts_the_children_started_while_it_measures_and_no_other():
    """A process that was there before (here one spinning through the whole measure, as the suite's second pytest
    process does) is not the trainer's; a child started inside is counted."""
    import subprocess
    import sys
    import time

    meter_class = runpy.run_path(str(BENCH / "scale_bench.py"))["ProcessMeter"]
    spin = "import time\nend = time.process_time() + {}\nwhile time.process_time() < end: pass"
    before = subprocess.Popen([sys.executable, "-c", spin.format(30)])
    try:
        time.sleep(1.0)  # it has taken CPU time before the measure starts
        with meter_class() as meter:
            subprocess.run([sys.executable, "-c", spin.format(0.5)], check=True)
        assert before.poll() is None  # it ran through the whole measure
    finally:
        before.kill()
        before.wait()
    # the child started inside: its 0.5 CPU-s and its start, and this process's waiting (next to nothing)
    assert 0.4 < meter.cpu_seconds < 0.5 + meter.wall * 0.5, (meter.cpu_seconds, meter.wall)


def test_scale_bench_trains_camera_photos_against_the_limit(tmp_path):
    """--data camera: the training workloads on the camera set (here 16 small ones); each gpucore row's share of
    the limit is its images/s over the limit's, later epochs and first epochs, as the table says."""
    require("skimage")
    require("torchvision")
    bench = runpy.run_path(str(BENCH / "scale_bench.py"))
    trainers = ["gpucore streamed", "gpucore cached", "limit: tensors in memory"]
    result = bench["main"](["--device", "cpu", "--data", "camera", "--camera-size", "60", "80", "--workloads",
                            "resnet18_frozen", "--images", "16", "--batch-size", "8", "--crop", "32", "--rounds", "1",
                            "--cache-dir", str(tmp_path), "--markdown", str(tmp_path / "table.md"),
                            *(word for name in trainers for word in ("--only", name))])
    assert result["camera_size"] == [60, 80] and "photo_sides" not in result
    workload = result["workloads"]["resnet18_frozen"]
    assert pathlib.Path(workload["data"]).parent.name == "camera-16-seed0-60x80" and workload["classes"] == 10
    rows = workload["trainers"]
    assert set(rows) == set(trainers) and all(row["images_per_epoch"] == [16] for row in rows.values())
    limit = rows["limit: tensors in memory"]
    for name in trainers[:2]:
        row = rows[name]
        assert row["first_epoch_images_per_s"] == pytest.approx(16 / row["first_epoch_s"])
        assert workload["of_limit"][name] == pytest.approx(row["images_per_s"] / limit["images_per_s"])
        assert workload["of_limit"][f"{name}, first epoch"] == pytest.approx(
            row["first_epoch_images_per_s"] / limit["first_epoch_images_per_s"])
    table = (tmp_path / "table.md").read_text()
    assert "16 camera JPEGs of 60 x 80 px" in table
    share = f"{workload['of_limit']['gpucore streamed']:.0%}"
    assert f"Share of the limit's images/s (first epoch: against the limit's first epoch): resnet18_frozen: " \
           f"gpucore streamed {share}" in table


def test_scale_bench_refuses_segmentation_on_camera_photos(tmp_path):
    bench = runpy.run_path(str(BENCH / "scale_bench.py"))
    with pytest.raises(SystemExit, match="--data camera trains the classification workloads only"):
        bench["main"](["--device", "cpu", "--data", "camera", "--workloads", "segformer_b0", "--cache-dir",
                       str(tmp_path)])
