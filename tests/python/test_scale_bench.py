"""bench/scale_data.py's sets (deterministic, cached, real labels) and the quick form of python -m bench scale: every
trainer that can run here saw the same images and its loss is finite; one that cannot says why."""
import hashlib
import math
import pathlib
import runpy

import pytest

from conftest import require

pytestmark = pytest.mark.slow  # trains ResNet-18 six times

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"


def digests(root: pathlib.Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*.jpg"))}


def test_photo_set_is_deterministic_cached_and_in_range(tmp_path):
    require("skimage")
    require("sklearn")
    from PIL import Image

    data = runpy.run_path(str(BENCH / "scale_data.py"))
    first = pathlib.Path(data["make_photos"](24, 4, 40, 60, cache_dir=str(tmp_path / "a")))
    second = pathlib.Path(data["make_photos"](24, 4, 40, 60, cache_dir=str(tmp_path / "b")))
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


def test_scale_bench_quick_form(tmp_path):
    require("skimage")
    require("torchvision")
    bench = runpy.run_path(str(BENCH / "scale_bench.py"))
    result = bench["main"](["--device", "cpu", "--workloads", "resnet18_frozen", "--images", "16", "--batch-size",
                            "8", "--min-size", "64", "--max-size", "64", "--crop", "32", "--rounds", "1", "--cache-dir",
                            str(tmp_path), "--markdown", str(tmp_path / "table.md")])
    trainers = result["workloads"]["resnet18_frozen"]["trainers"]
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
    pipeline = result["workloads"]["resnet18_frozen"]["input_pipeline"]
    assert pipeline["gpucore streamed"]["images_per_s"] > 0 and pipeline["DataLoader"]["images_per_s"] > 0
    table = (tmp_path / "table.md").read_text()
    assert "| resnet18_frozen | gpucore streamed |" in table and result["torch"] in table
