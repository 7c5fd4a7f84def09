"""gpucore::conv3x3_maxpool_bn_relu (csrc/ops/fused/conv_pool_norm.h), FastCNN's first block as one op, against torch's
conv2d(padding=1) -> max_pool2d(2) -> batch_norm -> relu: outputs, memory format, running statistics and the
gradients of the convolution's and the norm's weights, float32, float64 and bfloat16, grey and RGB inputs, odd
sizes, channel counts off the kernels' vector width, ties; opcheck, gradcheck; FastCNN with it against torch's
modules, under autocast, with hooks, and where it must not run."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import gpucore  # noqa: F401  (loads the ops)
from conftest import random_norm, ran_ops
from gpucore.models.fused_blocks import conv_pool_norm_relu
from gpucore.models.builtin import FastCNN

TOLERANCE = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-12),
             torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2)}


def reference(x, conv_weight, norm, training, conv_dtype=None):
    """conv_dtype: the convolution's values rounded to it (as a convolution in that dtype writes them)."""
    conv = F.conv2d(x, conv_weight, padding=1)
    if conv_dtype is not None:
        conv = conv.to(conv_dtype).to(x.dtype)
    return F.relu(F.batch_norm(F.max_pool2d(conv, 2), norm.running_mean, norm.running_var, norm.weight, norm.bias,
                               training, norm.momentum, norm.eps))


def fused(x, conv_weight, norm, training):
    out, pooled, window, *_stats, new_mean, new_var = torch.ops.gpucore.conv3x3_maxpool_bn_relu(
        x, conv_weight, norm.weight, norm.bias, norm.running_mean, norm.running_var, training, norm.momentum,
        norm.eps)
    if training:
        with torch.no_grad():
            norm.running_mean.copy_(new_mean)
            norm.running_var.copy_(new_var)
    return out, pooled, window


def gradients(out, grad, conv_weight, norm):
    return torch.autograd.grad(out, [conv_weight, norm.weight, norm.bias], grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape,channels", [((16, 1, 28, 28), 32), ((3, 3, 7, 9), 5), ((2, 4, 6, 6), 20),
                                            ((1, 1, 4, 5), 3), ((4, 2, 10, 8), 16)])
def test_matches_torch(shape, channels, dtype, channels_last, training):
    seed = sum(shape) + channels
    norm, norm_ref = random_norm(channels, seed, dtype=dtype), random_norm(channels, seed, dtype=dtype)
    torch.manual_seed(seed + 1)
    layout = torch.channels_last if channels_last else torch.contiguous_format
    x = (torch.randn(shape) * 2 + 0.3).to(dtype).contiguous(memory_format=layout)
    conv = nn.Conv2d(shape[1], channels, 3, padding=1, bias=False).to(dtype).to(memory_format=layout)
    weight = conv.weight
    # bfloat16: against the same values in float64, the convolution's rounded to bfloat16 (torch's bfloat16
    # batch-norm backward rounds more than the op)
    exact = dtype == torch.bfloat16
    ref_weight = weight.detach().double().requires_grad_() if exact else weight
    if exact:
        norm_ref = norm_ref.double()
    ref = reference(x.double() if exact else x, ref_weight, norm_ref, training, dtype if exact else None)
    out, pooled, window = fused(x, weight, norm, training)
    tol = TOLERANCE[dtype]
    assert out.dtype == dtype and out.shape == ref.shape
    for memory_format in (torch.channels_last, torch.contiguous_format):  # torch's convolution's choice
        reference_format = F.conv2d(x, weight, padding=1).is_contiguous(memory_format=memory_format)
        assert out.is_contiguous(memory_format=memory_format) == reference_format
    torch.testing.assert_close(out, ref.to(dtype), **tol)
    if not exact:
        torch.testing.assert_close(pooled, F.max_pool2d(F.conv2d(x, weight, padding=1), 2), **tol)
    assert window.dtype == torch.uint8 and int(window.max()) <= 3
    grad = torch.randn(ref.shape).to(dtype)
    got = gradients(out, grad, weight, norm)
    want = gradients(ref, grad.to(ref.dtype), ref_weight, norm_ref)
    for g, w in zip(got, want):
        scale = max(1.0, w.abs().max().item())
        rtol, atol = (2e-2, 2e-2 * scale) if exact else (tol["rtol"], tol["atol"] * scale)
        torch.testing.assert_close(g, w.to(dtype), rtol=rtol, atol=atol)
    torch.testing.assert_close(norm.running_mean.to(norm_ref.running_mean.dtype), norm_ref.running_mean, **tol)
    torch.testing.assert_close(norm.running_var.to(norm_ref.running_var.dtype), norm_ref.running_var, **tol)


def test_ties_pick_the_first_maximum():
    """Integer inputs and weights: exact sums and many equal values in a window; the window's place is the one
    torch's max_pool2d picks (its return_indices), and so the weights' gradient is torch's."""
    torch.manual_seed(7)
    x = torch.randint(-1, 2, (6, 1, 8, 10)).float()
    weight = torch.randint(-1, 2, (16, 1, 3, 3)).float().requires_grad_()
    norm, norm_ref = random_norm(16, 3), random_norm(16, 3)
    conv = F.conv2d(x, weight, padding=1)
    pooled_ref, indices = F.max_pool2d(conv, 2, return_indices=True)
    out, pooled, window = fused(x, weight, norm, False)
    assert torch.equal(pooled, pooled_ref)
    # the flat index within the 10-wide map of each window's element: row (2 oh + place // 2), column (2 ow + place % 2)
    oh = torch.arange(4).view(1, 1, 4, 1)
    ow = torch.arange(5).view(1, 1, 1, 5)
    place = window.long()
    assert torch.equal((2 * oh + place // 2) * 10 + 2 * ow + place % 2, indices)
    grad = torch.randint(-2, 3, out.shape).float()
    torch.testing.assert_close(gradients(out, grad, weight, norm)[0],
                               gradients(reference(x, weight, norm_ref, False), grad, weight, norm_ref)[0],
                               rtol=1e-5, atol=1e-5)


def test_opcheck_and_gradcheck():
    torch.manual_seed(1)
    x = torch.randn(3, 2, 6, 7, dtype=torch.float64)
    conv_weight = torch.randn(5, 2, 3, 3, dtype=torch.float64, requires_grad=True)
    weight = torch.rand(5, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(5, dtype=torch.float64, requires_grad=True)
    for training in (True, False):
        args = (x, conv_weight, weight, bias, torch.randn(5, dtype=torch.float64),
                torch.rand(5, dtype=torch.float64) + 0.5, training, 0.1, 1e-5)
        torch.library.opcheck(torch.ops.gpucore.conv3x3_maxpool_bn_relu, args)
        checked = lambda c, w, b: torch.ops.gpucore.conv3x3_maxpool_bn_relu(x, c, w, b, *args[4:])[0]  # noqa: E731
        assert torch.autograd.gradcheck(checked, (conv_weight, weight, bias))


def test_refuses_an_input_gradient_and_bad_arguments():
    norm = random_norm(4, 0)
    x = torch.randn(2, 1, 6, 6, requires_grad=True)
    weight = torch.randn(4, 1, 3, 3, requires_grad=True)
    out = fused(x, weight, norm, True)[0]
    with pytest.raises(RuntimeError, match="no gradient for its input"):
        out.sum().backward()
    with pytest.raises(RuntimeError, match=r"conv_weight must be C x 1 x 3 x 3"):
        fused(x.detach(), torch.randn(4, 2, 3, 3), norm, True)
    with pytest.raises(RuntimeError, match="conv_weight must be the input's dtype"):
        fused(x.detach(), weight.double(), norm, True)
    with pytest.raises(RuntimeError, match="one value per channel"):
        fused(x.detach(), torch.randn(5, 1, 3, 3), norm, True)
    with pytest.raises(RuntimeError, match="more than 1 value per channel"):
        fused(torch.randn(1, 1, 2, 3), torch.randn(4, 1, 3, 3), norm, True)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("in_channels", [1, 3])
def test_fast_cnn_first_block_matches_torch_modules(channels_last, in_channels):
    """FastCNN runs its first block as the op (and the others as maxpool_bn_relu); three training steps give the
    outputs, gradients, running statistics and memory formats of the network built from torch's modules."""
    torch.manual_seed(0)
    layout = torch.channels_last if channels_last else torch.contiguous_format
    plain = FastCNN(in_channels=in_channels, fused=False).to(memory_format=layout)
    model = FastCNN(in_channels=in_channels, fused=True).to(memory_format=layout)
    model.load_state_dict(plain.state_dict())
    x = torch.randn(16, in_channels, 28, 28).contiguous(memory_format=layout)
    assert "gpucore::conv3x3_maxpool_bn_relu" in ran_ops(model, x)
    model.load_state_dict(plain.state_dict())
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.01) for m in (plain, model)]
    for step in range(3):
        x = torch.randn(16, in_channels, 28, 28).contiguous(memory_format=layout)
        outs = []
        for net, optimizer in zip((plain, model), optimizers):
            net.train()
            optimizer.zero_grad()
            out = net(x)
            out.logsumexp(1).mean().backward()
            outs.append(out)
        torch.testing.assert_close(outs[1], outs[0], rtol=1e-4, atol=1e-4 * outs[0].abs().max().item())
        for (name, param), ref in zip(model.named_parameters(), plain.parameters()):
            torch.testing.assert_close(param.grad, ref.grad, rtol=1e-3, atol=1e-3 * ref.grad.abs().max().item(),
                                       msg=lambda message, name=name: f"{name}, step {step}: {message}")
        for optimizer in optimizers:
            optimizer.step()
    torch.testing.assert_close(model.state_dict(), plain.state_dict(), rtol=1e-3, atol=1e-4)
    model.eval()
    plain.eval()
    with torch.no_grad():
        x = torch.randn(8, in_channels, 28, 28).contiguous(memory_format=layout)
        torch.testing.assert_close(model(x), plain(x), rtol=1e-4, atol=1e-4)
        features = model.features[4:](conv_pool_norm_relu(model.features[0], model.features[2], x))
        assert features.is_contiguous(memory_format=layout)


def test_fast_cnn_under_bfloat16_autocast_fuses_the_first_block_in_float32():
    """Under CPU autocast the first block's op runs in float32 (faster there than its bfloat16 kernel and torch's
    bfloat16 layers, and more exact; fused_blocks.conv_pool_norm_relu), the other blocks' maxpool_bn_relu in
    bfloat16. Against the float32 network, the output and the first convolution's gradient are then no further off
    than the unfused bfloat16 network's."""
    torch.manual_seed(0)
    plain = FastCNN(fused=False).to(memory_format=torch.channels_last)
    model = FastCNN(fused=True).to(memory_format=torch.channels_last)
    model.load_state_dict(plain.state_dict())
    exact = copy.deepcopy(plain)
    x = torch.randn(16, 1, 28, 28)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ops = ran_ops(copy.deepcopy(model), x)
        seen = []  # the second block's input: the first block's output
        hooked = copy.deepcopy(model)
        hooked.features[4].register_forward_pre_hook(lambda module, args: seen.append(args[0].dtype))
        hooked(x)
    assert ops["gpucore::conv3x3_maxpool_bn_relu"] == 1 and ops["gpucore::maxpool_bn_relu"] == 2, ops
    assert seen == [torch.float32]
    results = []
    for net, autocast in ((exact, False), (plain, True), (model, True)):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = net(x)
        assert out.dtype == (torch.bfloat16 if autocast else torch.float32)
        out.float().logsumexp(1).sum().backward()
        results.append((out.float(), net.features[0].weight.grad.clone()))
    (out, grad), (plain_out, plain_grad), (fused_out, fused_grad) = results
    assert (fused_out - out).abs().max() <= (plain_out - out).abs().max()
    assert (fused_grad - grad).abs().max() <= (plain_grad - grad).abs().max()
    torch.testing.assert_close(fused_out, out, rtol=5e-2, atol=5e-2)


def test_fast_cnn_runs_torch_layers_where_the_op_must_not_run():
    """A hook on the first convolution, an input that needs a gradient (saliency), torch.fx tracing: the layers
    run one by one, the hook sees the convolution's output, and the result is the same."""
    torch.manual_seed(0)
    model = FastCNN().train()
    x = torch.randn(8, 1, 28, 28)
    seen = []
    handle = model.features[0].register_forward_hook(lambda module, args, out: seen.append(out.shape))
    assert "gpucore::conv3x3_maxpool_bn_relu" not in ran_ops(model, x)
    handle.remove()
    assert seen == [torch.Size([8, 32, 28, 28])]
    saliency = x.clone().requires_grad_()
    assert "gpucore::conv3x3_maxpool_bn_relu" not in ran_ops(model, saliency)
    model(saliency).sum().backward()
    assert saliency.grad is not None and saliency.grad.abs().sum() > 0
    model.eval()
    traced = torch.fx.symbolic_trace(model)
    with torch.no_grad():
        assert "gpucore::conv3x3_maxpool_bn_relu" in ran_ops(model, x)
        torch.testing.assert_close(traced(x), model(x), rtol=1e-4, atol=1e-5)
