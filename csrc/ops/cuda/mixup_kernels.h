#pragma once
// Launchers of the mix CUDA kernels (raw buffers on the current device), kept free of torch headers.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace gpucore::ops::cuda {

enum class MixType { kFloat32, kFloat64, kFloat16, kBFloat16 };

struct MixShape {
  int64_t size[4];       // N, C, H, W
  int64_t in_stride[4];  // elements
  int64_t out_stride[4];
};

// params: float32 N x kMixParams contiguous (ops/mixup.h); images and out of `type` with the shape's strides.
void launch_mix_inputs(const void* images, void* out, MixType type, const MixShape& shape, const float* params,
                       cudaStream_t stream);
// labels: int64 N; out: float32 N x classes contiguous.
void launch_mix_targets(const int64_t* labels, const float* params, float* out, int64_t n, int64_t classes, float on,
                        float off, cudaStream_t stream);

}  // namespace gpucore::ops::cuda
