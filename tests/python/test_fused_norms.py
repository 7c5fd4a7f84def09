"""BatchNorm + (residual add +) ReLU as one op (gpucore::bn_add_relu, training/fused_norms.py): the op against torch's
batch_norm, add and relu and their gradients on fresh random inputs; the rewritten forward of a torchvision ResNet
against a float64 reference, as close as torch's own layers; what is left to torch's layers (hooks, other users);
and a run with fused_norms against the same run without it."""
import copy
import json
from pathlib import Path

import pytest
import torch
import torchvision
from torch import nn

import gpucore
from gpucore.models.fused_blocks import norm_relu
from gpucore.training.fused_norms import FusedNorms, FusedNormsForward
from gpucore.training.graph_forward import CannotRewrite


def random_norm(channels: int, dtype=torch.float32, momentum=0.1) -> nn.BatchNorm2d:
    norm = nn.BatchNorm2d(channels, momentum=momentum).to(dtype)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
        norm.running_mean.uniform_(-1, 1)
        norm.running_var.uniform_(0.5, 2)
    return norm


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("training,momentum", [(True, 0.1), (True, None), (False, 0.1)])
def test_the_op_gives_torchs_batch_norm_add_relu_and_gradients(dtype, channels_last, residual, training, momentum):
    shape = (5, 7, 6, 9)
    x = torch.randn(shape, dtype=dtype) * 3 + 1
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    skip = torch.randn(shape, dtype=dtype) if residual else None
    grad = torch.randn(shape, dtype=dtype)
    norm = random_norm(7, torch.float64 if dtype == torch.float64 else torch.float32, momentum).train(training)
    reference = copy.deepcopy(norm)

    def run(forward, module):
        xs = x.clone().requires_grad_()
        rs = skip.clone().requires_grad_() if residual else None
        out = forward(module, xs, rs)
        out.backward(grad)
        return out, xs.grad, rs.grad if residual else None

    def torch_layers(module, xs, rs):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):  # bf16 input, fp32 norm
            out = module(xs)
            return torch.relu(out + rs if rs is not None else out)

    for _ in range(2):  # twice: the running statistics and momentum=None's count advance
        got, want = run(norm_relu, norm), run(torch_layers, reference)
    tol = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-12, atol=1e-12),
           torch.bfloat16: dict(rtol=1e-2, atol=1e-2)}[dtype]
    for a, b in zip(got, want):
        if b is not None:
            torch.testing.assert_close(a, b, **tol)
    assert got[0].is_contiguous(memory_format=torch.channels_last) == channels_last
    for name in ("weight", "bias"):
        g, w = getattr(norm, name).grad, getattr(reference, name).grad
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4 * float(w.abs().max()))
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(norm, name), getattr(reference, name), rtol=1e-6, atol=1e-7)


def test_the_op_refuses_a_residual_of_another_shape_naming_it():
    norm = random_norm(4)
    with pytest.raises(RuntimeError, match=r"residual must be the input's size \[2, 4, 3, 3\], got \[2, 4, 3, 4\]"):
        torch.ops.gpucore.bn_add_relu(torch.randn(2, 4, 3, 3), torch.randn(2, 4, 3, 4), norm.weight, norm.bias,
                                      norm.running_mean, norm.running_var, True, 0.1, 1e-5)


def relative_error(got: torch.Tensor, reference: torch.Tensor) -> float:
    return float((got.double() - reference).norm() / reference.norm())


@pytest.mark.parametrize("channels_last", [False, True])
def test_a_resnets_fused_forward_and_gradients_are_as_close_to_float64_as_torchs_layers(channels_last):
    torch.manual_seed(int(torch.randint(0, 2**31, ())))
    model = torchvision.models.resnet18(num_classes=10)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    layers, float64 = copy.deepcopy(model), copy.deepcopy(model).double()
    fused = FusedNormsForward(model, None)
    assert fused.summary() == {"norm_relu": 9, "norm_add_relu": 8}  # the stem and each block's first; each block's end
    x, weights = torch.randn(8, 3, 48, 48), torch.randn(8, 10)
    outputs = [forward(x) for forward in (fused, layers)] + [float64(x.double())]
    for out, module in zip(outputs, (model, layers, float64)):
        (out * weights.to(out.dtype)).sum().backward()
    reference = outputs[2]
    assert relative_error(outputs[0], reference) <= 2 * relative_error(outputs[1], reference) + 1e-7
    for (name, p), q, r in zip(model.named_parameters(), layers.parameters(), float64.parameters()):
        assert relative_error(p.grad, r.grad) <= 2 * relative_error(q.grad, r.grad) + 1e-6, name
    for (name, a), b in zip(model.named_buffers(), layers.buffers()):  # the running statistics, updated alike
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    assert model.state_dict().keys() == layers.state_dict().keys()


def test_hooked_layers_and_shared_outputs_keep_torchs_layers():
    model = torchvision.models.resnet18(num_classes=10)
    seen = []
    model.layer1[0].bn1.register_forward_hook(lambda module, args, out: seen.append(out.shape))
    fused = FusedNormsForward(model, None)
    assert fused.summary() == {"norm_relu": 8, "norm_add_relu": 8}  # the hooked one runs as torch's layers
    fused(torch.randn(2, 3, 32, 32))
    # the first batch: the check runs the model itself and the graph, then the graph's output is the forward's
    assert seen == [torch.Size([2, 64, 8, 8])] * 3
    model.register_forward_hook(lambda *args: None)
    with pytest.raises(CannotRewrite, match="forward hooks of its own"):
        FusedNormsForward(model, None)

    class Shared(nn.Module):  # the BatchNorm's output is also the block's second output: not fused
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)

        def forward(self, x):
            y = self.bn(self.conv(x))
            return torch.relu(y) + y

    with pytest.raises(CannotRewrite, match="no BatchNorm2d followed by a ReLU"):
        FusedNormsForward(Shared(), None)
    off = FusedNorms(True, Shared(), None, torch.device("cpu"), None)
    assert off.forward is None and off.summary() == {"unchanged": "the model is wrapped for DDP or torch.compile"}
    fast_cnn = gpucore.models.build_model("fast_cnn", {})  # its own fused max-pool + BatchNorm + ReLU stay
    off = FusedNorms(True, fast_cnn, fast_cnn, torch.device("cpu"), None)
    assert off.summary() == {"unchanged": "the model chooses its own fused ops (fast_cnn: model_kwargs fused)"}


# One epoch of 4 steps: a ResNet-18 on 16-sample batches is chaotic over more (its last BatchNorms normalise 16
# values a channel): torch's own layers on 1 thread and on 2 end a second epoch 0.5% apart in train_loss.
SMALL = {"model": "torchvision:resnet18", "data": "synthetic_fashion", "progress": False, "batch_size": 16,
         "device": "cpu", "epochs": 1, "seed": 4, "loggers": [], "report": False,
         "data_kwargs": {"train_size": 64, "val_size": 32, "seed": 3}, "optimizer": "sgd", "lr": 0.01}


@pytest.mark.parametrize("precision,rel", [("32", 1e-5), ("bf16-mixed", 3e-2)])
def test_a_run_with_fused_norms_trains_as_the_same_run_through_torchs_layers(tmp_path, precision, rel):
    runs = {fused: gpucore.train(dict(SMALL, precision=precision, fused_norms=fused,
                                      run_dir=str(tmp_path / str(fused))))
            for fused in (True, False)}
    for a, b in zip(runs[True].history, runs[False].history):
        for key in ("train_loss", "val_loss"):
            assert a[key] == pytest.approx(b[key], rel=rel), key
    stats = {fused: json.loads((Path(run.run_dir) / "training_stats.json").read_text()) for fused, run in runs.items()}
    assert stats[True]["fused_norms"] == {"norm_relu": 9, "norm_add_relu": 8}
    assert stats[True]["host_syncs_by_source"]["fused_norms_check"] == 1
    assert stats[False]["fused_norms"] == {"unchanged": "fused_norms: false"}
    assert "fused_norms_check" not in stats[False]["host_syncs_by_source"]
    if precision == "32":
        for (name, a), b in zip(runs[True].model.state_dict().items(), runs[False].model.state_dict().values()):
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4, msg=name)
