"""gpucore.train end to end on the CPU, against plain PyTorch references."""
import json
import os
import shutil
import warnings

import pytest
import torch
from torch import nn

import gpucore
from gpucore import checkpoint as gcheckpoint
from gpucore.config import load_config
from conftest import assert_resume_matches, assert_states_equal, train_interrupted

SMALL = {"data": "synthetic_fashion", "data_kwargs": {"train_size": 1024, "val_size": 256, "seed": 3}, "progress": False,
         "batch_size": 64}


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 5))


def tensors(n=128, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n, 16, generator=generator), torch.randint(0, 5, (n,), generator=generator)


def plain(tmp_path, **overrides):
    base = dict(run_dir=str(tmp_path), progress=False, shuffle=False, normalize=False, schedule="constant",
                seed=0, epochs=1, device="cpu", precision="32")  # float32: compared with float32 torch loops
    base.update(overrides)
    return base


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


@pytest.mark.parametrize("optimizer,extra", [
    ("adamw", {"weight_decay": 0.05}),
    ("adam", {"weight_decay": 0.0}),
    ("sgd", {"momentum": 0.9, "nesterov": True, "weight_decay": 1e-3}),
    ("sgd", {"momentum": 0.0, "weight_decay": 0.0}),
])
def test_steps_match_torch_optim(tmp_path, optimizer, extra):
    x, y = tensors(256)
    model = mlp()
    reference = mlp()
    result = gpucore.train(plain(tmp_path, optimizer=optimizer, lr=0.05, batch_size=32,
                                 no_decay_norm_and_bias=False, **extra), model=model, train_data=(x, y))
    assert result.steps == 8
    torch_optimizer = {
        "adamw": lambda p: torch.optim.AdamW(p, lr=0.05, weight_decay=extra["weight_decay"]),
        "adam": lambda p: torch.optim.Adam(p, lr=0.05),
        "sgd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=extra["momentum"], weight_decay=extra["weight_decay"],
                                         nesterov=extra.get("nesterov", False)),
    }[optimizer](reference.parameters())
    for start in range(0, 256, 32):
        torch_optimizer.zero_grad()
        nn.functional.cross_entropy(reference(x[start:start + 32]), y[start:start + 32]).backward()
        torch_optimizer.step()
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_accumulating_4_by_32_equals_one_batch_of_128(tmp_path):
    x, y = tensors(128)
    accumulated, whole = mlp(), mlp()
    gpucore.train(plain(tmp_path, batch_size=32, accumulate_grad_batches=4, name="acc"), model=accumulated,
                  train_data=(x, y))
    gpucore.train(plain(tmp_path, batch_size=128, name="whole"), model=whole, train_data=(x, y))
    for a, b in zip(accumulated.parameters(), whole.parameters()):
        assert (a - b).abs().max().item() <= 1e-6


def test_short_last_window_is_divided_by_its_real_length(tmp_path):
    # 5 micro-batches with accumulation 4: windows of 4 and 1; the second must be a full-size step.
    x, y = tensors(160)
    model, reference = mlp(), mlp()
    gpucore.train(plain(tmp_path, batch_size=32, accumulate_grad_batches=4, optimizer="sgd", momentum=0.0,
                        weight_decay=0.0, lr=0.1), model=model, train_data=(x, y))
    sgd = torch.optim.SGD(reference.parameters(), lr=0.1)
    for start, stop in ((0, 128), (128, 160)):
        sgd.zero_grad()
        nn.functional.cross_entropy(reference(x[start:stop]), y[start:stop]).backward()
        sgd.step()
    for a, b in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_lr_scaling_and_no_decay_groups(tmp_path):
    x, y = tensors(64)
    result = gpucore.train(plain(tmp_path, batch_size=64, lr=0.1, lr_scaling="linear", base_batch_size=256),
                           model=mlp(), train_data=(x, y))
    assert result.history[0]["lr"] == pytest.approx(0.025)
    result = gpucore.train(plain(tmp_path, batch_size=64, lr=0.1, lr_scaling="sqrt", base_batch_size=256, name="s"),
                           model=mlp(), train_data=(x, y))
    assert result.history[0]["lr"] == pytest.approx(0.05)


@pytest.mark.slow
def test_run_directory_files(tmp_path):
    result = gpucore.train(dict(SMALL, run_dir=str(tmp_path), epochs=2, save_every_n_epochs=1, keep_last_k=1))
    names = sorted(os.listdir(result.checkpoint_dir))
    assert names == ["best.pt", "epoch_0002.pt", "last.pt"]
    stats = json.loads(open(result.stats_path).read())
    assert stats["status"] == "completed"
    assert [e["epoch"] for e in stats["epochs"]] == [1, 2]
    for key in ("train_loss", "val_loss", "val_accuracy", "lr", "epoch_time_s", "samples_per_s", "skipped_steps",
                "loss_scale", "gpu_memory_peak_bytes"):
        assert key in stats["epochs"][0]
    rows = [json.loads(line) for line in open(result.metrics_path)]
    assert rows == stats["epochs"]
    # where the wall time went: the epochs' steps and validations add up to the parts of seconds
    seconds = stats["seconds"]
    assert seconds["training"] == pytest.approx(sum(e["epoch_time_s"] for e in rows))
    assert seconds["validation"] == pytest.approx(sum(e["val_time_s"] for e in rows))
    assert all(0 < e["val_time_s"] < e["epoch_time_s"] * 10 for e in rows)
    assert 0 < seconds["setup"] < 60 and "report" not in seconds  # this test's runs draw no report (conftest)
    assert json.load(open(os.path.join(result.run_dir, "config.json")))["epochs"] == 2
    checkpoint = torch.load(os.path.join(result.checkpoint_dir, "last.pt"), weights_only=True)
    assert checkpoint["epoch"] == 2 and checkpoint["format"] == "gpucore-checkpoint"
    assert set(checkpoint["model"]) == set(result.model.state_dict())


@pytest.mark.slow
def test_a_second_run_never_overwrites_the_first(tmp_path):
    first = gpucore.train(dict(SMALL, run_dir=str(tmp_path), epochs=1))
    second = gpucore.train(dict(SMALL, run_dir=str(tmp_path), epochs=1))
    assert first.run_dir != second.run_dir
    assert os.path.exists(os.path.join(first.checkpoint_dir, "last.pt"))


@pytest.mark.slow
def test_resume_is_bitwise_exact(tmp_path):
    class StopAfterEpoch2:
        def on_epoch_end(self, trainer, epoch, record):
            if epoch == 2:
                raise KeyboardInterrupt

    config = dict(SMALL, epochs=4, seed=7)
    straight, stopped, resumed = assert_resume_matches(tmp_path, config, StopAfterEpoch2())
    assert len(stopped.history) == 2
    assert [r["epoch"] for r in resumed.history] == [1, 2, 3, 4]
    assert resumed.history[-1]["train_loss"] == straight.history[-1]["train_loss"]


@pytest.mark.slow
def test_interrupt_saves_and_resume_finishes(tmp_path):
    class StopInEpoch2:
        def on_log(self, trainer, step, metrics):
            if metrics["epoch"] == 2:
                raise KeyboardInterrupt

    config = dict(SMALL, run_dir=str(tmp_path), epochs=3, log_every_n_steps=5)
    result = train_interrupted(config, callbacks=[StopInEpoch2()])
    assert result.status == "interrupted"
    assert len(result.history) == 1
    saved = torch.load(os.path.join(result.checkpoint_dir, "interrupted.pt"), weights_only=True)
    assert saved["epoch"] == 1 and saved["samples_consumed"] == 5 * 64  # 5 steps of 64 samples
    assert json.load(open(result.stats_path))["status"] == "interrupted"
    resumed = gpucore.train(dict(config, resume="auto"))
    assert resumed.status == "completed" and len(resumed.history) == 3
    assert not os.path.exists(os.path.join(resumed.checkpoint_dir, "interrupted.pt"))


def test_checkpoint_killed_mid_write_leaves_the_previous_one(tmp_path, monkeypatch):
    result = gpucore.train(dict(SMALL, run_dir=str(tmp_path), epochs=1))
    last = os.path.join(result.checkpoint_dir, "last.pt")
    before = open(last, "rb").read()

    def dying_save(payload, handle):
        handle.write(b"half a checkpoint")
        raise OSError("No space left on device")

    monkeypatch.setattr(gcheckpoint.torch, "save", dying_save)
    with pytest.raises(OSError, match="No space left"):
        gcheckpoint.save_checkpoint(last, {"model": {}})
    assert open(last, "rb").read() == before
    assert torch.load(last, weights_only=True)["epoch"] == 1
    assert [n for n in os.listdir(result.checkpoint_dir) if ".tmp-" in n] == []


def test_nonfinite_losses_stop_with_an_error_and_keep_the_last_good_checkpoint(tmp_path):
    calls = {"n": 0}
    x, y = tensors(256)

    def loss(output, target):
        calls["n"] += 1
        value = nn.functional.cross_entropy(output, target)
        return value * float("nan") if calls["n"] > 8 else value  # epoch 1 (8 steps) is fine

    with pytest.raises(gpucore.TrainingError, match="non-finite"):
        gpucore.train(plain(tmp_path, epochs=3, batch_size=32, max_nonfinite_steps=3, log_every_n_steps=1,
                            name="nan"), model=mlp(), train_data=(x, y), loss=loss)
    run = tmp_path / "nan"
    assert torch.load(run / "checkpoints" / "last.pt", weights_only=True)["epoch"] == 1
    stats = json.load(open(run / "training_stats.json"))
    assert stats["status"] == "failed" and "non-finite" in stats["error"]


@pytest.mark.slow
def test_early_stopping(tmp_path):
    result = gpucore.train(dict(SMALL, run_dir=str(tmp_path), epochs=5, patience=1, min_delta=1.0))
    assert result.status == "early_stopped"
    assert len(result.history) == 2
    assert result.best_epoch == 1


@pytest.mark.slow
def test_early_stopping_counts_on_across_a_resume(tmp_path):
    # min_delta 1.0: only epoch 1 is a best. Two epochs, then a resume: patience 2 is used up after epoch 3.
    config = dict(SMALL, run_dir=str(tmp_path), patience=2, min_delta=1.0, schedule="constant")  # epochs may grow
    first = gpucore.train(dict(config, epochs=2))
    assert first.status == "completed"
    resumed = gpucore.train(dict(config, epochs=6, resume="auto"))
    assert resumed.status == "early_stopped"
    assert [row["epoch"] for row in resumed.history] == [1, 2, 3] and resumed.best_epoch == 1


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


class Picky(nn.Module):
    """An MLP that runs out of memory on batches over 16, as a GPU would; records the first input column of each
    training batch it takes into `trained` (the samples' ids where the test puts them there)."""

    def __init__(self, trained=None):
        super().__init__()
        self.net, self.trained = mlp(), trained

    def forward(self, x):
        if x.shape[0] > 16:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        if self.training and self.trained is not None:
            self.trained.extend(x[:, 0].round().long().tolist())
        return self.net(x)


def test_reduce_batch_on_out_of_memory(tmp_path):
    x, y = tensors(128)
    with pytest.warns(RuntimeWarning, match="batch_size 16"):
        result = gpucore.train(plain(tmp_path, batch_size=64, on_oom="reduce_batch"), model=Picky(), train_data=(x, y))
    assert result.status == "completed" and result.steps == 2
    with pytest.raises(gpucore.TrainingError, match="out of memory with batch_size 64.*on_oom: reduce_batch"):
        gpucore.train(plain(tmp_path, batch_size=64, name="raise"), model=Picky(), train_data=(x, y))


def test_out_of_memory_halving_then_a_mid_epoch_resume_serves_every_sample_once(tmp_path):
    """Halved twice (64 -> 16, accumulation 4), stopped after the first of two optimizer steps, resumed: the resumed
    run goes on in the checkpoint's batches, so each of the epoch's 128 samples is trained on exactly once."""
    trained = []  # the ids of the samples each successful training forward saw

    class StopAfterFirstStep:
        def on_log(self, trainer, step, metrics):
            raise KeyboardInterrupt

    x, y = tensors(128)
    x[:, 0] = torch.arange(128, dtype=torch.float32)  # each sample's id
    config = plain(tmp_path, batch_size=64, on_oom="reduce_batch", shuffle=True, log_every_n_steps=1)
    with pytest.warns(RuntimeWarning, match="batch_size 16 and accumulate_grad_batches 4"):
        stopped = train_interrupted(config, model=Picky(trained), train_data=(x, y), callbacks=[StopAfterFirstStep()])
    assert stopped.status == "interrupted" and sorted(trained) != list(range(128)) and len(trained) == 64
    saved = torch.load(os.path.join(stopped.checkpoint_dir, "interrupted.pt"), weights_only=True)
    assert saved["samples_consumed"] == 64 and saved["batching"] == {"batch_size": 16, "accumulate_grad_batches": 4}
    resumed = gpucore.train(dict(config, resume="auto"), model=Picky(trained), train_data=(x, y))
    assert resumed.status == "completed" and resumed.steps == 2
    assert sorted(trained) == list(range(128))


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
    config = dict(SMALL, run_dir=str(tmp_path), epochs=1, channels_last=True, deterministic=True,
                  data_kwargs=dict(SMALL["data_kwargs"], train_size=256))
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
    result = gpucore.train(dict(SMALL, run_dir=str(tmp_path), epochs=1, precision="bf16-mixed"), model=model)
    assert result.precision == "bf16-mixed"
    # autocast ran: every convolution and linear layer computed in bfloat16 (in training and in validation) ...
    assert dtypes and all(seen == {torch.bfloat16} for seen in dtypes.values()), dtypes
    # ... on float32 master weights
    assert all(p.dtype == torch.float32 for p in result.model.parameters())
    assert result.history[0]["val_accuracy"] > 0.5


def test_ctc_sequence_model_learns(tmp_path):
    (x, y), (xv, yv) = gpucore.data.builtin.synthetic_sequences(train_size=448, val_size=64, steps=16, classes=5,
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


@pytest.mark.slow
def test_a_run_killed_before_its_first_checkpoint_is_resumed_in_the_same_directory(tmp_path):
    # What a kill before the first checkpoint leaves: the run directory with an empty checkpoints folder,
    # and a half-written checkpoint of the dead process.
    run_dir = tmp_path / "fashion_mnist_cnn"
    (run_dir / "checkpoints").mkdir(parents=True)
    dead_pid = 2**22 + 12345  # above Linux's pid_max default: no such process
    stale = run_dir / "checkpoints" / f"last.pt.tmp-{dead_pid}"
    stale.write_bytes(b"half a checkpoint")
    flat = dict(SMALL, run_dir=str(tmp_path), schedule="constant")  # a resume may add epochs
    result = gpucore.train(dict(flat, epochs=1, resume="auto"))
    assert result.run_dir == str(run_dir)
    assert not stale.exists()
    again = gpucore.train(dict(flat, epochs=2, resume="auto"))
    assert again.run_dir == str(run_dir) and [r["epoch"] for r in again.history] == [1, 2]


@pytest.mark.slow
def test_metrics_jsonl_agrees_with_the_checkpoint_after_a_resume(tmp_path):
    # schedule constant: a resume may then add epochs (a cosine schedule's length is fixed when the run starts)
    config = dict(SMALL, run_dir=str(tmp_path), epochs=2, schedule="constant")
    first = gpucore.train(dict(config, epochs=1))
    # A kill between writing epoch 2's row and its checkpoint: the row is on disk, the checkpoint is epoch 1's.
    with open(first.metrics_path, "a") as handle:
        handle.write(json.dumps({"epoch": 2, "train_loss": 0.5}) + "\n")
    resumed = gpucore.train(dict(config, resume="auto"))
    rows = [json.loads(line) for line in open(resumed.metrics_path)]
    assert [row["epoch"] for row in rows] == [1, 2]
    assert rows == json.loads(json.dumps(resumed.history))


def test_ctrl_c_during_a_checkpoint_write_waits_for_the_write_then_interrupts(tmp_path, monkeypatch):
    import signal

    from gpucore import checkpoint as gcheckpoint_module

    real_save = torch.save
    calls = []

    def save_interrupted_midway(payload, handle):
        calls.append(1)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)  # lands while the file is being written
        real_save(payload, handle)

    monkeypatch.setattr(gcheckpoint_module.torch, "save", save_interrupted_midway)
    result = train_interrupted(dict(SMALL, run_dir=str(tmp_path), epochs=2))
    assert result.status == "interrupted" and len(result.history) == 1
    for name in ("last.pt", "interrupted.pt"):
        saved = torch.load(os.path.join(result.checkpoint_dir, name), weights_only=True)
        assert saved["epoch"] == 1
    assert [f for f in os.listdir(result.checkpoint_dir) if ".tmp-" in f] == []


@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++")),
                    reason="torch.compile's inductor compiles C++ on the CPU: no compiler here (an installed wheel's check)")
def test_compile_on_the_cpu_trains_like_eager(tmp_path):
    # torch.compile (inductor, with the machine's C++ compiler) under the C++ engine: the same losses as eager
    # (no dropout: compiled code draws its random numbers differently).
    config = dict(SMALL, run_dir=str(tmp_path), epochs=2, device="cpu", precision="32", model_kwargs={"dropout": 0.0})
    eager = gpucore.train(dict(config, name="eager"))
    compiled = gpucore.train(dict(config, name="compiled", compile=True))
    for ours, theirs in zip(compiled.history, eager.history):
        assert ours["train_loss"] == pytest.approx(theirs["train_loss"], rel=1e-3)  # fused kernels round differently
        assert ours["val_loss"] == pytest.approx(theirs["val_loss"], rel=1e-3)


def test_compile_without_a_working_backend_names_the_config_key(tmp_path):
    """torch.compile's backend failing (here inductor without its C++ compiler) is not a model that does not fit the
    data: the error names config key compile and the way out."""
    import torch._inductor.config as inductor_config

    config = dict(SMALL, run_dir=str(tmp_path), epochs=1, device="cpu", precision="32", compile=True,
                  data_kwargs={"train_size": 128, "val_size": 64, "seed": 3})
    torch._dynamo.reset()
    try:
        with inductor_config.patch({"cpp.cxx": (None, "no-such-compiler-gpucore")}):
            with pytest.raises(gpucore.TrainingError, match=r"(?s)config key 'compile'.*compile: false") as caught:
                gpucore.train(config)
    finally:
        torch._dynamo.reset()
    assert "no-such-compiler-gpucore" in str(caught.value) and "fits the data" not in str(caught.value)


# ---- config keys against plain PyTorch ----------------------------------------------------------------------

def test_label_smoothing_clip_grad_value_and_eps_match_torch(tmp_path):
    # Each of the three changes the weights here: smoothing 0.2 the loss, a clip at 0.01 most gradients (checked
    # below), eps 0.1 every Adam step (gradients are about its size).
    x, y = tensors(128, seed=7)
    model, reference = mlp(), mlp()
    gpucore.train(plain(tmp_path, optimizer="adamw", lr=0.05, batch_size=32, weight_decay=0.0, label_smoothing=0.2,
                        clip_grad_value=0.01, eps=0.1), model=model, train_data=(x, y))
    adamw = torch.optim.AdamW(reference.parameters(), lr=0.05, eps=0.1, weight_decay=0.0)
    clipped = 0
    for start in range(0, 128, 32):
        adamw.zero_grad()
        nn.functional.cross_entropy(reference(x[start:start + 32]), y[start:start + 32],
                                    label_smoothing=0.2).backward()
        clipped += sum(int((p.grad.abs() > 0.01).sum()) for p in reference.parameters())
        torch.nn.utils.clip_grad_value_(reference.parameters(), 0.01)
        adamw.step()
    assert clipped > 100  # the clip was active
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_drop_last_and_eval_batch_size(tmp_path):
    x, y = tensors(100, seed=8)
    sizes = []

    class Recording(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = mlp()

        def forward(self, inputs):
            sizes.append((self.training, inputs.shape[0]))
            return self.net(inputs)

    model, reference = Recording(), mlp()
    result = gpucore.train(plain(tmp_path, optimizer="sgd", momentum=0.0, weight_decay=0.0, lr=0.1, batch_size=32,
                                 drop_last=True, eval_batch_size=48), model=model, train_data=(x, y),
                           val_data=(x, y))
    assert result.steps == 3  # 100 samples: three full batches of 32, the last 4 dropped
    assert [n for training, n in sizes if training] == [32, 32, 32]
    assert [n for training, n in sizes if not training] == [48, 48, 4]  # validation keeps every sample
    sgd = torch.optim.SGD(reference.parameters(), lr=0.1)
    for start in (0, 32, 64):
        sgd.zero_grad()
        nn.functional.cross_entropy(reference(x[start:start + 32]), y[start:start + 32]).backward()
        sgd.step()
    for ours, theirs in zip(model.net.parameters(), reference.parameters()):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def step_lrs(tmp_path, **config):
    """The learning rate logged after each of 16 steps (2 epochs of 8): the rate of the step after it."""
    seen = []

    class Recorder:
        def on_log(self, trainer, step, metrics):
            seen.append(metrics["lr"])

    x, y = tensors(128)
    gpucore.train(plain(tmp_path, batch_size=16, epochs=2, lr=0.1, log_every_n_steps=1, **config), model=mlp(),
                  train_data=(x, y), callbacks=[Recorder()])
    assert len(seen) == 16
    return seen


def test_onecycle_div_factor_and_final_div_factor_match_torch(tmp_path):
    ours = step_lrs(tmp_path, schedule="onecycle", div_factor=5.0, final_div_factor=50.0, pct_start=0.25)
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=16, pct_start=0.25,
                                                    div_factor=5.0, final_div_factor=50.0)
    theirs = []
    for _ in range(15):
        optimizer.step()
        scheduler.step()
        theirs.append(optimizer.param_groups[0]["lr"])
    assert ours[:15] == pytest.approx(theirs, rel=1e-5)
    assert ours[-1] == pytest.approx(0.1 / 5.0 / 50.0, rel=1e-5)  # the end: initial / final_div_factor


def test_warmup_epochs_then_cosine(tmp_path):
    import math

    ours = step_lrs(tmp_path, schedule="cosine", warmup_epochs=0.5, min_lr=0.0)  # 4 warm-up steps of 16
    # steps 0-3 rise linearly to the peak, steps 4-15 are a cosine over the other 12 steps, from the peak
    by_hand = [0.1 * (k + 1) / 4 for k in range(4)] + [0.1 * (1 + math.cos(math.pi * j / 12)) / 2 for j in range(12)]
    assert ours == pytest.approx(by_hand[1:] + [0.0], rel=1e-5, abs=1e-7)


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
