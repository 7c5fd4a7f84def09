#pragma once
// What several kernels compute with: the conversions (half, bfloat16 and float in float32, as torch's kernels;
// double in double) and a sum over a thread block.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace gpucore::ops::cuda {

__device__ inline float to_math(__half v) { return __half2float(v); }
__device__ inline float to_math(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float to_math(float v) { return v; }
__device__ inline double to_math(double v) { return v; }
__device__ inline void store(__half* out, float v) { *out = __float2half(v); }
__device__ inline void store(__nv_bfloat16* out, float v) { *out = __float2bfloat16(v); }
__device__ inline void store(float* out, float v) { *out = v; }
__device__ inline void store(double* out, double v) { *out = v; }

// Sum of `value` over the block of `Threads` threads (a power of two, blockDim.x); every thread gets the result.
template <int Threads, typename M>
__device__ M block_sum(M value) {
  __shared__ M partial[Threads];
  partial[threadIdx.x] = value;
  __syncthreads();
  for (unsigned stride = Threads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  const M total = partial[0];
  __syncthreads();
  return total;
}

}  // namespace gpucore::ops::cuda
