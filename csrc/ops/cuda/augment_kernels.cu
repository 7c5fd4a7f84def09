#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "ops/cuda/augment_kernels.h"
#include "ops/cuda/kernel_launch.h"

namespace gpucore::ops::cuda {
namespace {

__device__ inline void store(float* out, float value) { *out = value; }
__device__ inline void store(__half* out, float value) { *out = __float2half_rn(value); }
__device__ inline void store(__nv_bfloat16* out, float value) { *out = __float2bfloat16_rn(value); }

template <typename In, typename Out>
__global__ void augment_kernel(const In* images, const int64_t* offsets, const bool* flips, Out* out, int64_t total,
                               int64_t channels, int64_t h, int64_t w, ChannelAffine affine) {
  const int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (index >= total) return;
  const int64_t x = index % w, y = (index / w) % h, plane = index / (h * w);
  const int64_t image = plane / channels, c = plane % channels;
  const int64_t sy = y + offsets[image * 2];
  const int64_t sx = (flips[image] ? w - 1 - x : x) + offsets[image * 2 + 1];
  const float value = (sy >= 0 && sy < h && sx >= 0 && sx < w) ? static_cast<float>(images[(plane * h + sy) * w + sx]) : 0.0f;
  store(out + index, value * affine.scale[c] + affine.shift[c]);
}

template <typename Out>
void launch_for(const void* images, bool is_uint8, const int64_t* offsets, const bool* flips, void* out, int64_t total,
                int64_t channels, int64_t h, int64_t w, ChannelAffine affine, cudaStream_t stream) {
  constexpr int threads = 256;
  const unsigned blocks = static_cast<unsigned>((total + threads - 1) / threads);
  Out* typed_out = static_cast<Out*>(out);
  if (is_uint8) {
    GPUCORE_LAUNCH(augment_kernel, blocks, threads, 0, stream, static_cast<const uint8_t*>(images), offsets, flips,
                   typed_out, total, channels, h, w, affine);
  } else {
    GPUCORE_LAUNCH(augment_kernel, blocks, threads, 0, stream, static_cast<const float*>(images), offsets, flips,
                   typed_out, total, channels, h, w, affine);
  }
}

}  // namespace

void launch_augment(const void* images, bool is_uint8, const int64_t* offsets, const bool* flips, void* out,
                    KernelDtype out_type, int64_t n, int64_t channels, int64_t h, int64_t w, ChannelAffine affine,
                    cudaStream_t stream) {
  const int64_t total = n * channels * h * w;
  if (total == 0) return;
  AugmentOutDtypes::dispatch(out_type, [&](auto element) {
    launch_for<typename decltype(element)::type>(images, is_uint8, offsets, flips, out, total, channels, h, w, affine,
                                                 stream);
  });
}

}  // namespace gpucore::ops::cuda
