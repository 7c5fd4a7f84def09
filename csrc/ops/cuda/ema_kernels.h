#pragma once
// Launcher of the gpucore::ema_update CUDA kernel (raw buffers on the current device), kept free of torch headers.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/ema_math.h"

namespace gpucore::ops::cuda {

// What a chunk's buffers hold: floating-point values to average, or bytes to copy (the other dtypes).
enum class EmaType { kFloat32, kFloat64, kFloat16, kBFloat16, kBytes };

// Up to kEmaChunkSize tensors of one EmaType, passed to one launch by value (as torch's multi_tensor_apply
// does): a model's state takes a few launches, not one per tensor.
constexpr int kEmaChunkSize = 48;
struct EmaChunk {
  void* averages[kEmaChunkSize];
  const void* sources[kEmaChunkSize];
  int64_t sizes[kEmaChunkSize];  // elements (bytes for kBytes)
  int count;
};

void launch_ema_update(const EmaChunk& chunk, EmaType type, const float* counters, const EmaParams& params,
                       cudaStream_t stream);

}  // namespace gpucore::ops::cuda
