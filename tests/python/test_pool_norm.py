"""gpucore::maxpool_bn_relu (csrc/ops/fused/pool_norm.h) against torch's MaxPool2d(2) -> BatchNorm2d -> ReLU: outputs,
running statistics and every gradient, float32 and bfloat16, contiguous and channels-last, odd sizes, N = 1,
ties in the windows; opcheck, gradcheck; FastCNN with it, its hooks and Grad-CAM."""
import copy

import pytest
import torch
from torch import nn

import gpucore  # noqa: F401  (loads the ops)
from conftest import random_norm, ran_ops
from gpucore.cam import CAM
from gpucore.models.fused_blocks import pool_norm_relu
from gpucore.models.builtin import FastCNN

TOLERANCE = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-12),
             torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2)}


def unfused(norm):
    return nn.Sequential(nn.MaxPool2d(2), norm, nn.ReLU(inplace=True))


class Fused(nn.BatchNorm2d):
    """MaxPool2d(2) -> this BatchNorm2d -> ReLU through fused_blocks.pool_norm_relu, as FastCNN runs them."""

    def forward(self, x):
        return pool_norm_relu(self, x)


def fused_copy(norm):
    fused = Fused(norm.num_features, eps=norm.eps, momentum=norm.momentum)
    fused.load_state_dict(norm.state_dict())
    return fused


def run_block(block, x, grad, train):
    block.train(train)
    x = x.detach().clone().requires_grad_()
    out = block(x)
    out.backward(grad)
    params = [p.grad.clone() for p in block.parameters()]
    for p in block.parameters():
        p.grad = None
    return out.detach(), x.grad, params


def compare(shape, dtype, channels_last, train, seed=0, values=None):
    norm = random_norm(shape[1], seed)
    fused = fused_copy(norm)
    torch.manual_seed(seed + 1)
    x = torch.randn(shape) * 2 + 0.3 if values is None else values(shape)
    x = x.to(dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    pooled_shape = (shape[0], shape[1], shape[2] // 2, shape[3] // 2)
    grad = torch.randn(pooled_shape).to(dtype)
    ref_out, ref_gx, ref_params = run_block(unfused(norm), x, grad, train)
    out, gx, params = run_block(fused, x, grad, train)
    tol = TOLERANCE[dtype]
    assert out.dtype == dtype and gx.dtype == dtype
    assert out.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    torch.testing.assert_close(out, ref_out, **tol)
    torch.testing.assert_close(gx, ref_gx, **tol)
    # the pool's routing: the same input element of every window gets the gradient (ties: the first maximum);
    # not where training normalises 2 values per channel (both are then +-1 whatever the input: a zero gradient,
    # rounding's tiny one in either)
    if not train or shape[0] * (shape[2] // 2) * (shape[3] // 2) > 2:
        assert torch.equal(gx != 0, ref_gx != 0)
    for got, want in zip(params, ref_params):
        torch.testing.assert_close(got, want, rtol=tol["rtol"], atol=tol["atol"] * max(1.0, want.abs().max().item()))
    for key in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(fused, key), getattr(norm, key), rtol=1e-5, atol=1e-6)
    return gx


@pytest.mark.kernel_build
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("shape", [(16, 32, 28, 28), (3, 5, 7, 9), (1, 4, 6, 6), (2, 3, 2, 3), (4, 64, 14, 14)])
def test_matches_unfused_torch(shape, dtype, channels_last, train):
    compare(shape, dtype, channels_last, train, seed=sum(shape))


@pytest.mark.kernel_build
@pytest.mark.parametrize("channels_last", [False, True])
def test_ties_route_to_the_first_maximum(channels_last):
    """Integer values: most windows hold ties; torch's max_pool2d gives the gradient to the first maximum read
    row by row, and so does the fused op (compare checks the routing exactly)."""
    gx = compare((4, 6, 9, 8), torch.float32, channels_last, True,
                 values=lambda shape: torch.randint(0, 3, shape).float())
    assert (gx != 0).sum() == 4 * 6 * 4 * 4  # one element per window
    flat = torch.ones(1, 1, 2, 2)  # all four equal: the top-left one
    compare((1, 1, 2, 2), torch.float32, channels_last, False, values=lambda shape: flat.clone())


@pytest.mark.kernel_build
def test_training_statistics_over_several_steps():
    """The running statistics after three training steps (momentum 0.1 and None: torch's cumulative average)."""
    for momentum in (0.1, None):
        norm = random_norm(8, 3, momentum=momentum)
        fused = fused_copy(norm)
        reference = unfused(norm).train()
        fused.train()
        for step in range(3):
            x = torch.randn(5, 8, 10, 10)
            torch.testing.assert_close(fused(x), reference(x), rtol=1e-4, atol=1e-5)
        for key in ("running_mean", "running_var", "num_batches_tracked"):
            torch.testing.assert_close(getattr(fused, key), getattr(norm, key), rtol=1e-5, atol=1e-6)


@pytest.mark.kernel_build
def test_autocast_bfloat16_like_batchnorm():
    """Under CPU autocast the block gets the conv's bfloat16 output, as BatchNorm2d does there (float32 weights,
    bfloat16 out)."""
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 16, 3, padding=1, bias=False)
    norm = random_norm(16, 4)
    x = torch.randn(8, 3, 12, 12).to(memory_format=torch.channels_last)
    results = []
    for block in (unfused(norm), fused_copy(norm)):
        block.train()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = block(conv(x))
        assert out.dtype == torch.bfloat16
        out.float().square().sum().backward()
        results.append((out, conv.weight.grad.clone(), [p.grad.clone() for p in block.parameters()]))
        conv.weight.grad = None
    (out, conv_grad, grads), (fused_out, fused_conv_grad, fused_grads) = results
    torch.testing.assert_close(fused_out, out, **TOLERANCE[torch.bfloat16])
    torch.testing.assert_close(fused_conv_grad, conv_grad, rtol=2e-2, atol=2e-2 * conv_grad.abs().max().item())
    for got, want in zip(fused_grads, grads):
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2 * want.abs().max().item())


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("training", [True, False])
def test_opcheck(channels_last, training):
    torch.manual_seed(1)
    x = torch.randn(3, 4, 7, 6, dtype=torch.float64, requires_grad=True)
    if channels_last:
        x = x.detach().to(memory_format=torch.channels_last).requires_grad_()
    weight = torch.rand(4, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(4, dtype=torch.float64, requires_grad=True)
    args = (x, weight, bias, torch.randn(4, dtype=torch.float64), torch.rand(4, dtype=torch.float64) + 0.5,
            training, 0.1, 1e-5)
    torch.library.opcheck(torch.ops.gpucore.maxpool_bn_relu, args)
    grad_checked = lambda x, w, b: torch.ops.gpucore.maxpool_bn_relu(x, w, b, *args[3:])[0]  # noqa: E731
    assert torch.autograd.gradcheck(grad_checked, (x, weight, bias))


def test_refuses_what_torch_refuses():
    norm = fused_copy(random_norm(3, 0)).train()
    with pytest.raises(RuntimeError, match="more than 1 value per channel"):
        norm(torch.randn(1, 3, 2, 3))
    with pytest.raises(RuntimeError, match="at least 2 x 2"):
        norm.eval()(torch.randn(2, 3, 1, 4))


@pytest.mark.kernel_build
def test_fast_cnn_keeps_its_state_dict_and_result():
    """FastCNN with the fused blocks has the unfused one's state_dict keys; a state loads across, and one training
    step gives the same output and gradients."""
    torch.manual_seed(0)
    plain = FastCNN(fused=False)
    fused = FastCNN(fused=True)
    assert list(fused.state_dict()) == list(plain.state_dict())
    fused.load_state_dict(plain.state_dict())
    assert [type(m) for m in fused.modules()] == [type(m) for m in plain.modules()]
    x = torch.randn(32, 1, 28, 28)
    outs = []
    for model in (plain, fused):
        model.train()
        out = model(x)
        out.logsumexp(1).sum().backward()
        outs.append((out, {n: p.grad for n, p in model.named_parameters()}, copy.deepcopy(model.state_dict())))
    torch.testing.assert_close(outs[1][0], outs[0][0], rtol=1e-4, atol=1e-4)
    for name, grad in outs[0][1].items():
        torch.testing.assert_close(outs[1][1][name], grad, rtol=1e-3, atol=1e-4 * max(1.0, grad.abs().max().item()))
    for key, value in outs[0][2].items():
        torch.testing.assert_close(outs[1][2][key], value, rtol=1e-4, atol=1e-5)
    fused.eval()
    plain.eval()
    with torch.no_grad():
        torch.testing.assert_close(fused(x), plain(x), rtol=1e-4, atol=1e-4)
        assert ran_ops(fused, x)["gpucore::maxpool_bn_relu"] == 2  # and the first block's convolution with it


def test_fast_cnn_traces_with_torch_fx():
    """torch.fx (frozen layers' folding) traces the fused blocks as the torch functions they stand for."""
    torch.manual_seed(0)
    model = FastCNN().eval()
    graph = torch.fx.symbolic_trace(model)
    x = torch.randn(4, 1, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(graph(x), model(x), rtol=1e-4, atol=1e-5)


@pytest.mark.kernel_build
def test_fast_cnn_hooks_see_their_own_layers_outputs():
    """A hook on any layer of a fused block sees that layer's own output, the one the unfused network's layer gives
    (the max-pool's place: the pooled map; the BatchNorm's: before the ReLU); the blocks without a hook still run
    as one op, and so does every block once the hook is gone."""
    torch.manual_seed(0)
    plain = FastCNN(fused=False).eval()
    fused = FastCNN(fused=True).eval()
    fused.load_state_dict(plain.state_dict())
    x = torch.randn(4, 1, 28, 28)
    blocks = [range(0, 4), range(4, 8), range(11, 15)]  # conv, pool, norm, ReLU; 8-10: conv, norm, ReLU
    for index in range(len(plain.features)):
        seen = []
        handles = [net.features[index].register_forward_hook(lambda module, args, out: seen.append(out.clone()))
                   for net in (plain, fused)]
        with torch.no_grad():
            plain(x)
            ops = ran_ops(fused, x)
        for handle in handles:
            handle.remove()
        torch.testing.assert_close(seen[1], seen[0], rtol=1e-4, atol=1e-5, msg=lambda m: f"features.{index}: {m}")
        # a hook on a block's pool, norm or ReLU: that block layer by layer; on the first convolution: that
        # block's convolution apart; every other block one op
        apart = sum(index in block[1:] for block in blocks[1:])  # blocks 2 and 3 run maxpool_bn_relu
        assert ops["gpucore::conv3x3_maxpool_bn_relu"] == (index not in blocks[0]), index
        assert ops["gpucore::maxpool_bn_relu"] == 2 - apart + (index == 0), index
    for index in range(len(plain.classifier)):  # the head's max-pool to 3 x 3 and flatten, skipped unhooked
        seen = []
        handles = [net.classifier[index].register_forward_hook(lambda module, args, out: seen.append(out.clone()))
                   for net in (plain, fused)]
        with torch.no_grad():
            plain(x)
            fused(x)
        for handle in handles:
            handle.remove()
        torch.testing.assert_close(seen[1], seen[0], rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        ops = ran_ops(fused, x)
    assert (ops["gpucore::conv3x3_maxpool_bn_relu"], ops["gpucore::maxpool_bn_relu"]) == (1, 2)
    assert ops["aten::adaptive_max_pool2d"] == 0


@pytest.mark.kernel_build
@pytest.mark.parametrize("channels_last", [False, True])
def test_fast_cnn_head_skips_the_identity_pool(channels_last):
    """On a 3 x 3 feature map the head's max-pool is skipped and a channels-last map meets the linear weight
    permuted to its order: outputs and every gradient as the torch layers give them, within float rounding; other
    sizes run the pool."""
    torch.manual_seed(2)
    layout = torch.channels_last if channels_last else torch.contiguous_format
    plain = FastCNN(fused=False).to(memory_format=layout).train()
    fused = FastCNN(fused=True).to(memory_format=layout).train()
    fused.load_state_dict(plain.state_dict())
    for size in (28, 40):  # 3 x 3 and 5 x 5 feature maps
        x = torch.randn(6, 1, size, size).contiguous(memory_format=layout)
        outs = [net(x) for net in (plain, fused)]
        torch.testing.assert_close(outs[1], outs[0], rtol=1e-4, atol=1e-5)
        for out in outs:
            out.logsumexp(1).sum().backward()
        for (name, param), ref in zip(fused.named_parameters(), plain.parameters()):
            torch.testing.assert_close(param.grad, ref.grad, rtol=1e-3, atol=1e-4 * max(1.0, ref.grad.abs().max().item()),
                                       msg=lambda message, name=name: f"{name} at {size} px: {message}")
        fused.zero_grad()
        plain.zero_grad()
        with torch.no_grad():
            assert (ran_ops(fused.eval(), x)["aten::adaptive_max_pool2d"] == 0) == (size == 28)
        fused.train()


@pytest.mark.kernel_build
@pytest.mark.parametrize("layer", ["features.12", "features.13", "features.14", "features.6", "auto"])
def test_fast_cnn_gradcam_maps_the_unfused_layers(layer):
    """Grad-CAM on a fused block's layer gives the unfused network's map (it hooks that layer, so the block runs
    layer by layer)."""
    torch.manual_seed(1)
    plain = FastCNN(fused=False).eval()
    fused = FastCNN(fused=True).eval()
    fused.load_state_dict(plain.state_dict())
    x = torch.randn(3, 1, 28, 28)
    maps = [CAM(net, layer)(x, targets=[1, 4, 7]).cams for net in (plain, fused)]
    assert maps[0].abs().sum() > 0
    torch.testing.assert_close(maps[1], maps[0], rtol=1e-4, atol=1e-4)


@pytest.mark.kernel_build
def test_fast_cnn_under_torch_compile():
    """torch.compile (fullgraph, AOTAutograd through the fake kernels and the registered gradient) gives eager's
    outputs, gradients and running statistics."""
    torch.manual_seed(0)
    model = FastCNN().train()
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    x = torch.randn(8, 1, 28, 28)
    out, expected = compiled(x), reference(x)
    out.square().sum().backward()
    expected.square().sum().backward()
    torch.testing.assert_close(out, expected)
    for (name, param), ref in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(param.grad, ref.grad, msg=name)
    torch.testing.assert_close(model.state_dict(), reference.state_dict())
