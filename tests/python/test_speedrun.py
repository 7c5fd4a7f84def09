"""The speedrun: model fast_cnn against the same network written with torch.nn.functional, and
examples/configs/fashion_mnist_speedrun.yaml (what scripts/run_main.sh trains) learning the real Fashion-MNIST."""
import os

import pytest
import torch
from torch.nn import functional as F

from gpucore.config import load_config
from gpucore.data.builtin import find_fashion_mnist
from gpucore.errors import ConfigError
from gpucore.models import build_model

from conftest import gpucore_process

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
SPEEDRUN = os.path.join(ROOT, "examples", "configs", "fashion_mnist_speedrun.yaml")


def reference_forward(model, x):
    """conv -> 2x2 max-pool -> BatchNorm -> ReLU per block, the extra convs at the pooled size, a global max-pool
    and the linear head: written out with F and the model's own parameters (BatchNorm with batch statistics)."""
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    linear = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][0]
    layer = 0
    for block, extra in enumerate([0, 1, 0]):
        x = F.max_pool2d(F.conv2d(x, convs[layer].weight, padding=1), 2)
        x = F.relu(F.batch_norm(x, None, None, norms[layer].weight, norms[layer].bias, training=True))
        layer += 1
        for _ in range(extra):
            x = F.conv2d(x, convs[layer].weight, padding=1)
            x = F.relu(F.batch_norm(x, None, None, norms[layer].weight, norms[layer].bias, training=True))
            layer += 1
    return F.linear(F.adaptive_max_pool2d(x, 3).flatten(1), linear.weight, linear.bias)


def test_fast_cnn_is_the_network_written_out():
    torch.manual_seed(0)
    model = build_model("fast_cnn", {"widths": [8, 16, 24], "extra": [0, 1, 0]})
    for norm in (m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)):  # not the identity at init
        torch.nn.init.uniform_(norm.weight, 0.5, 1.5)
        torch.nn.init.uniform_(norm.bias, -0.5, 0.5)
    x = torch.randn(5, 1, 28, 28)
    torch.testing.assert_close(model(x), reference_forward(model, x), rtol=1e-5, atol=1e-5)
    assert sum(isinstance(m, torch.nn.Conv2d) for m in model.modules()) == 4
    wide = build_model("fast_cnn", {"num_classes": 3, "in_channels": 3})
    assert wide(torch.randn(2, 3, 32, 32)).shape == (2, 3)


@pytest.mark.parametrize("kwargs", [{"widths": [8, 16], "extra": [0]}, {"widths": [8, 0], "extra": [0, 0]},
                                    {"widths": [8], "extra": [-1]}, {"widths": [], "extra": []}])
def test_fast_cnn_names_what_is_wrong(kwargs):
    with pytest.raises(ConfigError, match=r"model_kwargs of fast_cnn: widths .* and extra"):
        build_model("fast_cnn", kwargs)


def test_the_main_job_trains_the_speedrun_config(tmp_path):
    """scripts/run_main.sh run as it is, with its installer and the gpucore command standing in (they record what
    they are asked): it installs, then runs `gpucore doctor`, then `gpucore train` on the speedrun config with the
    arguments it was given."""
    import shutil
    import subprocess

    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "scripts", "run_main.sh"), root / "scripts" / "run_main.sh")
    calls = tmp_path / "calls.txt"
    (root / "scripts" / "bootstrap.sh").write_text(f'echo "bootstrap $*" >> "{calls}"\n')
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "gpucore").write_text(f'#!/usr/bin/env bash\necho "gpucore $*" >> "{calls}"\n')
    (venv_bin / "gpucore").chmod(0o755)
    subprocess.run(["bash", str(root / "scripts" / "run_main.sh"), "--set", "epochs=8"], check=True, timeout=60,
                   env=dict(os.environ, GPUCORE_VENV=str(tmp_path / "venv")))
    assert calls.read_text().splitlines() == [
        "bootstrap ", "gpucore doctor",
        f"gpucore train {root}/examples/configs/fashion_mnist_speedrun.yaml --set epochs=8"]
    config = load_config(SPEEDRUN)  # the checkout's own copy of what it names
    assert (config.model, config.data, config.schedule) == ("fast_cnn", "fashion_mnist", "onecycle")


def speedrun_on_a_tenth(folder):
    """`gpucore train` of the recipe on a tenth of the data (6,000 training and 1,000 test images), its 4 epochs, in a
    process: the metrics.jsonl rows."""
    import json

    if find_fashion_mnist() is None:
        pytest.skip("needs the real Fashion-MNIST files (Debian's dataset-fashion-mnist)")
    settings = [f"run_dir={folder}", "progress=false", "report=false", "loggers=[]",
                'data_kwargs={"train_size": 6000, "val_size": 1000}']
    done = gpucore_process("train", SPEEDRUN, *[word for setting in settings for word in ("--set", setting)])
    assert done.returncode == 0, done.stderr[-3000:]
    [metrics] = folder.glob("*/metrics.jsonl")
    return [json.loads(line) for line in metrics.read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.prestarted(job=speedrun_on_a_tenth)
def test_speedrun_config_learns_the_real_fashion_mnist(prestarted):
    accuracy = [row["val_accuracy"] for row in prestarted]
    assert len(accuracy) == 4
    assert accuracy[-1] >= 0.85, accuracy  # measured 0.885 on the 2-core CPU (bf16-mixed)
    assert accuracy[-1] > accuracy[0], accuracy
