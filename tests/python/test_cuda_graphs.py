"""Config key cuda_graphs: each optimizer step captured as one CUDA graph and replayed. On the CPU: what a run that
cannot capture does (trains eagerly, says why); on a GPU (needs_cuda): graphed training against eager training of
the same run, recapture, a model that syncs, resume, host syncs."""
import json
import os
import warnings

import pytest
import torch
from torch import nn

import gpucore
from gpucore import _C
from gpucore.config import load_config
from gpucore.models import FashionMnistCNN
from gpucore.training.engine_config import cuda_graphs_plan

# 100 full batches and a short one per epoch: the short one runs eagerly.
DATA = {"train_size": 64 * 100 + 24, "val_size": 256, "seed": 5}
# The same kernels on both sides (float32, no autotuning; deterministic cuDNN algorithms: the fixture below): what
# differs between the runs is how the steps are launched. cuBLAS may still sum in another order on the capture's
# stream, so runs are compared by relative error, not bitwise.
EXACT = {"precision": "32", "tf32": "false", "cudnn_benchmark": "false"}


@pytest.fixture(autouse=True)
def _deterministic_cudnn(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)


def run_config(tmp_path, name, **keys):
    return dict({"data": "synthetic_fashion", "data_kwargs": DATA, "progress": False, "report": False, "loggers": [],
                 "run_dir": str(tmp_path), "name": name, "batch_size": 64, "seed": 7}, **keys)


def stats_of(result) -> dict:
    with open(os.path.join(result.run_dir, "training_stats.json")) as handle:
        return json.load(handle)


# ---- everywhere -------------------------------------------------------------------------------------------

def test_on_the_cpu_true_warns_and_trains_exactly_as_eager(tmp_path):
    config = run_config(tmp_path, "x", device="cpu", epochs=1, data_kwargs=dict(DATA, train_size=200))
    eager = gpucore.train(dict(config, name="eager", cuda_graphs=False))
    with pytest.warns(UserWarning, match="cuda_graphs: true, but this run's steps run eagerly: CUDA graphs capture "
                                         "CUDA steps; this run trains on cpu"):
        graphed = gpucore.train(dict(config, name="graphed", cuda_graphs=True))
    for a, b in zip(eager.model.state_dict().values(), graphed.model.state_dict().values()):
        assert torch.equal(a, b)
    assert stats_of(graphed)["cuda_graphs"] == {
        "asked": "true", "captured": 0, "replays": 0, "eager_steps": 4,
        "reason": "CUDA graphs capture CUDA steps; this run trains on cpu"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # auto says nothing
        auto = gpucore.train(dict(config, name="auto", cuda_graphs="auto"))
    assert stats_of(auto)["cuda_graphs"]["reason"].endswith("trains on cpu")
    assert stats_of(eager)["cuda_graphs"] == {"asked": "false", "captured": 0, "replays": 0, "eager_steps": 4,
                                              "reason": None}  # every step ran eagerly, as asked


@pytest.mark.parametrize("keys, data_parallel, reason", [
    ({"compile": True}, False, "compile: true (torch.compile makes graphs of its own: its mode reduce-overhead)"),
    # DDP, also in one process under torchrun: its capture failed on an H200 (2026-11-26)
    ({}, True, "data-parallel training (DDP's forward and gradient all-reduce inside a captured step are not verified)"),
    # the engine's to say (Engine.graph_stats), as the batching can change mid-run (an out-of-memory retry)
    ({"accumulate_grad_batches": 2}, False, None),
    ({"loss": "ctc", "heads": 4}, False, "loss ctc (torch's CTC loss reads the target lengths on the host)"),
    ({}, False, None),
    ({"mixup_alpha": 0.2, "cutmix_alpha": 1.0}, False, None),  # drawn on the host, copied in before each replay
])
def test_what_rules_out_a_capture_is_named(keys, data_parallel, reason):
    for asked in ("true", "auto"):
        config = load_config(dict(keys, cuda_graphs=asked))
        assert cuda_graphs_plan(config, "cuda:0", data_parallel) == (reason is None, reason)
    assert cuda_graphs_plan(load_config(dict(keys, cuda_graphs=False)), "cuda:0", data_parallel) == (False, None)


def test_the_engine_refuses_what_it_cannot_capture():
    params = [nn.Parameter(torch.zeros(3))]
    config = _C.EngineConfig()
    config.cuda_graphs = True
    with pytest.raises(gpucore.ConfigError, match="cuda_graphs captures CUDA steps; this engine's device is cpu"):
        _C.Engine([_C.ParamGroup(params, 0.0, 1.0)], config)


# ---- on a GPU ---------------------------------------------------------------------------------------------

def assert_states_close(a: dict, b: dict, tolerance: float = 1e-3):
    """Every tensor of the two states within `tolerance` of relative error ||a - b|| / ||b||."""
    assert a.keys() == b.keys()
    for name in a:
        mine, theirs = a[name].double(), b[name].double()
        error = (mine - theirs).norm() / theirs.norm().clamp_min(1e-12)
        assert error <= tolerance, f"{name}: relative error {error.item():.3g}"


@pytest.mark.needs_cuda
@pytest.mark.parametrize("keys", [
    # 303 steps: clipping, onecycle, EMA
    {"epochs": 3, "clip_grad_norm": 0.5, "schedule": "onecycle", "lr": 3e-3, "ema_decay": 0.99},
    # mixup and CutMix by batch and by sample: the draws copied in before each replay
    {"epochs": 2, "mixup_alpha": 0.4, "cutmix_alpha": 1.0, "mixup_mode": "elem"},
    # float16 with a loss scale that grows into overflow every few steps: skipped steps inside the replays
    {"epochs": 2, "precision": "16-mixed", "init_scale": 2.0 ** 20, "growth_interval": 4, "optimizer": "sgd",
     "lr": 0.05, "schedule": "step", "step_size": 1},
])
def test_graphed_training_equals_eager_training(tmp_path, keys):
    config = run_config(tmp_path, "x", device="cuda", **dict(EXACT, **keys))
    eager = gpucore.train(dict(config, name="eager", cuda_graphs=False))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # nothing rules the capture out
        graphed = gpucore.train(dict(config, name="graphed", cuda_graphs=True))
    epochs = keys["epochs"]
    graphs = stats_of(graphed)["cuda_graphs"]
    # One capture, 3 warm-up steps and each epoch's short batch eager, every other step a replay.
    assert graphs == {"asked": "true", "captured": 1, "replays": epochs * 101 - 1 - 3 - epochs,
                      "eager_steps": 3 + epochs, "reason": None}
    assert graphed.steps + graphed.skipped_steps == epochs * 101  # taken and skipped
    assert (graphed.steps, graphed.skipped_steps) == (eager.steps, eager.skipped_steps)
    if "init_scale" in keys:
        assert graphed.skipped_steps > 10  # the overflows happened, and inside the replays too
    assert_states_close(graphed.model.state_dict(), eager.model.state_dict())
    if graphed.model_ema is not None:
        assert_states_close(graphed.model_ema.state_dict(), eager.model_ema.state_dict())
    for mine, theirs in zip(graphed.history, eager.history):
        for name in ("train_loss", "train_accuracy", "val_loss", "val_accuracy", "lr"):
            assert mine[name] == pytest.approx(theirs[name], rel=1e-3, abs=1e-4), name


@pytest.mark.needs_cuda
def test_freezing_and_unfreezing_capture_the_step_again(tmp_path):
    config = run_config(tmp_path, "x", device="cuda", epochs=3, freeze="backbone", freeze_epochs=1,
                        data_kwargs=dict(DATA, train_size=64 * 20), **EXACT)
    torch.manual_seed(0)
    eager = gpucore.train(dict(config, name="eager", cuda_graphs=False), model=FashionMnistCNN())
    torch.manual_seed(0)
    graphed = gpucore.train(dict(config, name="graphed", cuda_graphs=True), model=FashionMnistCNN())
    graphs = stats_of(graphed)["cuda_graphs"]
    assert graphs["captured"] == 2 and graphs["eager_steps"] == 6 and graphs["replays"] == 60 - 8
    assert_states_close(graphed.model.state_dict(), eager.model.state_dict())


class SyncingNet(FashionMnistCNN):
    """Reads a value on the host in every forward: a step that cannot be captured."""

    def forward(self, x):
        if float(x.abs().max()) > 1e9:
            raise AssertionError("unreachable")
        return super().forward(x)


@pytest.mark.needs_cuda
def test_a_model_that_syncs_falls_back_to_eager_steps_with_a_warning(tmp_path):
    config = run_config(tmp_path, "x", device="cuda", epochs=2, data_kwargs=dict(DATA, train_size=64 * 10), **EXACT)
    torch.manual_seed(0)
    eager = gpucore.train(dict(config, name="eager", cuda_graphs=False), model=SyncingNet())
    torch.manual_seed(0)
    with pytest.warns(UserWarning, match="cuda_graphs: true, but the steps run eagerly from here on: the step could "
                                         "not be captured: .*synchronizing CUDA operation"):
        graphed = gpucore.train(dict(config, name="graphed", cuda_graphs=True), model=SyncingNet())
    graphs = stats_of(graphed)["cuda_graphs"]
    assert graphs["captured"] == 0 and graphs["replays"] == 0 and graphs["eager_steps"] == 20
    assert_states_close(graphed.model.state_dict(), eager.model.state_dict())
    torch.nn.functional.dropout(torch.ones(8, device="cuda"), 0.5)  # the random number generator works on


@pytest.mark.needs_cuda
def test_the_engine_says_why_it_steps_eagerly_with_accumulation(tmp_path):
    """A captured step holds one micro-batch: the engine steps eagerly with accumulate_grad_batches > 1, from the
    start or after an out-of-memory retry doubled it, and says so in graph_stats (training_stats.json's reason)."""
    model = nn.Linear(4, 3).cuda()
    config = _C.EngineConfig()
    config.device, config.cuda_graphs = torch.device("cuda"), True
    engine = _C.Engine([_C.ParamGroup(list(model.parameters()))], config)
    assert engine.graph_stats()["reason"] is None
    engine.set_accumulate_grad_batches(2)  # what on_oom: reduce_batch does as it halves the batch
    accumulating = "accumulate_grad_batches > 1 (a captured step holds one micro-batch so far)"
    assert engine.graph_stats()["reason"] == accumulating
    x, y = torch.randn(64, 4, device="cuda"), torch.randint(0, 3, (64,), device="cuda")
    engine.train_epoch(_C.TensorBatches(x, y, 8, False, False, 0, torch.device("cuda")), model, None, None)
    assert engine.graph_stats() == {"captured": 0, "replays": 0, "eager_steps": 4, "reason": accumulating}
    with pytest.warns(UserWarning, match="cuda_graphs: true, but this run's steps run eagerly: accumulate_grad_batches > 1"):
        result = gpucore.train(run_config(tmp_path, "accumulating", device="cuda", epochs=1, cuda_graphs=True,
                                          accumulate_grad_batches=2, data_kwargs=dict(DATA, train_size=64 * 4)))
    assert stats_of(result)["cuda_graphs"]["reason"] == accumulating


@pytest.mark.needs_cuda
def test_a_resumed_graphed_run_ends_as_the_uninterrupted_one(tmp_path):
    config = run_config(tmp_path, "x", device="cuda", epochs=2, cuda_graphs=True,
                        data_kwargs=dict(DATA, train_size=64 * 30), **EXACT)
    whole = gpucore.train(dict(config, name="whole"))
    stopped = gpucore.train(dict(config, name="halves"), callbacks=[StopAfterEpochs(1)])
    assert stopped.status == "stopped" and stopped.steps == 30  # 64 * 30 images, batch 64
    resumed = gpucore.train(dict(config, name="halves", resume="auto"))
    assert resumed.steps == whole.steps == 60
    assert stats_of(resumed)["cuda_graphs"]["captured"] == 1  # the resumed run warmed up and captured again
    assert_states_close(resumed.model.state_dict(), whole.model.state_dict())


class StopAfterEpochs:
    """Stops the run after `epochs` epochs, as Ctrl-C between epochs would."""

    def __init__(self, epochs):
        self.epochs = epochs

    def on_epoch_end(self, trainer, epoch, record):
        if epoch + 1 >= self.epochs:
            trainer.should_stop = True


@pytest.mark.needs_cuda
def test_graph_replays_do_not_sync_with_the_host(tmp_path):
    def syncs(steps):
        config = run_config(tmp_path, f"s{steps}", device="cuda", epochs=1, cuda_graphs=True, val_fraction=0,
                            log_every_n_steps=10 ** 6, data_kwargs={"train_size": steps * 64, "val_size": 64})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                result = gpucore.train(config)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        assert stats_of(result)["cuda_graphs"]["replays"] == steps - 4
        return sum("synchronizing CUDA operation" in str(w.message) for w in caught)

    syncs(5)  # warm-up: CUDA context, handles, kernels loaded
    assert syncs(40) == syncs(120)
