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
