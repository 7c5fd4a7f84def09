#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "ops/color_math.h"
#include "ops/cuda/color_kernels.h"
#include "ops/cuda/kernel_launch.h"

namespace gpucore::ops::cuda {
namespace {

constexpr int kThreads = 256;

// One block adjusts one image, step after step; the steps that need the whole image (contrast's mean,
// autocontrast's range, equalize's histogram, sharpness's neighbours) reduce in shared memory.
__global__ void color_ops_kernel(uint8_t* images, uint8_t* scratch, const int64_t* codes, const double* magnitudes,
                                 int64_t steps, int64_t channels, int64_t h, int64_t w) {
  __shared__ int32_t histogram[256];
  __shared__ uint8_t lut[256];
  __shared__ unsigned long long total;
  __shared__ int lowest, highest;
  const int64_t sample = blockIdx.x, plane = h * w;
  uint8_t* image = images + sample * channels * plane;
  uint8_t* source = scratch + sample * channels * plane;
  const int64_t first = threadIdx.x, stride = blockDim.x;
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t code = codes[sample * steps + k];
    const double magnitude = magnitudes[sample * steps + k];
    const float value = static_cast<float>(magnitude);  // a Python float as torch multiplies or compares it
    GPUCORE_KERNEL_ASSERT(code >= 0 && code < kColorOpCount);
    switch (code) {
      case kColorBrightness:
        for (int64_t i = first; i < channels * plane; i += stride) {
          image[i] = clamp_to_uint8(static_cast<float>(image[i]) * value);
        }
        break;
      case kColorContrast: {
        if (threadIdx.x == 0) total = 0;
        __syncthreads();
        unsigned long long local = 0;
        for (int64_t i = first; i < plane; i += stride) {
          local += channels == 3 ? static_cast<unsigned long long>(
                                       floored_grayscale(image[i], image[plane + i], image[2 * plane + i]))
                                 : image[i];
        }
        atomicAdd(&total, local);
        __syncthreads();
        const float mean = static_cast<float>(total) / static_cast<float>(plane), weight = blend_weight(magnitude);
        for (int64_t i = first; i < channels * plane; i += stride) image[i] = blend(image[i], mean, value, weight);
        break;
      }
      case kColorSaturation:
        if (channels != 3) break;
        for (int64_t i = first; i < plane; i += stride) {
          const float gray = floored_grayscale(image[i], image[plane + i], image[2 * plane + i]);
          const float weight = blend_weight(magnitude);
          for (int64_t c = 0; c < 3; ++c) image[c * plane + i] = blend(image[c * plane + i], gray, value, weight);
        }
        break;
      case kColorHue:
        if (channels != 3) break;
        for (int64_t i = first; i < plane; i += stride) {
          shift_hue(image[i], image[plane + i], image[2 * plane + i], value);
        }
        break;
      case kColorSharpness: {
        if (h <= 2 || w <= 2) break;
        for (int64_t i = first; i < channels * plane; i += stride) source[i] = image[i];
        __syncthreads();
        const float weight = blend_weight(magnitude);
        const int64_t inner_w = w - 2, inner = (h - 2) * inner_w;
        for (int64_t i = first; i < channels * inner; i += stride) {
          const int64_t c = i / inner, y = 1 + (i % inner) / inner_w, x = 1 + i % inner_w;
          const uint8_t* centre = source + c * plane + y * w + x;
          image[c * plane + y * w + x] = sharpen([&](int dy, int dx) { return centre[dy * w + dx]; }, weight);
        }
        break;
      }
      case kColorPosterize: {
        const int bits = static_cast<int>(magnitude);
        for (int64_t i = first; i < channels * plane; i += stride) image[i] = posterize(image[i], bits);
        break;
      }
      case kColorSolarize:
        for (int64_t i = first; i < channels * plane; i += stride) image[i] = solarize(image[i], value);
        break;
      case kColorAutocontrast:
        for (int64_t c = 0; c < channels; ++c) {
          uint8_t* values = image + c * plane;
          if (threadIdx.x == 0) lowest = 255, highest = 0;
          __syncthreads();
          int lo = 255, hi = 0;
          for (int64_t i = first; i < plane; i += stride) lo = min(lo, static_cast<int>(values[i])), hi = max(hi, static_cast<int>(values[i]));
          atomicMin(&lowest, lo);
          atomicMax(&highest, hi);
          __syncthreads();
          const Autocontrast params = autocontrast_params(static_cast<float>(lowest), static_cast<float>(highest));
          for (int64_t i = first; i < plane; i += stride) values[i] = autocontrast(values[i], params);
          __syncthreads();
        }
        break;
      case kColorEqualize:
        for (int64_t c = 0; c < channels; ++c) {
          uint8_t* values = image + c * plane;
          for (int i = threadIdx.x; i < 256; i += blockDim.x) histogram[i] = 0;
          __syncthreads();
          for (int64_t i = first; i < plane; i += stride) atomicAdd(&histogram[values[i]], 1);
          __syncthreads();
          if (threadIdx.x == 0) {
            const int64_t step = equalize_step(histogram, plane);
            int64_t below = 0;
            lut[0] = 0;
            for (int v = 1; v < 256; ++v) {
              below += histogram[v - 1];
              lut[v] = step == 0 ? static_cast<uint8_t>(v) : equalize_entry(below, step);
            }
          }
          __syncthreads();
          for (int64_t i = first; i < plane; i += stride) values[i] = lut[values[i]];
          __syncthreads();
        }
        break;
      case kColorInvert:
        for (int64_t i = first; i < channels * plane; i += stride) image[i] = static_cast<uint8_t>(255 - image[i]);
        break;
      case kColorGrayscale:
        if (channels != 3) break;
        for (int64_t i = first; i < plane; i += stride) {
          const auto gray = static_cast<uint8_t>(grayscale(image[i], image[plane + i], image[2 * plane + i]));
          image[i] = image[plane + i] = image[2 * plane + i] = gray;
        }
        break;
      default:
        break;  // kColorIdentity
    }
    __syncthreads();
  }
}

__device__ inline void store(float* out, float value) { *out = value; }
__device__ inline void store(double* out, float value) { *out = value; }
__device__ inline void store(__half* out, float value) { *out = __float2half_rn(value); }
__device__ inline void store(__nv_bfloat16* out, float value) { *out = __float2bfloat16_rn(value); }

// One block per image, its threads over the box's elements.
template <typename T>
__global__ void erase_kernel(T* images, const int64_t* boxes, const float* fill, const int64_t* noise_seeds,
                             int64_t channels, int64_t h, int64_t w) {
  const int64_t sample = blockIdx.x;
  const int64_t top = boxes[sample * 4], left = boxes[sample * 4 + 1], height = boxes[sample * 4 + 2],
                width = boxes[sample * 4 + 3];
  GPUCORE_KERNEL_ASSERT(top >= 0 && left >= 0 && height >= 0 && width >= 0 && top + height <= h && left + width <= w);
  const int64_t count = channels * height * width;
  for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
    const int64_t c = e / (height * width), y = (e / width) % height, x = e % width;
    const float value = fill ? fill[sample * channels + c] : erase_noise(noise_seeds[sample], e);
    store(images + ((sample * channels + c) * h + top + y) * w + left + x, value);
  }
}

template <typename T>
void launch_erase_for(void* images, const int64_t* boxes, const float* fill, const int64_t* noise_seeds, int64_t n,
                      int64_t channels, int64_t h, int64_t w, cudaStream_t stream) {
  GPUCORE_LAUNCH(erase_kernel, static_cast<unsigned>(n), kThreads, 0, stream, static_cast<T*>(images), boxes, fill,
                 noise_seeds, channels, h, w);
}

}  // namespace

void launch_color_ops(uint8_t* images, uint8_t* scratch, const int64_t* codes, const double* magnitudes, int64_t n,
                      int64_t steps, int64_t channels, int64_t h, int64_t w, cudaStream_t stream) {
  if (n == 0 || steps == 0 || h * w == 0) return;
  GPUCORE_LAUNCH(color_ops_kernel, static_cast<unsigned>(n), kThreads, 0, stream, images, scratch, codes, magnitudes,
                 steps, channels, h, w);
}

void launch_erase(void* images, KernelDtype type, const int64_t* boxes, const float* fill, const int64_t* noise_seeds,
                  int64_t n, int64_t channels, int64_t h, int64_t w, cudaStream_t stream) {
  if (n == 0) return;
  EraseDtypes::dispatch(type, [&](auto element) {
    launch_erase_for<typename decltype(element)::type>(images, boxes, fill, noise_seeds, n, channels, h, w, stream);
  });
}

}  // namespace gpucore::ops::cuda
