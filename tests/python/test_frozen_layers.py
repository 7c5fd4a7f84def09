"""The frozen backbone's forward (training/frozen_layers.py): BatchNorms folded into the layers before them and
weights cast once, checked against the model's own forward on fresh random inputs; its first-batch check and the
fallbacks; a freeze: backbone run through it against the same run through the model's own forward."""
import copy
import json
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import gpucore
from gpucore.training import frozen_layers
from gpucore.training.frozen_layers import CannotFold, FrozenLayersForward


class Net(nn.Module):
    """A backbone (conv+BN, a conv with no BN after it, conv+BN whose BN has no affine, a linear layer) and a head
    with a BatchNorm in training mode and dropout, whose random draws the check must repeat."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.conv3, self.bn3 = nn.Conv2d(8, 12, 1, bias=False), nn.BatchNorm2d(12, affine=False)
        self.embed = nn.Linear(12, 16)
        self.head = nn.Sequential(nn.Linear(16, 16), nn.BatchNorm1d(16), nn.Dropout(0.3), nn.Linear(16, 5))

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.conv2(x))
        x = self.bn3(self.conv3(x)).mean(dim=(2, 3))
        return self.head(self.embed(x))


def frozen_net(seed=0, channels_last=False) -> Net:
    """A Net in training mode with its backbone frozen as FreezeBackbone leaves it, BatchNorm statistics not the
    identity (as after training)."""
    torch.manual_seed(seed)
    model = Net()
    with torch.no_grad():
        for norm in (model.bn1, model.bn3):
            norm.running_mean.uniform_(-1, 1)
            norm.running_var.uniform_(0.5, 2)
        model.bn1.weight.uniform_(0.5, 1.5)
        model.bn1.bias.uniform_(-0.5, 0.5)
    model.train()
    for name, param in model.named_parameters():
        param.requires_grad_(name.startswith("head."))
    model.bn1.eval()
    model.bn3.eval()
    return model.to(memory_format=torch.channels_last) if channels_last else model


def outputs_and_grads(forward, model, x, seed):
    torch.manual_seed(seed)  # the same dropout draws
    out = forward(x)
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad}
    model.zero_grad(set_to_none=True)
    return out.detach(), grads


@pytest.mark.parametrize("channels_last", [False, True])
def test_folded_forward_and_head_gradients_equal_the_models_own_in_float32(channels_last):
    model = frozen_net(channels_last=channels_last)
    reference = copy.deepcopy(model)
    folded = FrozenLayersForward(model, None)
    # float32: only the BatchNorms fold (nothing to cast); conv2 and embed stay the model's
    assert folded.summary() == {"layers": 2, "batch_norms_folded": 2, "weights_cast_once_to": None}
    for seed in range(3):
        x = torch.randn(6, 3, 9, 9)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        expected, expected_grads = outputs_and_grads(reference, reference, x, seed)
        got, grads = outputs_and_grads(folded, model, x, seed)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
        # Rounding only, relative to the largest gradient: the head's BatchNorm over a small batch magnifies it
        # (head.0.bias's gradient is zero but for rounding, as BatchNorm cancels a bias before it).
        largest = max(g.abs().max() for g in expected_grads.values())
        for name in expected_grads:
            assert (grads[name] - expected_grads[name]).abs().max() <= 1e-3 * largest, name
    assert folded.failed is None
    # The head's BatchNorm statistics moved once per training batch, as the model's own did (the first batch's
    # check put them back after its two extra forwards); the frozen ones never moved.
    for (name, value), expected in zip(model.state_dict().items(), reference.state_dict().values()):
        torch.testing.assert_close(value, expected, rtol=1e-5, atol=1e-6, msg=name)
    assert int(model.head[1].num_batches_tracked) == 3
    assert model.conv1.weight.requires_grad is False and model.bn1.training is False


class WeightCasts(TorchDispatchMode):
    """Counts casts whose output has the shape of one of `shapes` (a frozen weight's)."""

    def __init__(self, shapes):
        super().__init__()
        self.shapes, self.count = {tuple(s) for s in shapes}, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten._to_copy.default and tuple(out.shape) in self.shapes:
            self.count += 1
        return out


def test_bfloat16_autocast_casts_frozen_weights_once_not_per_step():
    model = frozen_net(seed=1)
    # No BatchNorm in the head here: in training mode over 8 samples it magnifies bfloat16's rounding beyond the
    # check's tolerance (the check would then train through the model's own forward, as the next tests show).
    model.head[1] = nn.Identity()
    reference = copy.deepcopy(model)
    folded = FrozenLayersForward(model, torch.bfloat16)
    assert folded.summary() == {"layers": 4, "batch_norms_folded": 2, "weights_cast_once_to": "bfloat16"}
    # The weights made once are the folded float32 ones rounded to bfloat16.
    layer = folded.graph.get_submodule("gpucore_frozen_0")
    assert layer.autocast_weight.dtype == torch.bfloat16 and layer.weight.dtype == torch.float32
    assert torch.equal(layer.autocast_weight, layer.weight.to(torch.bfloat16))
    scale = model.bn1.weight / torch.sqrt(model.bn1.running_var + model.bn1.eps)
    torch.testing.assert_close(layer.weight, model.conv1.weight * scale.view(-1, 1, 1, 1), rtol=1e-6, atol=1e-7)
    frozen_shapes = [model.conv1.weight.shape, model.conv2.weight.shape, model.conv3.weight.shape,
                     model.embed.weight.shape]
    x = torch.randn(8, 3, 10, 10)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        folded(x)  # the first batch: the check runs the model's own forward too
        with WeightCasts(frozen_shapes) as own:
            torch.manual_seed(0)
            expected = reference(x)
        with WeightCasts(frozen_shapes) as once:
            torch.manual_seed(0)
            got = folded(x)
    assert folded.failed is None
    assert own.count == 4 and once.count == 0  # the model casts its four frozen weights at every call
    assert got.dtype == expected.dtype == torch.bfloat16
    error = (got.float() - expected.float()).abs().max()
    assert error <= 0.05 * expected.float().abs().max(), error
    # Outside autocast the layers use their float32 weights.
    torch.manual_seed(0)
    plain_expected = reference(x)
    torch.manual_seed(0)
    torch.testing.assert_close(folded(x), plain_expected, rtol=1e-4, atol=1e-5)


class Branching(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4)

    def forward(self, x):
        if x.sum() > 0:  # control flow on a value: torch.fx cannot trace it
            return self.bn(self.conv(x))
        return self.conv(x)


class Scaled(Net):
    """Its forward reads a Python attribute that tracing bakes into the graph."""
    scale = 1.0

    def forward(self, x):
        return super().forward(x) * self.scale


def test_untraceable_or_unfoldable_models_raise_cannot_fold_saying_why():
    model = Branching().requires_grad_(False).eval()
    with pytest.raises(CannotFold, match="torch.fx cannot trace the model"):
        FrozenLayersForward(model, None)
    trainable = Net()  # nothing frozen
    with pytest.raises(CannotFold, match="no frozen convolution or linear layer"):
        FrozenLayersForward(trainable, None)
    hooked = frozen_net()
    hooked.register_forward_hook(lambda module, inputs, output: None)
    with pytest.raises(CannotFold, match="forward hooks of its own"):
        FrozenLayersForward(hooked, None)


def test_a_forward_that_its_trace_does_not_show_fails_the_check_and_trains_through_the_model():
    torch.manual_seed(0)
    model = Scaled()
    model.load_state_dict(frozen_net().state_dict())
    for name, param in model.named_parameters():
        param.requires_grad_(name.startswith("head."))
    model.bn1.eval()
    model.bn3.eval()
    folded = FrozenLayersForward(model, None)
    model.scale = 3.0  # the traced graph still multiplies by 1.0
    x = torch.randn(4, 3, 8, 8)
    reference = copy.deepcopy(model)
    torch.manual_seed(5)
    got = folded(x)
    torch.manual_seed(5)
    torch.testing.assert_close(got, reference(x))  # the model's own forward, same draws
    assert "differs from the model's own forward" in folded.summary()["unchanged"]


SMALL = {"data": "synthetic_fashion", "data_kwargs": {"train_size": 256, "val_size": 64, "seed": 3},
         "progress": False, "batch_size": 32, "device": "cpu", "precision": "32", "epochs": 2, "freeze": "backbone",
         "freeze_epochs": 1, "seed": 4, "loggers": [], "report": False}


class StateAfterEpochs:
    """The model's state at the start, then after each epoch."""

    def __init__(self, states):
        self.states = states

    def on_fit_start(self, trainer):
        self.on_epoch_end(trainer, 0, {})

    def on_epoch_end(self, trainer, epoch, record):
        self.states.append({k: v.clone() for k, v in trainer.model.state_dict().items()})


@pytest.mark.parametrize("device,precision,cast", [
    ("cpu", "32", None),
    ("cpu", "bf16-mixed", "bfloat16"),
    pytest.param("cuda", "16-mixed", "float16", marks=pytest.mark.needs_cuda),
    pytest.param("cuda", "bf16-mixed", "bfloat16", marks=pytest.mark.needs_cuda)])
def test_a_frozen_run_through_the_folded_forward_trains_as_through_the_model(tmp_path, monkeypatch, device, precision,
                                                                             cast):
    config = dict(SMALL, device=device, precision=precision)
    rel = 1e-4 if cast is None else 2e-2  # reduced precision: the folded weights round differently
    folded_states, plain_states = [], []
    folded = gpucore.train(dict(config, run_dir=str(tmp_path / "folded")), callbacks=[StateAfterEpochs(folded_states)])

    def refuse(self, *args):
        raise CannotFold("switched off by the test")

    monkeypatch.setattr(frozen_layers.FrozenLayersForward, "__init__", refuse)
    plain = gpucore.train(dict(config, run_dir=str(tmp_path / "plain")), callbacks=[StateAfterEpochs(plain_states)])
    for a, b in zip(folded.history, plain.history):  # dropout draws and data order alike: only rounding differs
        for key in ("train_loss", "val_loss", "val_accuracy"):
            assert a[key] == pytest.approx(b[key], rel=rel, abs=1e-5), key
    stats = json.loads((Path(folded.run_dir) / "training_stats.json").read_text())
    # float32: the two conv+BN pairs; with autocast the classifier's frozen first linear layer is cast once too
    layers = 2 if cast is None else 3
    assert stats["frozen_layers"] == {"layers": layers, "batch_norms_folded": 2, "weights_cast_once_to": cast}
    assert stats["host_syncs_by_source"]["frozen_layers_check"] == 1  # the first batch's check: one read
    stats = json.loads((Path(plain.run_dir) / "training_stats.json").read_text())
    assert stats["frozen_layers"] == {"unchanged": "switched off by the test"}
    assert "frozen_layers_check" not in stats["host_syncs_by_source"]
    start = plain_states[0]
    for name, value in folded_states[1].items():  # after the frozen epoch
        expected = plain_states[1][name]
        if cast is None:
            torch.testing.assert_close(value, expected, rtol=1e-4, atol=1e-5, msg=name)
        else:  # AdamW turns rounding in small gradients into whole steps: the epoch's updates agree as a whole
            update = (expected - start[name]).float().norm()
            assert (value - expected).float().norm() <= 0.05 * update + 1e-6, name
