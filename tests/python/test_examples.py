import pathlib
import runpy

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.skipif(not EXAMPLES.exists(), reason="needs the source tree")
def test_device_setup_example_learns_on_the_chosen_device(capsys):
    example = runpy.run_path(str(EXAMPLES / "device_setup.py"))
    summary = example["main"](["--steps", "60", "--batch-size", "32"])
    out = capsys.readouterr().out
    assert "device:" in out and "precision:" in out
    assert summary["last_loss"] < 0.5 * summary["first_loss"]


def test_train_bench_runs_and_reports_every_loop(tmp_path):
    bench = runpy.run_path(str(EXAMPLES.parent / "bench" / "train_bench.py"))
    report = bench["main"](["--epochs", "2", "--train-size", "256", "--json", str(tmp_path / "bench.json")])
    assert set(report["per_second"]) == {"gpucore.train", "seed-style loop", "hand-optimised loop"}
    assert all(value > 0 for value in report["per_second"].values())
    assert (tmp_path / "bench.json").exists()


def test_cam_bench_runs_and_reports(tmp_path):
    bench = runpy.run_path(str(EXAMPLES.parent / "bench" / "cam_bench.py"))
    report = bench["main"](["--batch", "2", "--size", "32", "--repeats", "1", "--json", str(tmp_path / "cam.json")])
    assert {"gpucore", "plain PyTorch"} <= set(report["per_second"])
    assert all(value > 0 for value in report["per_second"].values())


def test_data_bench_runs_and_reports(tmp_path):
    pytest.importorskip("PIL")
    bench = runpy.run_path(str(EXAMPLES.parent / "bench" / "data_bench.py"))
    report = bench["main"](["--images", "64", "--size", "8", "--epochs", "2", "--json", str(tmp_path / "data.json")])
    assert len(report["per_second"]) == 6 and all(value > 0 for value in report["per_second"].values())
