#include <cuda_runtime.h>

#include <cfloat>

#include "ops/cuda/cam_kernels.h"
#include "ops/cuda/device_values.h"
#include "ops/cuda/kernel_launch.h"
#include "ops/jet_colormap.h"

namespace gpucore::ops::cuda {
namespace {

constexpr int kThreads = 256;

__constant__ uint8_t jet_rgb[256][3] = {GPUCORE_JET_RGB_ENTRIES};  // loaded with the module on each device

__device__ float block_reduce_max(float value) {
  __shared__ float partial[kThreads];
  partial[threadIdx.x] = value;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] = fmaxf(partial[threadIdx.x], partial[threadIdx.x + stride]);
    __syncthreads();
  }
  const float result = partial[0];
  __syncthreads();
  return result;
}

// One block per (image, channel).
__global__ void cam_weights_kernel(const float* activations, const float* gradients, float* out, int64_t area,
                                   int method) {
  const float* act = activations + blockIdx.x * area;
  const float* grad = gradients + blockIdx.x * area;
  float sum_a = 0;
  if (method != 0) {
    for (int64_t i = threadIdx.x; i < area; i += blockDim.x) sum_a += act[i];
    sum_a = block_sum<kThreads>(sum_a);
  }
  float weight = 0;
  for (int64_t i = threadIdx.x; i < area; i += blockDim.x) {
    const float g = grad[i];
    if (method == 0) {
      weight += g;
    } else if (method == 1) {
      if (g != 0) {
        const float g2 = g * g;
        weight += fmaxf(g, 0.0f) * g2 / (2 * g2 + sum_a * g2 * g + 1e-6f);
      }
    } else {
      weight += g * act[i] / (sum_a + 1e-7f);
    }
  }
  weight = block_sum<kThreads>(weight);
  if (threadIdx.x == 0) out[blockIdx.x] = method == 0 ? weight / static_cast<float>(area) : weight;
}

__global__ void cam_weighted_sum_kernel(const float* activations, const float* weights, float* out, int64_t n,
                                        int64_t channels, int64_t area, bool elementwise) {
  const int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (index >= n * area) return;
  const int64_t image = index / area, pixel = index % area;
  float sum = 0;
  for (int64_t c = 0; c < channels; ++c) {
    const int64_t offset = (image * channels + c) * area + pixel;
    const float weight = elementwise ? weights[offset] : weights[image * channels + c];
    sum += weight * activations[offset];
  }
  out[index] = fmaxf(sum, 0.0f);
}

__device__ void bilinear_taps(int64_t out_index, int64_t in_size, int64_t out_size, int64_t& low, int64_t& high,
                              float& high_weight) {
  const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
  const float source = fmaxf(scale * (static_cast<float>(out_index) + 0.5f) - 0.5f, 0.0f);
  low = min(static_cast<int64_t>(source), in_size - 1);
  high = low + (low < in_size - 1 ? 1 : 0);
  high_weight = source - static_cast<float>(low);
}

// One block per image: min and max, then every output pixel of the resized, normalised map.
__global__ void cam_normalize_kernel(const float* cams, float* out, int64_t h, int64_t w, int64_t out_h, int64_t out_w) {
  const float* in = cams + blockIdx.x * h * w;
  float low = FLT_MAX, high = -FLT_MAX;
  for (int64_t i = threadIdx.x; i < h * w; i += blockDim.x) {
    low = fminf(low, in[i]);
    high = fmaxf(high, in[i]);
  }
  low = -block_reduce_max(-low);
  high = block_reduce_max(high);
  const float inv_range = 1.0f / (high - low + 1e-7f);
  float* dst = out + blockIdx.x * out_h * out_w;
  for (int64_t i = threadIdx.x; i < out_h * out_w; i += blockDim.x) {
    int64_t y0, y1, x0, x1;
    float wy, wx;
    bilinear_taps(i / out_w, h, out_h, y0, y1, wy);
    bilinear_taps(i % out_w, w, out_w, x0, x1, wx);
    auto at = [&](int64_t y, int64_t x) { return (in[y * w + x] - low) * inv_range; };
    dst[i] = (1 - wy) * ((1 - wx) * at(y0, x0) + wx * at(y0, x1)) + wy * ((1 - wx) * at(y1, x0) + wx * at(y1, x1));
  }
}

__device__ float blend(const uint8_t* image, const float* cam, int64_t p, int k, float alpha) {
  const float scaled = fminf(fmaxf(255.0f * cam[p], 0.0f), 255.0f);
  const float heat = static_cast<float>(jet_rgb[static_cast<int>(scaled)][k]) / 255.0f;
  const float pixel = static_cast<float>(image[p * 3 + k]) / 255.0f;
  return alpha * heat + (1.0f - alpha) * pixel;  // show_cam_on_image's order, for identical rounding
}

// One block per image: the blend's maximum, then the blend divided by it.
__global__ void cam_overlay_kernel(const uint8_t* images, const float* cams, uint8_t* out, int64_t pixels, float alpha) {
  const uint8_t* image = images + blockIdx.x * pixels * 3;
  const float* cam = cams + blockIdx.x * pixels;
  float peak = 0;
  for (int64_t i = threadIdx.x; i < pixels * 3; i += blockDim.x) peak = fmaxf(peak, blend(image, cam, i / 3, i % 3, alpha));
  peak = block_reduce_max(peak);
  uint8_t* dst = out + blockIdx.x * pixels * 3;
  for (int64_t i = threadIdx.x; i < pixels * 3; i += blockDim.x) {
    dst[i] = peak > 0 ? static_cast<uint8_t>(255.0f * (blend(image, cam, i / 3, i % 3, alpha) / peak)) : 0;
  }
}

}  // namespace

void launch_cam_weights(const float* activations, const float* gradients, float* out, int64_t channels, int64_t area,
                        int method, cudaStream_t stream) {
  if (channels == 0) return;
  GPUCORE_LAUNCH(cam_weights_kernel, static_cast<unsigned>(channels), kThreads, 0, stream, activations, gradients, out,
                 area, method);
}

void launch_cam_weighted_sum(const float* activations, const float* weights, float* out, int64_t n, int64_t channels,
                             int64_t area, bool elementwise, cudaStream_t stream) {
  const int64_t total = n * area;
  if (total == 0) return;
  const unsigned blocks = static_cast<unsigned>((total + kThreads - 1) / kThreads);
  GPUCORE_LAUNCH(cam_weighted_sum_kernel, blocks, kThreads, 0, stream, activations, weights, out, n, channels, area,
                 elementwise);
}

void launch_cam_normalize(const float* cams, float* out, int64_t n, int64_t h, int64_t w, int64_t out_h, int64_t out_w,
                          cudaStream_t stream) {
  if (n == 0) return;
  GPUCORE_LAUNCH(cam_normalize_kernel, static_cast<unsigned>(n), kThreads, 0, stream, cams, out, h, w, out_h, out_w);
}

void launch_cam_overlay(const uint8_t* images, const float* cams, uint8_t* out, int64_t n, int64_t pixels, float alpha,
                        cudaStream_t stream) {
  if (n == 0) return;
  GPUCORE_LAUNCH(cam_overlay_kernel, static_cast<unsigned>(n), kThreads, 0, stream, images, cams, out, pixels, alpha);
}

}  // namespace gpucore::ops::cuda
