"""FastCNN's blocks as single ops, run on a torch BatchNorm2d's own parameters and buffers: max-pool 2x2 -> the
BatchNorm -> ReLU (gpucore::maxpool_bn_relu, csrc/ops/fused/pool_norm.h), and a 3x3 convolution before them too
(gpucore::conv3x3_maxpool_bn_relu, csrc/ops/fused/conv_pool_norm.h). The module's running statistics and
num_batches_tracked advance as BatchNorm2d's do, so a network keeps torch's layers (its state_dict, its hooks, its
layer-by-layer forward) and only its forward chooses the op. Each `*_fusable` check says where the op gives what the
torch layers give; the caller runs the layers themselves elsewhere."""
from __future__ import annotations

import torch
from torch import nn

from ..ops import CONV_POOL_NORM_DEVICES, POOL_NORM_DEVICES


def traced(x) -> bool:
    """Whether the forward is being traced or exported (torch.fx, TorchScript, ONNX, torch.export): those see the
    torch layers, never the fused forms."""
    return (isinstance(x, torch.fx.Proxy) or torch.jit.is_scripting() or torch.onnx.is_in_onnx_export()
            or torch.compiler.is_exporting())


def pool_norm_fusable(norm: nn.BatchNorm2d, x) -> bool:
    """Whether pool_norm_relu(norm, x) gives MaxPool2d(2) -> norm -> ReLU: an affine BatchNorm with running statistics
    on a 4-d input of a floating dtype on a device with the op's kernel, not traced()."""
    if traced(x):
        return False
    return (isinstance(norm, nn.BatchNorm2d) and norm.affine and norm.track_running_stats and x.dim() == 4
            and x.dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64)
            and norm.weight.dtype in (x.dtype, torch.float32) and x.device.type in POOL_NORM_DEVICES)


def pool_norm_relu(norm: nn.BatchNorm2d, x):
    """MaxPool2d(2), then `norm`, then ReLU as one op; the caller checks pool_norm_fusable(norm, x) first."""
    out, _pooled, _mean, _invstd, running_mean, running_var = torch.ops.gpucore.maxpool_bn_relu(
        x, norm.weight, norm.bias, norm.running_mean, norm.running_var, norm.training, _running_factor(norm),
        norm.eps)
    _keep_running(norm, running_mean, running_var)
    return out


def conv_fusable(conv: nn.Module, norm: nn.BatchNorm2d, x) -> bool:
    """Whether conv_pool_norm_relu(conv, norm, x) gives conv -> MaxPool2d(2) -> norm -> ReLU: a 3x3 convolution
    (stride 1, padding 1, no bias) of an input with few channels (an image's: at most 4) that needs no gradient,
    float32 under autocast (the op then runs in float32) or the convolution's dtype without, on a device with the op's
    kernel (the CPU's alone)."""
    if not (isinstance(conv, nn.Conv2d) and pool_norm_fusable(norm, x)) or x.requires_grad:
        return False
    if not (conv.kernel_size == (3, 3) and conv.stride == (1, 1) and conv.padding == (1, 1)
            and conv.dilation == (1, 1) and conv.groups == 1 and conv.bias is None
            and conv.padding_mode == "zeros" and x.shape[1] == conv.in_channels <= 4):
        return False
    if torch.is_autocast_enabled(x.device.type):
        # Not the casts autocast gives conv2d: on the image's few channels the float32 kernel is faster than the op's
        # bfloat16 kernel and than torch's bfloat16 convolution and pooling (the speedrun's first block, forward and
        # backward, 2-core AMD EPYC with AVX512-BF16, 2026-11-28: 3.3 ms against 15.4 and 11-12 ms), and more exact.
        # The block's output is then float32; the next convolution casts it as autocast casts any input.
        same_dtype = x.dtype == conv.weight.dtype == torch.float32
    else:
        same_dtype = x.dtype == conv.weight.dtype
    return same_dtype and x.device.type in CONV_POOL_NORM_DEVICES


def conv_pool_norm_relu(conv: nn.Conv2d, norm: nn.BatchNorm2d, x):
    """conv(x), then MaxPool2d(2), `norm` and ReLU, as one op whose convolution's full-size output is never written;
    the caller checks conv_fusable(conv, norm, x) first (under autocast: in float32)."""
    out, *_saved, running_mean, running_var = torch.ops.gpucore.conv3x3_maxpool_bn_relu(
        x, conv.weight, norm.weight, norm.bias, norm.running_mean, norm.running_var, norm.training,
        _running_factor(norm), norm.eps)
    _keep_running(norm, running_mean, running_var)
    return out


def _running_factor(norm: nn.BatchNorm2d) -> float:
    """The running statistics' momentum for this call, num_batches_tracked advanced as BatchNorm2d's."""
    factor = 0.0 if norm.momentum is None else norm.momentum
    if norm.training and norm.track_running_stats and norm.num_batches_tracked is not None:
        norm.num_batches_tracked.add_(1)
        if norm.momentum is None:  # a cumulative moving average, as BatchNorm2d's
            factor = 1.0 / float(norm.num_batches_tracked)
    return factor


def _keep_running(norm: nn.BatchNorm2d, running_mean, running_var):
    if norm.training:
        with torch.no_grad():
            torch._foreach_copy_([norm.running_mean, norm.running_var], [running_mean, running_var])
