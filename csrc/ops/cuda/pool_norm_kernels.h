#pragma once
// Launchers of gpucore::maxpool_bn_relu's CUDA kernels (raw buffers on the current device), kept free of torch
// headers. The per-channel buffers (weight, bias, running statistics in; the statistics used and the new running
// statistics out; the weight's and bias's gradients) are the math type: float (double for kFloat64).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/kernel_dtype.h"

namespace gpucore::ops::cuda {

using PoolNormDtypes = FloatingKernelDtypes;

// N x C x H x W in, N x C x H/2 x W/2 pooled (floor), contiguous or channels-last (both tensors alike).
struct PoolNormDims {
  int64_t batch, channels, height, width, pooled_height, pooled_width;
  bool channels_last;
};

struct PoolNormChannels {
  const void* weight;
  const void* bias;
  const void* running_mean;
  const void* running_var;
  void* save_mean;         // the mean used (the batch's when training, else the running one)
  void* save_invstd;       // 1 / sqrt(var + eps) of the variance used
  void* new_running_mean;  // training only: (1 - momentum) * running + momentum * the batch's
  void* new_running_var;   // training only: the same with the batch's unbiased variance
};

// Training: a block per channel sums the pooled values, then their squared distances to the mean.
void launch_maxpool_bn_relu(const void* input, void* pooled, void* out, const PoolNormChannels& channels,
                            bool training, double momentum, double eps, const PoolNormDims& dims, KernelDtype type,
                            cudaStream_t stream);

// grad_input: every element written (each window's four, the odd last row and column zero).
void launch_maxpool_bn_relu_backward(const void* grad_out, const void* input, const void* pooled, const void* out,
                                     const void* weight, const void* save_mean, const void* save_invstd,
                                     void* grad_input, void* grad_weight, void* grad_bias, bool training,
                                     const PoolNormDims& dims, KernelDtype type, cudaStream_t stream);

}  // namespace gpucore::ops::cuda
