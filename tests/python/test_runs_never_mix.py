"""Runs that never mix, leak or surprise: two runs of one name started together train in two run directories; no
way out of an epoch leaves reader threads behind; Ctrl-C in a script that loops over runs stops the script; every
resume refuses keys that change what the run trains; a torchvision built for another torch is named with the command
that installs the right one."""
import csv
import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import pytest
import torch

import gpucore
from gpucore.models import registry, torchvision_build
import forked_python
from conftest import settled
from test_streaming import image_folder

ENV = dict(os.environ, OMP_NUM_THREADS="1")
SMALL = {"data": "synthetic_fashion", "data_kwargs": {"train_size": 256, "val_size": 64}, "epochs": 2,
         "batch_size": 32, "progress": False, "report": False, "loggers": ["csv"], "device": "cpu"}


def cli_sets(values):
    """--set KEY=VALUE for each key: strings as they are, the rest as JSON (which --set reads as YAML)."""
    return [arg for key, value in values.items()
            for arg in ("--set", f"{key}={value if isinstance(value, str) else json.dumps(value)}")]


def gpucore_cli(cwd, values):
    return forked_python.Popen([sys.executable, "-m", "gpucore", "train", *cli_sets(values)], cwd=cwd,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)


def epoch_rows(run_dir):
    with open(os.path.join(run_dir, "metrics.csv"), newline="") as handle:
        return [row for row in csv.DictReader(handle) if row.get("val_loss")]


@pytest.mark.slow
def test_two_runs_of_one_name_started_together_train_in_two_run_directories_and_resume_finds_its_own(tmp_path):
    runs = [gpucore_cli(tmp_path, dict(SMALL, name="same", seed=seed)) for seed in (1, 2)]
    outputs = [run.communicate(timeout=300) for run in runs]
    for run, (_, err) in zip(runs, outputs):
        assert run.returncode == 0, err[-2000:]
    assert sorted(os.listdir(tmp_path / "runs")) == ["same", "same-2"]
    said = [err for _, err in outputs if f"this run is {tmp_path / 'runs' / 'same-2'}" in err]
    assert len(said) == 1, [err[-1000:] for _, err in outputs]
    assert "same is in use (process " in said[0] or "same holds an earlier run's checkpoints" in said[0]
    seeds = {}
    for name in ("same", "same-2"):
        run_dir = tmp_path / "runs" / name
        config = json.loads((run_dir / "config.json").read_text())
        for checkpoint in ("last.pt", "best.pt"):
            saved = torch.load(run_dir / "checkpoints" / checkpoint, map_location="cpu", weights_only=True)
            assert saved["config"]["seed"] == config["seed"], (name, checkpoint)
        stats = json.loads((run_dir / "training_stats.json").read_text())
        assert stats["run_dir"] == str(run_dir) and stats["config"]["seed"] == config["seed"]
        rows = epoch_rows(run_dir)  # one run's epochs, each once, with that run's metrics.jsonl values
        assert [int(row["epoch"]) for row in rows] == [1, 2], rows
        history = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert [float(row["val_loss"]) for row in rows] == pytest.approx([row["val_loss"] for row in history])
        seeds[name] = config["seed"]
    assert sorted(seeds.values()) == [1, 2]

    resumed = gpucore_cli(tmp_path, dict(SMALL, name="same", seed=seeds["same"], resume="auto"))
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err[-2000:]
    assert json.loads(out)["run_dir"] == str(tmp_path / "runs" / "same")
    assert f"resuming from {tmp_path / 'runs' / 'same' / 'checkpoints'}" in err


def test_a_run_directory_taken_a_moment_ago_names_its_process_not_the_killed_run_before_it(tmp_path, capfd):
    # The lock file still names a killed run's process; a new run takes the lock and writes its own id only a
    # moment later (as claim does, between flock and write): the message names the new run's process.
    from gpucore.training.run_dir import RUN_LOCK, free_run_dir
    run_dir = tmp_path / "runs" / "same"
    run_dir.mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (run_dir / RUN_LOCK).write_text(f"{dead.pid}\n")
    taker = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, os, sys, time
        handle = open({str(run_dir / RUN_LOCK)!r}, "a+")
        fcntl.flock(handle, fcntl.LOCK_EX)
        print("locked", flush=True)
        time.sleep(0.3)
        handle.truncate(0); handle.write(f"{{os.getpid()}}\\n"); handle.flush()
        sys.stdin.read()""")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert taker.stdout.readline() == "locked\n"
        path, lock = free_run_dir(str(tmp_path / "runs"), "same")
        lock.close()
    finally:
        taker.communicate("")
    assert path == str(tmp_path / "runs" / "same-2")
    assert f"same is in use (process {taker.pid} is training there): this run is {path}" in capfd.readouterr().err


def test_a_resume_of_a_run_in_progress_is_refused_and_a_new_run_takes_the_next_name(tmp_path):
    config = dict(SMALL, run_dir=str(tmp_path), name="busy")

    class Meanwhile(gpucore.Callback):
        """While the run trains its second epoch (the first one's checkpoints written): another start of the same
        name, and a resume of it."""

        def on_epoch_end(self, trainer, epoch, record):
            if epoch == 1:
                return
            self.other = gpucore.train(dict(config, seed=9, epochs=1))
            with pytest.raises(gpucore.ConfigError, match=r"resume: auto: run directory '.*busy' is in use: process "
                                                          rf"{os.getpid()} is training there"):
                gpucore.train(dict(config, resume="auto"))

    meanwhile = Meanwhile()
    first = gpucore.train(config, callbacks=[meanwhile])
    assert first.run_dir == str(tmp_path / "busy") and meanwhile.other.run_dir == str(tmp_path / "busy-2")
    assert gpucore.train(dict(config, resume="auto")).run_dir == first.run_dir  # released when the run ended


def os_threads():
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("Threads:"))


def os_threads_quiet(seconds: float = 0.3, limit: float = 3.0) -> int:
    """The process's thread count once it has not changed for `seconds` (at most `limit` seconds of waiting): right after
    a run, threads it joined may still be counted until the kernel reaps them."""
    deadline, count = time.monotonic() + limit, os_threads()
    since = time.monotonic()
    while time.monotonic() - since < seconds and time.monotonic() < deadline:
        time.sleep(0.01)
        now = os_threads()
        if now != count:
            count, since = now, time.monotonic()
    return count


class Failing(torch.nn.Module):
    """A small classifier of 3 x 8 x 8 images whose `at`-th training forward raises."""

    def __init__(self, at=None):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                        torch.nn.Linear(4, 3))
        self.at, self.calls = at, 0

    def forward(self, x):
        if self.training:
            self.calls += 1
            if self.calls == self.at:
                raise RuntimeError("the model failed")
        return self.body(x)


class FailingCallback(gpucore.Callback):
    def on_train_step_end(self, trainer, step):
        if step == 3:
            raise RuntimeError("the callback failed")


def failing_loss():
    calls = []

    def loss(output, target):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("the loss failed")
        return torch.nn.functional.cross_entropy(output, target)
    return loss


@pytest.mark.parametrize("cache", ["none", "host"])
@pytest.mark.parametrize("failure", ["callback", "loss", "model", "data"])
def test_no_way_out_of_an_epoch_leaves_reader_threads_behind(tmp_path, cache, failure):
    if failure == "data" and cache == "host":
        pytest.skip("a cached folder reads its files before the first epoch")
    # Images of mixed sizes cached at their own sizes are served by reader threads too (the per-image transforms).
    sizes = [(10, 12)] if cache == "none" else [(10, 12), (13, 9)]
    root = image_folder(tmp_path / "photos", per_class=8, sizes=sizes)
    if failure == "data":
        (root / "class_1" / "zz_broken.png").write_bytes(b"not a png")
    config = {"data": str(root), "cache": cache, "batch_size": 4, "epochs": 2, "device": "cpu", "progress": False,
              "report": False, "loggers": [], "run_dir": str(tmp_path / "runs"), "seed": 1,
              "data_kwargs": {"threads": 3}, "transforms": [{"RandomResizedCrop": {"size": 8}}]}
    if failure == "data":
        config["shuffle"] = False  # the broken file in the middle of the first epoch

    def failing_run():
        kwargs = {"model": Failing(3 if failure == "model" else None)}
        if failure == "callback":
            kwargs["callbacks"] = [FailingCallback()]
        elif failure == "loss":
            kwargs["loss"] = failing_loss()
        with pytest.raises((RuntimeError, gpucore.ConfigError), match="failed|broken") as caught:
            gpucore.train(config, **kwargs)
        return caught  # held, as a notebook holds the last error: its traceback must not keep the readers either

    failing_run()  # torch's own pools start once
    before = os_threads_quiet()
    for _ in range(3):
        held = failing_run()
        after = settled(os_threads, before)
        assert after <= before, f"{after - before} threads more after a run the {failure} ended"
        before = after  # fewer: a thread of an earlier test ended meanwhile, not the run's
    assert held.value is not None


def test_ctrl_c_in_a_script_looping_over_runs_stops_the_script_with_the_run_saved(tmp_path):
    script = tmp_path / "sweep.py"
    script.write_text(textwrap.dedent(f"""
        import os, signal, torch, gpucore

        class CtrlCAt(torch.nn.Module):
            def __init__(self, at):
                super().__init__()
                self.body = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10))
                self.at, self.calls = at, 0

            def forward(self, x):
                self.calls += self.training
                if self.calls == self.at:
                    os.kill(os.getpid(), signal.SIGINT)
                return self.body(x)

        for lr in (0.1, 0.01, 0.001):
            config = dict({SMALL!r}, run_dir={str(tmp_path)!r}, name=f"lr{{lr}}", lr=lr)
            gpucore.train(config, model=CtrlCAt(at=3 if lr == 0.01 else None))
            print("done", lr, flush=True)
    """))
    sweep = forked_python.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, env=ENV,
                              timeout=300)
    assert sweep.returncode == -signal.SIGINT, sweep.stderr[-2000:]  # as Python ends on Ctrl-C: a shell loop stops
    assert sweep.stdout.split("\n")[:-1] == ["done 0.1"]  # the third run never started
    stopped = f"KeyboardInterrupt: SIGINT stopped the run in '{tmp_path / 'lr0.01'}' after 3 optimizer steps"
    assert stopped in sweep.stderr, sweep.stderr[-2000:]
    assert sorted(os.listdir(tmp_path)) == ["lr0.01", "lr0.1", "sweep.py"]
    assert (tmp_path / "lr0.01" / "checkpoints" / "interrupted.pt").is_file()

    class CtrlC(gpucore.Callback):
        def on_train_step_end(self, trainer, step):
            if step == 2:
                raise KeyboardInterrupt

    config = dict(SMALL, run_dir=str(tmp_path), name="caught", checkpoint_every_n_steps=1)
    with pytest.raises(KeyboardInterrupt) as caught:  # the result is reachable from the exception
        gpucore.train(config, callbacks=[CtrlC()])
    result = caught.value.result
    assert result.status == "interrupted" and result.stopped_by == "SIGINT" and result.steps == 2
    assert os.path.isfile(os.path.join(result.checkpoint_dir, "interrupted.pt"))
    assert gpucore.train(dict(config, resume="auto")).steps == 2 * 256 // 32


@pytest.mark.parametrize("key,value", [("lr", 0.5), ("weight_decay", 0.1)])
def test_every_resume_refuses_keys_that_change_what_the_run_trains(tmp_path, key, value):
    config = dict(SMALL, run_dir=str(tmp_path), name="run", epochs=1, schedule="constant")
    first = gpucore.train(config)
    written = (tmp_path / "run" / "config.json").read_bytes()
    last = os.path.join(first.checkpoint_dir, "last.pt")
    for resume in ("auto", last):
        with pytest.raises(gpucore.ConfigError, match=rf"config key '{key}': resume: {resume} goes on with the run's "
                                                      rf"own {key} \(.* in checkpoint '.*last.pt'\), not {value}; a "
                                                      r"resume may set only epochs, .*pretrained: .*last.pt"):
            gpucore.train(dict(config, resume=resume, epochs=2, **{key: value}))
        assert (tmp_path / "run" / "config.json").read_bytes() == written
    resumed = gpucore.train(dict(config, resume="auto", epochs=2, report=True))  # keys a resume may set
    assert resumed.run_dir == first.run_dir and [row["epoch"] for row in resumed.history] == [1, 2]


def test_a_torchvision_built_for_another_torch_is_named_with_the_command_that_installs_the_right_one(monkeypatch):
    def fails(name):
        raise RuntimeError("operator torchvision::nms does not exist")

    monkeypatch.setattr(registry.importlib, "import_module", fails)
    monkeypatch.setattr(torchvision_build, "installed_version", lambda: "0.28.0+cu130")
    for torch_version, build, command in [
            ("2.13.0+cpu", "CPU-only",
             "pip install torchvision==0.28.0 --index-url https://download.pytorch.org/whl/cpu"),
            ("2.14.1+cu126", "CUDA 12.6",
             "pip install torchvision==0.29.1 --index-url https://download.pytorch.org/whl/cu126"),
            ("2.14.1", "PyPI's default build", "pip install torchvision==0.29.1")]:
        monkeypatch.setattr(torchvision_build.torch, "__version__", torch_version)
        with pytest.raises(gpucore.ConfigError) as caught:
            registry.build_model("torchvision:resnet18", {"num_classes": 3})
        assert str(caught.value) == (
            f"config key 'model': 'torchvision:resnet18': torchvision 0.28.0+cu130 was built for torch 2.13.0, CUDA "
            f"13.0, and this torch is {torch_version}, {build}: torchvision's compiled ops cannot load (operator "
            "torchvision::nms does not exist), and pip install torchvision keeps the installed one. Install the "
            f"torchvision made for this torch:  {command}")


def test_the_torchvision_message_on_the_users_path(tmp_path):
    """In a fresh interpreter, without the tests' stand-in for torchvision's ops (conftest.py): the message a user gets
    where this torchvision cannot load, else the model."""
    if importlib.util.find_spec("torchvision") is None:
        pytest.skip("torchvision is not installed")
    probe = subprocess.run([sys.executable, "-c", "import torchvision"], capture_output=True, text=True, env=ENV)
    user = gpucore_cli(tmp_path, dict(SMALL, model="torchvision:resnet18", epochs=1, batch_size=64))
    _, err = user.communicate(timeout=300)
    if probe.returncode == 0:
        assert user.returncode == 0, err[-2000:]
        return
    assert "torchvision::nms does not exist" in probe.stderr, probe.stderr[-2000:]
    command = torchvision_build.install_command(torch.__version__)
    assert user.returncode == 2 and "Traceback" not in err, err[-2000:]
    assert f"this torch is {torch.__version__}" in err
    assert f"Install the torchvision made for this torch:  {command}" in err, err[-2000:]


def test_a_torchvision_model_named_without_its_library_is_pointed_to_it():
    if importlib.util.find_spec("torchvision") is None:
        pytest.skip("torchvision is not installed")
    with pytest.raises(gpucore.ConfigError, match=r"'resnet18' is not a built-in model .* Did you mean "
                                                  r"'torchvision:resnet18'\?"):
        registry.build_model("resnet18", {})
    with pytest.raises(gpucore.ConfigError, match=r"'fast_cn' is not a built-in model .* Did you mean 'fast_cnn'\?"):
        registry.build_model("fast_cn", {})


def test_a_choice_in_another_case_is_that_choice_and_a_whole_number_on_the_shell_an_integer():
    config = gpucore.load_config({"optimizer": "Adam", "schedule": "Cosine"}, {"batch_size": "16.0"})
    assert (config.optimizer, config.schedule, config.batch_size) == ("adam", "cosine", 16)
    assert gpucore.load_config(None, {"optimizer": "SGD"}).to_dict()["optimizer"] == "sgd"  # config.json's spelling
    with pytest.raises(gpucore.ConfigError, match=r"'batch_size' must be an integer, got str '16.5'"):
        gpucore.load_config(None, {"batch_size": "16.5"})
    with pytest.raises(gpucore.ConfigError, match=r"'optimizer' is 'Adamax'; valid values: sgd, adam, adamw"):
        gpucore.load_config({"optimizer": "Adamax"})


@pytest.mark.parametrize("name", ["ToTensor", "PILToTensor", "ToImage", "ToDtype"])
def test_torchvisions_conversions_in_transforms_are_told_they_are_not_needed(name):
    with pytest.raises(gpucore.ConfigError, match=rf"transforms\[1\] {name}: not needed, leave it out: gpucore's "
                                                  r"batches are tensors already, and it scales uint8 images"):
        gpucore.load_config({"transforms": ["RandomHorizontalFlip", name]})


def test_pretrained_weights_loaded_are_said_on_stderr_without_the_progress_bar(tmp_path, capfd, fashion_run):
    weights = os.path.join(fashion_run.checkpoint_dir, "last.pt")  # a finished run of the same (default) model
    capfd.readouterr()
    gpucore.train(dict(SMALL, run_dir=str(tmp_path), name="second", epochs=1, pretrained=weights))
    out, err = capfd.readouterr()
    assert f"gpucore: pretrained weights '{weights}': " in err and " tensors loaded" in err, err[-2000:]
    assert "pretrained weights" not in out


def test_the_progress_bar_is_tqdm_autos_which_is_jupyters_widget_in_a_notebook(monkeypatch):
    tqdm_auto = pytest.importorskip("tqdm.auto")
    made = []
    monkeypatch.setattr(tqdm_auto, "tqdm", lambda **kwargs: made.append(kwargs) or object())
    from gpucore.training.progress import EpochProgress

    EpochProgress(True, total_steps=8, epoch=1, epochs=2, log_every=1)
    assert made and made[0]["total"] == 8 and made[0]["desc"] == "epoch 1/2"



def test_export_shows_none_of_torchs_deprecations_of_its_own_internals(tmp_path, fashion_run):
    for name in ("onnx", "onnxscript", "onnxruntime"):
        pytest.importorskip(name)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        gpucore.export(os.path.join(fashion_run.checkpoint_dir, "best.pt"), "onnx", out=str(tmp_path / "best.onnx"))
    assert not [w for w in shown if issubclass(w.category, (DeprecationWarning, FutureWarning))], \
        [str(w.message) for w in shown]


def test_the_auto_grad_cam_layer_of_fast_cnn_is_its_features_not_the_heads_pooling():
    from gpucore import cam

    model = registry.build_model("fast_cnn", {"num_classes": 3, "in_channels": 3})
    assert cam.find_target_layer(model, torch.randn(1, 3, 64, 64)) == "features"  # 8 x 8 maps, not the pool's 3 x 3
    result = gpucore.gradcam(model.eval(), "auto", torch.randn(2, 3, 64, 64))
    assert result.layers == ["features"]
