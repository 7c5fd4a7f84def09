"""gpucore.train end to end on the CPU: the default config, callbacks and early stopping, data sets and loaders
as inputs, channels-last, bf16, CTC, CUDA, torch.compile and the progress bar. Its numerics against plain PyTorch:
test_train_matches_torch.py; the run directory and resumes: test_train_run_dir_and_resume.py; the out-of-memory
retry: test_oom.py."""
import json
import os
import shutil
import warnings

import pytest
import torch
from torch import nn

import gpucore
from gpucore.config import load_config
import forked_python
from conftest import SMALL, assert_states_equal, mlp, plain, tensors


@pytest.mark.slow
def test_default_config_learns_the_real_fashion_mnist(tmp_path):
    """The default data is the real Fashion-MNIST (here its first 4,000 training and 1,000 test images); where its
    files are nowhere, the synthetic set stands in with a warning."""
    assert load_config(None).data == "fashion_mnist" and load_config(None).epochs == 10
    real = gpucore.data.builtin.find_fashion_mnist() is not None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = gpucore.train(run_dir=str(tmp_path), epochs=2, progress=False,
                               data_kwargs={"train_size": 4000, "val_size": 1000})
    assert real != any("SYNTHETIC" in str(warning.message) for warning in caught)
    assert result.status == "completed"
    assert result.monitor == "val_accuracy"
    assert result.best_metric >= (0.78 if real else 0.9), result.history  # real: 0.83 measured
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"]
    if torch.cuda.is_available():  # the default config picks the GPU and its fastest safe precision
        assert result.device == "cuda:0" and result.precision in ("bf16-mixed", "16-mixed")
    else:
        native_bf16 = gpucore.device_facts()["cpu"]["bf16"]  # auto trains in bf16 on CPUs that have it
        assert result.device == "cpu" and result.precision == ("bf16-mixed" if native_bf16 else "32")
    assert result.samples_per_second > 0
    # 57 steps an epoch: the metrics at step 50 and at the epoch's end, one validation, one checkpoint copy
    assert result.host_syncs_by_source == {"metrics": 4, "evaluation": 2, "checkpoint": 2} and result.host_syncs == 8


@pytest.mark.slow
def test_early_stopping(tmp_path):
    result = gpucore.train(dict(SMALL, run_dir=str(tmp_path), epochs=5, patience=1, min_delta=1.0))
    assert result.status == "early_stopped"
    assert len(result.history) == 2
    assert result.best_epoch == 1


@pytest.mark.slow
def test_callbacks_and_monitor(tmp_path):
    seen = []

    class Recorder:
        def on_epoch_end(self, trainer, epoch, record):
            seen.append((epoch, record["val_loss"]))

    result = gpucore.train(dict(SMALL, run_dir=str(tmp_path), epochs=2, monitor="val_loss"), callbacks=[Recorder()])
    assert [e for e, _ in seen] == [1, 2]
    assert result.best_metric == min(v for _, v in seen)


def test_dataset_and_dataloader_inputs(tmp_path):
    x, y = tensors(96)
    dataset = torch.utils.data.TensorDataset(x, y)
    from_dataset = gpucore.train(plain(tmp_path, batch_size=32, name="ds"), model=mlp(), train_data=dataset,
                                 val_data=dataset)
    assert from_dataset.steps == 3
    with torch.no_grad():  # validated on the data set: the trained model's accuracy on it
        expected = (from_dataset.model(x).argmax(1) == y).float().mean().item()
    assert from_dataset.history[0]["val_accuracy"] == pytest.approx(expected, abs=1e-6)
    loader = torch.utils.data.DataLoader(dataset, batch_size=16)
    from_loader = gpucore.train(plain(tmp_path, name="dl"), model=mlp(), train_data=loader)
    assert from_loader.steps == 6


@pytest.fixture
def restores_determinism():
    """A deterministic run turns torch's global switches on; they are put back for the tests after it."""
    before = torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic
    yield
    torch.use_deterministic_algorithms(before[0])
    torch.backends.cudnn.deterministic = before[1]


def test_channels_last_and_deterministic_run(tmp_path, restores_determinism):
    seen = []

    class Switches:
        def on_epoch_start(self, trainer, epoch):
            seen.append((torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic))

    torch.use_deterministic_algorithms(False)
    config = dict(SMALL, run_dir=str(tmp_path), epochs=1, channels_last=True, deterministic=True)
    result = gpucore.train(dict(config, name="a"), callbacks=[Switches()])
    again = gpucore.train(dict(config, name="b"))
    assert seen == [(True, True)]  # the epoch ran with deterministic algorithms only
    stats = json.load(open(result.stats_path))
    assert stats["channels_last"] is True
    for name, weight in result.model.state_dict().items():
        if weight.dim() == 4:  # the convolutions' weights were trained in the channels-last layout
            assert weight.is_contiguous(memory_format=torch.channels_last), name
            assert weight.shape[1] == 1 or not weight.is_contiguous(), name  # (one input channel: both layouts)
    assert_states_equal(again.model, result.model)  # two runs, the same weights bitwise
    assert [(r["train_loss"], r["val_loss"]) for r in result.history] == \
        [(r["train_loss"], r["val_loss"]) for r in again.history]


def test_channels_last_auto_is_on_for_conv_nets_on_the_cpu_and_cuda(tmp_path):
    from gpucore.device.placement import resolve_channels_last

    from gpucore.models import FashionMnistCNN

    cnn, mlp = FashionMnistCNN(), nn.Sequential(nn.Flatten(), nn.Linear(4, 2))
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert resolve_channels_last("auto", cpu, cnn) and not resolve_channels_last("auto", cpu, mlp)
    assert resolve_channels_last("auto", cuda, cnn) and not resolve_channels_last("auto", cuda, mlp)
    assert not resolve_channels_last("auto", torch.device("mps"), cnn)  # not measured there
    assert resolve_channels_last("true", cpu, mlp) and not resolve_channels_last("false", cpu, cnn)
    result = gpucore.train(dict(SMALL, run_dir=str(tmp_path), epochs=1, device="cpu"))
    stats = json.load(open(result.stats_path))
    assert stats["channels_last"] is True and stats["config"]["channels_last"] == "auto"
    assert result.model.features[0].weight.is_contiguous(memory_format=torch.channels_last)


def test_bf16_mixed_on_cpu_trains(tmp_path):
    from gpucore.models import FashionMnistCNN

    torch.manual_seed(0)
    model = FashionMnistCNN()
    dtypes = {}
    for name, module in model.named_modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            module.register_forward_hook(lambda m, i, o, name=name: dtypes.setdefault(name, set()).add(o.dtype))
    result = gpucore.train(dict(SMALL, run_dir=str(tmp_path), epochs=1, precision="bf16-mixed",
                                data_kwargs={"train_size": 1024, "val_size": 256, "seed": 3}), model=model)
    assert result.precision == "bf16-mixed"
    # autocast ran: every convolution and linear layer computed in bfloat16 (in training and in validation) ...
    assert dtypes and all(seen == {torch.bfloat16} for seen in dtypes.values()), dtypes
    # ... on float32 master weights
    assert all(p.dtype == torch.float32 for p in result.model.parameters())
    assert result.history[0]["val_accuracy"] > 0.5


def test_ctc_sequence_model_learns(tmp_path):
    (x, y), (xv, yv) = gpucore.data.synthetic.synthetic_sequences(train_size=448, val_size=64, steps=16, classes=5,
                                                             max_length=4, noise=0.1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 32), nn.ReLU(), nn.Linear(32, 5))
    result = gpucore.train(dict(run_dir=str(tmp_path), progress=False, epochs=10, batch_size=32, lr=0.01, loss="ctc",
                                schedule="constant", weight_decay=0.0, normalize=False),
                           model=model, train_data=(x, y), val_data=(xv, yv))
    assert result.monitor == "val_seq_accuracy"
    assert result.best_metric >= 0.9, result.history[-1]


@pytest.mark.needs_cuda
@pytest.mark.parametrize("precision", ["auto", "16-mixed", "32"])
def test_cuda_training_learns(tmp_path, precision):
    result = gpucore.train(dict(SMALL, run_dir=str(tmp_path), epochs=2, device="cuda", precision=precision,
                                data_kwargs={"train_size": 4000, "val_size": 1000}))
    assert result.device.startswith("cuda")
    assert result.best_metric >= 0.9, result.history
    assert result.history[-1]["gpu_memory_peak_bytes"] > 0


@pytest.mark.needs_cuda
def test_cuda_steps_do_not_synchronise_with_the_host():
    # Under torch's sync debugger an epoch of 90 steps syncs as often as one of 30: no step syncs.
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "gpu", "count_syncs.py")
    result = subprocess.run([sys.executable, script, "--steps", "90"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert result.stdout.strip().endswith(": 0 per step"), result.stdout


def _small_pooling_net(hidden):
    """A conv, a max-pool and two linear layers, `hidden` features between them, seeded: the same weights in every
    process."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(8 * 14 * 14, hidden), nn.Linear(hidden, 10))


def _compiled_history(config, hidden, capability=None):
    """gpucore.train(config, model=_small_pooling_net(hidden)) with compile: true in a process of its own (under
    ATEN_CPU_CAPABILITY=`capability` if given): the run's history."""
    import sys

    script = ("import json, sys; import gpucore; from test_train import _small_pooling_net; "
              "run = gpucore.train(dict(json.loads(sys.argv[1]), compile=True), model=_small_pooling_net(int(sys.argv[2]))); "
              "print(json.dumps(run.history))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")]))
    if capability is not None:
        env["ATEN_CPU_CAPABILITY"] = capability
    width = capability or "widest"
    done = forked_python.run([sys.executable, "-c", script, json.dumps(dict(config, name=f"compiled-{width}")),
                             str(hidden)], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, f"under {width}: {done.stderr[-2000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def require_compiler():
    if not (shutil.which("g++") or shutil.which("c++")):
        pytest.skip("torch.compile's inductor compiles C++ on the CPU: no compiler here (an installed wheel's check)")


def _compile_config(run_dir):
    return dict(SMALL, run_dir=str(run_dir), epochs=2, device="cpu", precision="32")


def compiled_runs_at_two_widths(folder):
    """torch.compile (inductor, with the machine's C++ compiler) under the C++ engine, in a process; then a second
    process with narrower vectors reading inductor's cache (the default one, where its probes of the CPU are kept; a
    model's width drawn anew, so no earlier run's graphs are there): (that width, {run: its history})."""
    import random

    from torch._inductor.cpu_vec_isa import pick_vec_isa

    require_compiler()
    narrower = {512: "avx2", 256: "default"}.get(pick_vec_isa().bit_width())
    hidden = random.SystemRandom().randrange(16, 4096)
    runs = {"compiled": _compiled_history(_compile_config(folder), hidden)}
    if narrower is not None:  # else inductor has no vectors here, so no narrower ones
        runs[f"compiled under {narrower}"] = _compiled_history(_compile_config(folder), hidden, narrower)
    return hidden, runs


@pytest.mark.slow
@pytest.mark.prestarted(job=compiled_runs_at_two_widths)
def test_compile_on_the_cpu_trains_like_eager_also_on_a_cache_from_wider_vectors(tmp_path, prestarted):
    # The compiled runs give the same losses as eager. torch 2.13's cache keys leave the width out, and a process
    # with narrower vectors, given the first's graphs, computed garbage max-pool indices (avx2 after avx512) or failed
    # to compile (default after avx2).
    hidden, runs = prestarted
    eager = gpucore.train(dict(_compile_config(tmp_path), name="eager"), model=_small_pooling_net(hidden))
    for name, history in runs.items():
        for ours, theirs in zip(history, eager.history, strict=True):
            assert ours["train_loss"] == pytest.approx(theirs["train_loss"], rel=1e-3), (name, hidden)  # fused kernels round differently
            assert ours["val_loss"] == pytest.approx(theirs["val_loss"], rel=1e-3), (name, hidden)


class Unpooling(nn.Module):
    """A model that runs max_unpool2d, which torch refuses under use_deterministic_algorithms(True) on the CPU too."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.linear = nn.Linear(28 * 28, num_classes)

    def forward(self, x):
        pooled, indices = nn.functional.max_pool2d(x.float(), 2, return_indices=True)
        return self.linear(nn.functional.max_unpool2d(pooled, indices, 2).flatten(1))


def test_an_operation_without_a_deterministic_implementation_names_the_config_key(tmp_path, restores_determinism):
    """Not a model that does not fit the data (what the first batch's error said, on an H200 for fast_cnn's
    adaptive_max_pool2d_backward_cuda): the error names config key deterministic, the operation and the way out."""
    config = dict(SMALL, run_dir=str(tmp_path), epochs=1, device="cpu", deterministic=True)
    with pytest.raises(gpucore.TrainingError, match=r"config key 'deterministic' is true, and the model runs "
                                                    r"max_unpooling2d_forward_out.*set deterministic: false") as caught:
        gpucore.train(config, model=Unpooling())
    assert "fits the data" not in str(caught.value)
    torch.use_deterministic_algorithms(False)  # what the run set stays set in the process, as torch's own flag does
    gpucore.train(dict(config, deterministic=False, name="free"), model=Unpooling())  # the way out trains


def test_compile_without_a_working_backend_names_the_config_key(tmp_path):
    """torch.compile's backend failing (here inductor without its C++ compiler) is not a model that does not fit the
    data: the error names config key compile and the way out."""
    import torch._inductor.config as inductor_config
    from torch._inductor import cpu_vec_isa

    def forget_the_cpu_probes():  # what inductor found of the CPU with its compiler, kept for the process
        cpu_vec_isa.valid_vec_isa_list.cache_clear()
        cpu_vec_isa.VecISA._VecISA__bool__impl.cache_clear()

    config = dict(SMALL, run_dir=str(tmp_path), epochs=1, device="cpu", precision="32", compile=True,
                  data_kwargs={"train_size": 128, "val_size": 64, "seed": 3})
    torch._dynamo.reset()
    forget_the_cpu_probes()  # so that the vector width gpucore asks for is probed without a compiler too
    try:
        with inductor_config.patch({"cpp.cxx": (None, "no-such-compiler-gpucore")}):
            with pytest.raises(gpucore.TrainingError, match=r"(?s)config key 'compile'.*compile: false") as caught:
                gpucore.train(config)
    finally:
        torch._dynamo.reset()
        forget_the_cpu_probes()
    assert "no-such-compiler-gpucore" in str(caught.value) and "fits the data" not in str(caught.value)


def test_progress_bar_counts_steps_and_shows_the_logged_loss(tmp_path, capsys):
    from conftest import require

    require("tqdm")  # the bar is tqdm's (installed with the test extras)
    losses = []

    class Recorder:
        def on_log(self, trainer, step, metrics):
            losses.append(metrics["loss"])

    x, y = tensors(128)
    result = gpucore.train(plain(tmp_path, batch_size=16, progress=True, log_every_n_steps=2), model=mlp(),
                           train_data=(x, y), callbacks=[Recorder()])
    err = capsys.readouterr().err
    assert len(losses) == 4  # 8 steps, logged every 2
    assert "epoch 1/1" in err and "8/8" in err, err[-2000:]  # the bar reached every step
    assert f"loss={losses[-1]:.4f}" in err, err[-2000:]  # and showed the last logged loss
    assert f"train_loss={result.history[0]['train_loss']:.4f}" in err  # the line after the epoch
