"""Fake (meta) kernels of gpucore's torch ops: their output shapes without running them, for
torch.compile, FakeTensor and torch.library.opcheck. The real kernels are C++ (csrc/ops)."""
import torch


@torch.library.register_fake("gpucore::cam_weights")
def _cam_weights(activations, gradients, method):
    return activations.new_empty(activations.shape[:2], dtype=torch.float32)


@torch.library.register_fake("gpucore::cam_weighted_sum")
def _cam_weighted_sum(activations, weights):
    return activations.new_empty((activations.shape[0], *activations.shape[2:]), dtype=torch.float32)


@torch.library.register_fake("gpucore::cam_normalize")
def _cam_normalize(cams, size):
    return cams.new_empty((cams.shape[0], *size) if size else cams.shape, dtype=torch.float32)


@torch.library.register_fake("gpucore::cam_overlay")
def _cam_overlay(images, cams, alpha):
    return torch.empty_like(images)


@torch.library.register_fake("gpucore::augment")
def _augment(images, offsets, flips, mean, std, dtype):
    return images.new_empty(images.shape, dtype=dtype)


@torch.library.register_fake("gpucore::color_ops")
def _color_ops(images, codes, magnitudes):
    return images.new_empty(images.shape)


@torch.library.register_fake("gpucore::erase")
def _erase(images, boxes, fill, noise_seeds):
    return images.new_empty(images.shape)


@torch.library.register_fake("gpucore::crop")
def _crop(images, offsets, flips, size, fill):
    return images.new_empty((images.shape[0], images.shape[1], *size))


@torch.library.register_fake("gpucore::resized_crop")
def _resized_crop(images, boxes, size, interpolation, antialias):
    return images.new_empty((images.shape[0], images.shape[1], *size))


@torch.library.register_fake("gpucore::affine")
def _affine(images, matrices, interpolation, fill):
    return torch.empty_like(images)


@torch.library.register_fake("gpucore::accumulate_metrics")
def _accumulate_metrics(sums, output, target, loss, top_k, ignore_index=-100):
    return None  # adds into sums in place


@torch.library.register_fake("gpucore::count_step")
def _count_step(counters, found_inf):
    return None  # advances counters, clears found_inf, in place


@torch.library.register_fake("gpucore::learning_rate")
def _learning_rate(step, lr, schedule):
    return None  # writes lr in place


@torch.library.register_fake("gpucore::next_indices")
def _next_indices(order, cursor, index):
    return None  # fills index, advances cursor, in place


@torch.library.register_fake("gpucore::mix_inputs")
def _mix_inputs(inputs, params):
    return torch.empty_like(inputs)


@torch.library.register_fake("gpucore::mix_targets")
def _mix_targets(targets, params, num_classes, smoothing):
    return targets.new_empty((targets.shape[0], num_classes), dtype=torch.float32)


@torch.library.register_fake("gpucore::ema_update")
def _ema_update(averages, sources, counters, decay, warmup, warmup_gamma, warmup_power):
    return None  # moves averages toward sources, in place


def _pool_norm_format(input):
    return torch._prims_common.suggest_memory_format(input)  # the C++ kernels' choice: channels-last or contiguous


@torch.library.register_fake("gpucore::maxpool_bn_relu")
def _maxpool_bn_relu(input, weight, bias, running_mean, running_var, training, momentum, eps):
    n, c, h, w = input.shape
    like = dict(dtype=input.dtype, device=input.device, memory_format=_pool_norm_format(input))
    stats = dict(dtype=torch.float64 if input.dtype == torch.float64 else torch.float32, device=input.device)
    kept = c if training else 0
    return (torch.empty((n, c, h // 2, w // 2), **like), torch.empty((n, c, h // 2, w // 2), **like),
            torch.empty((c,), **stats), torch.empty((c,), **stats), running_mean.new_empty((kept,)),
            running_var.new_empty((kept,)))


@torch.library.register_fake("gpucore::maxpool_bn_relu_backward")
def _maxpool_bn_relu_backward(grad_out, input, pooled, out, weight, save_mean, save_invstd, training):
    return (torch.empty(input.shape, dtype=input.dtype, device=input.device, memory_format=_pool_norm_format(input)),
            weight.new_empty(weight.shape), weight.new_empty(weight.shape))


@torch.library.register_fake("gpucore::conv3x3_maxpool_bn_relu")
def _conv3x3_maxpool_bn_relu(input, conv_weight, weight, bias, running_mean, running_var, training, momentum, eps):
    n, _, h, w = input.shape
    c = conv_weight.shape[0]
    channels_last = torch.channels_last in (_pool_norm_format(input), _pool_norm_format(conv_weight))
    out_format = torch.channels_last if channels_last else torch.contiguous_format
    size = (n, c, h // 2, w // 2)
    stats = dict(dtype=torch.float64 if input.dtype == torch.float64 else torch.float32, device=input.device)
    kept = c if training else 0
    return (input.new_empty(size).contiguous(memory_format=out_format),
            input.new_empty(size).contiguous(memory_format=torch.channels_last),
            input.new_empty(size, dtype=torch.uint8).contiguous(memory_format=torch.channels_last),
            torch.empty((c,), **stats), torch.empty((c,), **stats), running_mean.new_empty((kept,)),
            running_var.new_empty((kept,)))


@torch.library.register_fake("gpucore::conv3x3_maxpool_bn_relu_backward")
def _conv3x3_maxpool_bn_relu_backward(grad_out, input, conv_weight, pooled, window, out, weight, save_mean,
                                      save_invstd, training):
    return (conv_weight.new_empty(conv_weight.shape).contiguous(memory_format=_pool_norm_format(conv_weight)),
            weight.new_empty(weight.shape), weight.new_empty(weight.shape))


def _kernel_devices(op: str) -> frozenset:
    """The device types gpucore op `op` has kernels for ('cpu'; 'cuda' in a CUDA build)."""
    return frozenset(device for device, key in (("cpu", "CPU"), ("cuda", "CUDA"))
                     if torch._C._dispatch_has_kernel_for_dispatch_key(f"gpucore::{op}", key))


# The device types of the two blocks' kernels, read once: sets torch.compile reads as constants (FastCNN runs torch's
# layers elsewhere: models/fused_blocks.py). conv3x3_maxpool_bn_relu has a CPU kernel only.
POOL_NORM_DEVICES = _kernel_devices("maxpool_bn_relu")
CONV_POOL_NORM_DEVICES = _kernel_devices("conv3x3_maxpool_bn_relu")


# maxpool_bn_relu's gradient: of out only (pooled, the statistics and the new running statistics are not
# differentiable; they are what the backward and the caller's buffers need).
def _maxpool_bn_relu_setup(ctx, inputs, output):
    input, weight, _bias, _running_mean, _running_var, training, _momentum, _eps = inputs
    out, pooled, save_mean, save_invstd = output[:4]
    ctx.save_for_backward(input, pooled, out, weight, save_mean, save_invstd)
    ctx.training = training
    ctx.set_materialize_grads(False)  # no zero-filled gradients of the outputs only the backward reads (pooled, ...)


def _maxpool_bn_relu_grad(ctx, grad_out, *_unused):
    if grad_out is None:
        return (None,) * 8
    input, pooled, out, weight, save_mean, save_invstd = ctx.saved_tensors
    grad_input, grad_weight, grad_bias = torch.ops.gpucore.maxpool_bn_relu_backward(
        grad_out, input, pooled, out, weight, save_mean, save_invstd, ctx.training)
    return grad_input, grad_weight, grad_bias, None, None, None, None, None


torch.library.register_autograd("gpucore::maxpool_bn_relu", _maxpool_bn_relu_grad,
                                setup_context=_maxpool_bn_relu_setup)


# conv3x3_maxpool_bn_relu's gradient: of out only, for the convolution's and the batch norm's weights; the input's
# is not computed (the op is a first layer's), so a graph that needs it is refused rather than given none.
def _conv3x3_maxpool_bn_relu_setup(ctx, inputs, output):
    input, conv_weight, weight, _bias, _running_mean, _running_var, training, _momentum, _eps = inputs
    out, pooled, window, save_mean, save_invstd = output[:5]
    ctx.save_for_backward(input, conv_weight, pooled, window, out, weight, save_mean, save_invstd)
    ctx.training = training
    ctx.set_materialize_grads(False)  # as _maxpool_bn_relu_setup


def _conv3x3_maxpool_bn_relu_grad(ctx, grad_out, *_unused):
    if ctx.needs_input_grad[0]:
        raise RuntimeError("gpucore::conv3x3_maxpool_bn_relu computes no gradient for its input (a first layer's "
                           "input needs none); run the convolution, max-pool, batch norm and ReLU as torch's ops "
                           "where the input requires grad")
    if grad_out is None:
        return (None,) * 9
    grad_conv, grad_weight, grad_bias = torch.ops.gpucore.conv3x3_maxpool_bn_relu_backward(
        grad_out, *ctx.saved_tensors, ctx.training)
    return None, grad_conv, grad_weight, grad_bias, None, None, None, None, None


torch.library.register_autograd("gpucore::conv3x3_maxpool_bn_relu", _conv3x3_maxpool_bn_relu_grad,
                                setup_context=_conv3x3_maxpool_bn_relu_setup)
