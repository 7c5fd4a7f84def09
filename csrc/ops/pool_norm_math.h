#pragma once
// The per-element math of gpucore::maxpool_bn_relu (pool_norm.h), one definition for its CPU and CUDA kernels;
// free of torch headers so nvcc compiles it.
#include "ops/host_device.h"

namespace gpucore::ops {

// The element of a 2x2 window that torch's max_pool2d takes (CPU and CUDA alike): the window read row by row,
// a value replaces the maximum when it is greater or NaN, so ties go to the first maximum and NaN wins.
// 0: (0, 0), 1: (0, 1), 2: (1, 0), 3: (1, 1); *max its value.
template <typename M>
GPUCORE_HOST_DEVICE inline int window_argmax(M a, M b, M c, M d, M* max) {
  int index = 0;
  M best = a;
  if ((b > best) | (b != b)) best = b, index = 1;
  if ((c > best) | (c != c)) best = c, index = 2;
  if ((d > best) | (d != d)) best = d, index = 3;
  *max = best;
  return index;
}

// The window's maximum alone, by the same rule.
template <typename M>
GPUCORE_HOST_DEVICE inline M window_max(M a, M b, M c, M d) {
  M best = a;
  best = ((b > best) | (b != b)) ? b : best;
  best = ((c > best) | (c != c)) ? c : best;
  best = ((d > best) | (d != d)) ? d : best;
  return best;
}

// The normalisation and ReLU of one pooled value y: max(y * scale + shift, 0), scale = weight * invstd and
// shift = bias - mean * scale per channel. NaN stays NaN, as torch's relu keeps it.
template <typename M>
GPUCORE_HOST_DEVICE inline M norm_relu(M y, M scale, M shift) {
  const M z = y * scale + shift;
  return (z > M(0)) | (z != z) ? z : M(0);
}

// The gradient reaching one pooled value y, torch's batch-norm backward after the ReLU's mask (out > 0):
// training: (g - mean_g - (y - mean) * k) * gain, with mean_g = sum(g) / count, k = sum(g * (y - mean)) *
// invstd^2 / count, gain = weight * invstd; evaluation (running statistics): g * gain (mean_g = k = 0).
template <typename M>
GPUCORE_HOST_DEVICE inline M pooled_grad(M g, bool active, M y, M mean, M mean_g, M k, M gain) {
  const M masked = active ? g : M(0);
  return (masked - mean_g - (y - mean) * k) * gain;
}

}  // namespace gpucore::ops
