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
def _augment(images, offsets, flips, padding, mean, std, dtype):
    return images.new_empty(images.shape, dtype=dtype)
