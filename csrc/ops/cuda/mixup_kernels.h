#pragma once
// Launchers of the mix CUDA kernels (raw buffers on the current device), kept free of torch headers.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/kernel_dtype.h"

namespace gpucore::ops::cuda {

using MixDtypes = FloatingKernelDtypes;

struct MixShape {
  int64_t size[4];       // N, C, H, W
  int64_t in_stride[4];  // elements
  int64_t out_stride[4];
};

// params: float32 N x kMixParams contiguous (ops/augment/mixup.h); images and out of `type` (one of MixDtypes) with the
// shape's strides.
void launch_mix_inputs(const void* images, void* out, KernelDtype type, const MixShape& shape, const float* params,
                       cudaStream_t stream);
// labels: int64 N; out: float32 N x classes contiguous.
void launch_mix_targets(const int64_t* labels, const float* params, float* out, int64_t n, int64_t classes, float on,
                        float off, cudaStream_t stream);

}  // namespace gpucore::ops::cuda
