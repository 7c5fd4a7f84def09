"""A torchvision ResNet's BatchNorm + (residual add +) ReLU and its stem's BatchNorm + ReLU + max-pool as single ops
(gpucore::bn_add_relu, gpucore::bn_relu_maxpool; training/fused_norms.py): the ops against torch's layers and their
gradients on fresh random inputs; the fused forward of torchvision ResNets against a float64 reference, as close as
torch's own layers; what is left to torch's layers (hooks, subclasses) and what still runs as written (the model's
own forward); and a run with fused_norms against the same run without it."""
import copy
import json
from pathlib import Path

import pytest
import torch
import torchvision
from torch import nn

import gpucore
from gpucore.models.fused_blocks import norm_relu, norm_relu_pool
from gpucore.training.fused_norms import FusedNorms


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape", [(4, 6, 9, 7), (3, 5, 8, 6), (2, 3, 1, 2)])
def test_the_stem_op_gives_torchs_batch_norm_relu_max_pool_and_gradients(dtype, channels_last, training, shape):
    x = torch.randn(shape, dtype=dtype) * 2
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    norm = random_norm(shape[1], torch.float64 if dtype == torch.float64 else torch.float32).train(training)
    reference = copy.deepcopy(norm)
    pool = nn.MaxPool2d(3, 2, 1)
    xs, xt = x.clone().requires_grad_(), x.clone().requires_grad_()
    got = norm_relu_pool(norm, xs)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        want = pool(torch.relu(reference(xt)))
    grad = torch.randn(want.shape, dtype=dtype)
    got.backward(grad)
    want.backward(grad)
    torch.testing.assert_close(got, want, rtol=0, atol=0) if dtype == torch.bfloat16 else \
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)  # bf16: the same rounded maxima
    # bf16: the pool's gradient adds the windows' in another order before rounding
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xs.grad, xt.grad, **tol)
    for name in ("weight", "bias"):
        w = getattr(reference, name).grad
        torch.testing.assert_close(getattr(norm, name).grad, w, rtol=tol["rtol"], atol=tol["atol"] * float(w.abs().max()))
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(norm, name), getattr(reference, name), rtol=1e-6, atol=1e-7)


def relative_error(got: torch.Tensor, reference: torch.Tensor) -> float:
    return float((got.detach().double() - reference.detach()).norm() / reference.detach().norm())


def fused_forward(model):
    fused = FusedNorms(True, model, model, torch.device("cpu"))
    assert fused.forward is not None, fused.off
    return fused.forward


@pytest.mark.parametrize("build,counts", [
    (lambda: torchvision.models.resnet18(num_classes=10), {"basic_blocks": 8, "stems": 1}),
    (lambda: torchvision.models.resnet.ResNet(torchvision.models.resnet.Bottleneck, [1, 2, 1, 1], num_classes=10),
     {"bottlenecks": 5, "stems": 1})])
@pytest.mark.parametrize("channels_last", [False, True])
def test_a_resnets_fused_forward_and_gradients_equal_torchs_layers(build, counts, channels_last):
    """In float64, where no ReLU mask or max-pool choice flips between two roundings, every gradient equals torch's
    layers' to 1e-9; in float32 (where they can: a value an ulp from 0, two maxima an ulp apart, in either
    implementation against the exact one) the output is as close to float64's as torch's layers' is."""
    torch.manual_seed(int(torch.randint(0, 2**31, ())))
    model = build()
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    float32, layers, float64 = copy.deepcopy(model), copy.deepcopy(model).double(), model.double()
    fused = fused_forward(float64)
    assert fused.summary() == counts
    x, weights = torch.randn(8, 3, 48, 48, dtype=torch.float64), torch.randn(8, 10, dtype=torch.float64)
    outputs = [fused(x), layers(x)]
    for out in outputs:
        (out * weights).sum().backward()
    assert relative_error(outputs[0], outputs[1]) <= 1e-12
    for (name, p), q in zip(float64.named_parameters(), layers.parameters()):
        assert relative_error(p.grad, q.grad) <= 1e-9, name
    for (name, a), b in zip(float64.named_buffers(), layers.buffers()):  # the running statistics, updated alike
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, msg=name)
    assert float64.state_dict().keys() == layers.state_dict().keys()
    assert all("forward" not in m.__dict__ for m in float64.modules())  # nothing left on the model after the call
    reference = copy.deepcopy(float32).double()(x)
    torch_layers = copy.deepcopy(float32)(x.float())
    assert relative_error(fused_forward(float32)(x.float()), reference) <= \
        2 * relative_error(torch_layers, reference) + 1e-7


def test_the_models_own_forward_runs_as_written_and_hooked_layers_keep_torchs():
    class Counting(nn.Module):  # Python in the user's forward: it must run at every call
        def __init__(self):
            super().__init__()
            self.net, self.calls = torchvision.models.resnet18(num_classes=10), 0

        def forward(self, x):
            self.calls += 1
            return self.net(x) * 2

    model = Counting()
    seen = []
    model.net.layer1[0].bn1.register_forward_hook(lambda module, args, out: seen.append(out.shape))
    fused = fused_forward(model)
    out = fused(torch.randn(2, 3, 32, 32))
    assert model.calls == 1 and seen == [torch.Size([2, 64, 8, 8])]  # the hooked BatchNorm ran as a module
    model.eval()  # running statistics: the fused forward gives the model's own output
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(fused(x), model(x), rtol=1e-5, atol=1e-5)
    assert model.calls == 3 and out.shape == (2, 10)
    copy.deepcopy(model)  # no bound forward left on a block

    class OwnBlock(torchvision.models.resnet.BasicBlock):  # a subclass's forward is its own: not replaced
        def forward(self, x):
            return super().forward(x) * 0.5

    net = torchvision.models.resnet.ResNet(OwnBlock, [1, 1, 1, 1], num_classes=10)
    assert fused_forward(net).summary() == {"stems": 1}
    fast_cnn = gpucore.models.build_model("fast_cnn", {})  # its own fused max-pool + BatchNorm + ReLU
    off = FusedNorms(True, fast_cnn, fast_cnn, torch.device("cpu"))
    assert off.forward is None and off.summary() == {
        "unchanged": "the model has no torchvision ResNet block (BasicBlock, Bottleneck) or stem"}
    assert FusedNorms(True, net, None, torch.device("cpu")).summary() == {
        "unchanged": "the model is wrapped for DDP or torch.compile"}


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
    assert stats[True]["fused_norms"] == {"basic_blocks": 8, "stems": 1}
    assert stats[False]["fused_norms"] == {"unchanged": "fused_norms: false"}
    if precision == "32":
        for (name, a), b in zip(runs[True].model.state_dict().items(), runs[False].model.state_dict().values()):
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4, msg=name)
