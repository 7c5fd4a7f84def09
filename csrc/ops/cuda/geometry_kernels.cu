// CUDA kernels of the geometric ops: one thread per output value, the per-pixel arithmetic shared with the
// CPU kernels (ops/resample_math.h).
#include <cuda_runtime.h>

#include "ops/cuda/geometry_kernels.h"
#include "ops/cuda/kernel_launch.h"
#include "ops/resample_math.h"

namespace gpucore::ops::cuda {
namespace {

constexpr int kThreads = 256;

__device__ inline void store(uint8_t* out, float value) { *out = resample::to_uint8(value); }
__device__ inline void store(float* out, float value) { *out = value; }

unsigned blocks_for(int64_t total) { return static_cast<unsigned>((total + kThreads - 1) / kThreads); }

template <typename T>
__global__ void crop_kernel(const T* images, const int64_t* offsets, const bool* flips, T* out, int64_t total,
                            int64_t channels, int64_t h, int64_t w, int64_t out_h, int64_t out_w, ChannelFill fill) {
  const int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (index >= total) return;
  const int64_t x = index % out_w, y = (index / out_w) % out_h, plane = index / (out_h * out_w);
  const int64_t image = plane / channels, c = plane % channels;
  const int64_t sy = offsets[image * 2] + (flips[image * 2] ? out_h - 1 - y : y);
  const int64_t sx = offsets[image * 2 + 1] + (flips[image * 2 + 1] ? out_w - 1 - x : x);
  out[index] = (sy >= 0 && sy < h && sx >= 0 && sx < w) ? images[(plane * h + sy) * w + sx]
                                                         : static_cast<T>(fill.value[c]);
}

template <typename T>
__global__ void resized_crop_kernel(const T* images, const int64_t* boxes, T* out, int64_t total, int64_t channels,
                                    int64_t h, int64_t w, int64_t out_h, int64_t out_w, bool bilinear,
                                    bool antialias) {
  const int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (index >= total) return;
  const int64_t x = index % out_w, y = (index / out_w) % out_h, plane = index / (out_h * out_w);
  const int64_t* box = boxes + (plane / channels) * 4;
  // A box outside the image (never drawn by gpucore; the CPU kernel rejects it) is clamped, not read past.
  const int64_t top = min(max(box[0], int64_t{0}), h - 1), left = min(max(box[1], int64_t{0}), w - 1);
  const int64_t box_h = min(max(box[2], int64_t{1}), h - top), box_w = min(max(box[3], int64_t{1}), w - left);
  const T* from = images + (plane * h + top) * w + left;
  if (!bilinear) {
    out[index] = from[resample::nearest_source(y, box_h, out_h) * w + resample::nearest_source(x, box_w, out_w)];
    return;
  }
  const resample::Taps row = resample::bilinear_taps(y, box_h, out_h, antialias);
  const resample::Taps column = resample::bilinear_taps(x, box_w, out_w, antialias);
  double sum = 0.0;
  for (int64_t i = 0; i < row.count; ++i) {
    double line = 0.0;
    const T* pixels = from + (row.first + i) * w + column.first;
    for (int64_t j = 0; j < column.count; ++j) line += resample::tap_weight(column, j) * static_cast<double>(pixels[j]);
    sum += resample::tap_weight(row, i) * line;
  }
  store(out + index, static_cast<float>(sum / (row.total * column.total)));
}

template <typename T>
__global__ void affine_kernel(const T* images, const float* matrices, T* out, int64_t total, int64_t channels,
                              int64_t h, int64_t w, bool bilinear, bool has_fill, ChannelFill fill) {
  const int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (index >= total) return;
  const int64_t x = index % w, y = (index / w) % h, plane = index / (h * w);
  float sx, sy;
  resample::affine_source(matrices + (plane / channels) * 6, x, y, h, w, sx, sy);
  store(out + index,
        resample::affine_sample(images + plane * h * w, h, w, sx, sy, bilinear, has_fill, fill.value[plane % channels]));
}

}  // namespace

void launch_crop(const void* images, bool is_uint8, const int64_t* offsets, const bool* flips, void* out, int64_t n,
                 int64_t channels, int64_t h, int64_t w, int64_t out_h, int64_t out_w, ChannelFill fill,
                 cudaStream_t stream) {
  const int64_t total = n * channels * out_h * out_w;
  if (total == 0) return;
  if (is_uint8) {
    GPUCORE_LAUNCH(crop_kernel, blocks_for(total), kThreads, 0, stream, static_cast<const uint8_t*>(images), offsets,
                   flips, static_cast<uint8_t*>(out), total, channels, h, w, out_h, out_w, fill);
  } else {
    GPUCORE_LAUNCH(crop_kernel, blocks_for(total), kThreads, 0, stream, static_cast<const float*>(images), offsets,
                   flips, static_cast<float*>(out), total, channels, h, w, out_h, out_w, fill);
  }
}

void launch_resized_crop(const void* images, bool is_uint8, const int64_t* boxes, void* out, int64_t n,
                         int64_t channels, int64_t h, int64_t w, int64_t out_h, int64_t out_w, bool bilinear,
                         bool antialias, cudaStream_t stream) {
  const int64_t total = n * channels * out_h * out_w;
  if (total == 0) return;
  if (is_uint8) {
    GPUCORE_LAUNCH(resized_crop_kernel, blocks_for(total), kThreads, 0, stream, static_cast<const uint8_t*>(images),
                   boxes, static_cast<uint8_t*>(out), total, channels, h, w, out_h, out_w, bilinear, antialias);
  } else {
    GPUCORE_LAUNCH(resized_crop_kernel, blocks_for(total), kThreads, 0, stream, static_cast<const float*>(images),
                   boxes, static_cast<float*>(out), total, channels, h, w, out_h, out_w, bilinear, antialias);
  }
}

void launch_affine(const void* images, bool is_uint8, const float* matrices, void* out, int64_t n, int64_t channels,
                   int64_t h, int64_t w, bool bilinear, bool has_fill, ChannelFill fill, cudaStream_t stream) {
  const int64_t total = n * channels * h * w;
  if (total == 0) return;
  if (is_uint8) {
    GPUCORE_LAUNCH(affine_kernel, blocks_for(total), kThreads, 0, stream, static_cast<const uint8_t*>(images), matrices,
                   static_cast<uint8_t*>(out), total, channels, h, w, bilinear, has_fill, fill);
  } else {
    GPUCORE_LAUNCH(affine_kernel, blocks_for(total), kThreads, 0, stream, static_cast<const float*>(images), matrices,
                   static_cast<float*>(out), total, channels, h, w, bilinear, has_fill, fill);
  }
}

}  // namespace gpucore::ops::cuda
