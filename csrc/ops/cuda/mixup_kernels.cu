#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "ops/cuda/mixup_kernels.h"
#include "ops/cuda/kernel_launch.h"
#include "ops/mix_params.h"

namespace gpucore::ops::cuda {
namespace {

template <typename T> struct Math { using type = float; };
template <> struct Math<double> { using type = double; };

__device__ inline float load(const float* p) { return *p; }
__device__ inline double load(const double* p) { return *p; }
__device__ inline float load(const __half* p) { return __half2float(*p); }
__device__ inline float load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ inline void store(float* p, float v) { *p = v; }
__device__ inline void store(double* p, double v) { *p = v; }
__device__ inline void store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ inline void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
// Each product rounded before the sum (no fused multiply-add), as timm's x * lam + x.flip(0) * (1 - lam).
__device__ inline float weighted_sum(float a, float wa, float b, float wb) {
  return __fadd_rn(__fmul_rn(a, wa), __fmul_rn(b, wb));
}
__device__ inline double weighted_sum(double a, double wa, double b, double wb) {
  return __dadd_rn(__dmul_rn(a, wa), __dmul_rn(b, wb));
}

template <typename T>
__global__ void mix_inputs_kernel(const T* images, T* out, MixShape shape, const float* params, int64_t total) {
  const int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (index >= total) return;
  const int64_t w = shape.size[3], h = shape.size[2], channels = shape.size[1], n = shape.size[0];
  const int64_t x = index % w, y = (index / w) % h, c = (index / (w * h)) % channels, i = index / (w * h * channels);
  const int64_t p = n - 1 - i;
  const int64_t* s = shape.in_stride;
  const int64_t at = c * s[1] + y * s[2] + x * s[3];
  const float* row = params + i * kMixParams;
  using M = typename Math<T>::type;
  const M value = load(images + i * s[0] + at);
  const bool inside = y >= static_cast<int64_t>(row[kBoxY0]) && y < static_cast<int64_t>(row[kBoxY1]) &&
                      x >= static_cast<int64_t>(row[kBoxX0]) && x < static_cast<int64_t>(row[kBoxX1]);
  const M mixed = inside ? weighted_sum(value, static_cast<M>(row[kInputSelf]), static_cast<M>(load(images + p * s[0] + at)),
                                        static_cast<M>(row[kInputPartner]))
                         : value;
  const int64_t* o = shape.out_stride;
  store(out + i * o[0] + c * o[1] + y * o[2] + x * o[3], mixed);
}

__global__ void mix_targets_kernel(const int64_t* labels, const float* params, float* out, int64_t n, int64_t classes,
                                   float on, float off) {
  const int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (index >= n * classes) return;
  const int64_t i = index / classes, c = index % classes;
  const float* row = params + i * kMixParams;
  out[index] = weighted_sum(c == labels[i] ? on : off, row[kTargetSelf], c == labels[n - 1 - i] ? on : off,
                            row[kTargetPartner]);
}

template <typename T>
void launch_for(const void* images, void* out, const MixShape& shape, const float* params, cudaStream_t stream) {
  const int64_t total = shape.size[0] * shape.size[1] * shape.size[2] * shape.size[3];
  if (total == 0) return;
  constexpr int threads = 256;
  const unsigned blocks = static_cast<unsigned>((total + threads - 1) / threads);
  GPUCORE_LAUNCH(mix_inputs_kernel, blocks, threads, 0, stream, static_cast<const T*>(images), static_cast<T*>(out),
                 shape, params, total);
}

}  // namespace

void launch_mix_inputs(const void* images, void* out, KernelDtype type, const MixShape& shape, const float* params,
                       cudaStream_t stream) {
  MixDtypes::dispatch(type, [&](auto element) {
    launch_for<typename decltype(element)::type>(images, out, shape, params, stream);
  });
}

void launch_mix_targets(const int64_t* labels, const float* params, float* out, int64_t n, int64_t classes, float on,
                        float off, cudaStream_t stream) {
  const int64_t total = n * classes;
  if (total == 0) return;
  constexpr int threads = 256;
  const unsigned blocks = static_cast<unsigned>((total + threads - 1) / threads);
  GPUCORE_LAUNCH(mix_targets_kernel, blocks, threads, 0, stream, labels, params, out, n, classes, on, off);
}

}  // namespace gpucore::ops::cuda
