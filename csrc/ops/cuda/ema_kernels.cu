#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "ops/cuda/device_values.h"
#include "ops/cuda/ema_kernels.h"
#include "ops/cuda/kernel_launch.h"

namespace gpucore::ops::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocksPerTensor = 1024;

// Half, bfloat16 and float average in float32, as torch's lerp (device_values.h); double in double.

// blockIdx.y: the chunk's tensor; blocks along x stride over its elements. Every thread reads the weight from
// the counters (a skipped step returns at once), so no host value is needed.
template <typename T>
__global__ void ema_lerp_kernel(EmaChunk chunk, const float* counters, EmaParams params) {
  if (counters[2] > 0.0f) return;
  using M = decltype(to_math(T()));
  const M weight = static_cast<M>(ema_weight(params, counters));
  T* average = static_cast<T*>(chunk.averages[blockIdx.y]);
  const T* source = static_cast<const T*>(chunk.sources[blockIdx.y]);
  const int64_t size = chunk.sizes[blockIdx.y];
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < size;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    store(average + i, lerp_toward<M>(to_math(average[i]), to_math(source[i]), weight));
  }
}

__global__ void ema_copy_kernel(EmaChunk chunk, const float* counters) {
  if (counters[2] > 0.0f) return;
  unsigned char* average = static_cast<unsigned char*>(chunk.averages[blockIdx.y]);
  const unsigned char* source = static_cast<const unsigned char*>(chunk.sources[blockIdx.y]);
  const int64_t size = chunk.sizes[blockIdx.y];
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < size;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    average[i] = source[i];
  }
}

}  // namespace

void launch_ema_update(const EmaChunk& chunk, KernelDtype type, const float* counters, const EmaParams& params,
                       cudaStream_t stream) {
  if (chunk.count == 0) return;
  int64_t largest = 1;
  for (int i = 0; i < chunk.count; ++i) largest = chunk.sizes[i] > largest ? chunk.sizes[i] : largest;
  const int64_t wanted = (largest + kThreads - 1) / kThreads;
  const dim3 grid(static_cast<unsigned>(wanted < kMaxBlocksPerTensor ? wanted : kMaxBlocksPerTensor),
                  static_cast<unsigned>(chunk.count));
  EmaDtypes::dispatch(type, [&](auto element) {
    using T = typename decltype(element)::type;
    if constexpr (std::is_same_v<T, KernelElement<KernelDtype::kBytes>::type>) {
      GPUCORE_LAUNCH(ema_copy_kernel, grid, kThreads, 0, stream, chunk, counters);
    } else {
      GPUCORE_LAUNCH(ema_lerp_kernel<T>, grid, kThreads, 0, stream, chunk, counters, params);
    }
  });
}

}  // namespace gpucore::ops::cuda
