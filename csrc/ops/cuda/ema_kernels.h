#pragma once
// Launcher of the gpucore::ema_update CUDA kernel (raw buffers on the current device), kept free of torch headers.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/kernel_dtype.h"
#include "ops/ema_math.h"

namespace gpucore::ops::cuda {

// What a chunk's buffers hold: floating-point values to average, or bytes to copy (kBytes: the other dtypes).
using EmaDtypes = KernelDtypes<KernelDtype::kFloat32, KernelDtype::kFloat64, KernelDtype::kFloat16,
                               KernelDtype::kBFloat16, KernelDtype::kBytes>;

// Up to kEmaChunkSize tensors of one of EmaDtypes, passed to one launch by value (as torch's multi_tensor_apply
// does): a model's state takes a few launches, not one per tensor.
constexpr int kEmaChunkSize = 48;
struct EmaChunk {
  void* averages[kEmaChunkSize];
  const void* sources[kEmaChunkSize];
  int64_t sizes[kEmaChunkSize];  // elements (bytes for kBytes)
  int count;
};

void launch_ema_update(const EmaChunk& chunk, KernelDtype type, const float* counters, const EmaParams& params,
                       cudaStream_t stream);

}  // namespace gpucore::ops::cuda
