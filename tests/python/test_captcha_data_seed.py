"""The captcha example's --data-seed: training seeds that share it train on the same cached images."""
import pathlib
import runpy

import pytest
import torch

from conftest import require

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.skipif(not EXAMPLES.exists(), reason="needs the source tree")
def test_data_seed_fixes_the_images_and_seed_alone_draws_others(tmp_path):
    require("captcha")
    example = runpy.run_path(str(EXAMPLES / "captcha" / "captcha_train.py"))
    sizes = ["--train-size", "24", "--val-size", "8", "--cache-dir", str(tmp_path)]

    def images(*argv):
        (x_train, y_train), (x_val, _) = example["captcha_data"](example["arguments"]().parse_args(sizes + list(argv)))
        return x_train, y_train, x_val

    seed_zero = images("--seed", "0")
    shared = images("--seed", "1", "--data-seed", "0")
    own = images("--seed", "1")
    assert all(torch.equal(a, b) for a, b in zip(seed_zero, shared))
    assert not torch.equal(seed_zero[0], own[0]) and not torch.equal(seed_zero[1], own[1])
    assert sorted(path.name for path in tmp_path.iterdir()) == ["captcha-24-8-4-seed0.npz", "captcha-24-8-4-seed1.npz"]
