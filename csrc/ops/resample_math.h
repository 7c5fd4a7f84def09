#pragma once
// Per-pixel arithmetic of the geometric ops, shared by the CPU and CUDA kernels so both compute the same
// numbers: torch's interpolation weights (resized_crop) and torchvision's affine grid + grid_sample
// (affine), in the precision torch uses for them.
#include <cmath>
#include <cstdint>

#include "ops/host_device.h"

namespace gpucore::ops::resample {

// Input pixels [first, first + count) feed output pixel i along one axis of a bilinear resize from
// `in_size` to `out_size` (align_corners=False), weight(j) each (j = 0..count-1), to be divided by `total`:
// torch's _upsample_bilinear2d_aa filter, which with antialias off (or when enlarging) is plain bilinear.
struct Taps {
  int64_t first, count;
  double center, inv_scale, total;
};

GPUCORE_HOST_DEVICE inline double triangle(double x) {
  x = x < 0 ? -x : x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

GPUCORE_HOST_DEVICE inline double tap_weight(const Taps& taps, int64_t j) {
  return triangle((static_cast<double>(j + taps.first) - taps.center + 0.5) * taps.inv_scale);
}

GPUCORE_HOST_DEVICE inline Taps bilinear_taps(int64_t i, int64_t in_size, int64_t out_size, bool antialias) {
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const bool widen = antialias && scale >= 1.0;
  const double support = widen ? scale : 1.0;
  Taps taps{};
  taps.center = scale * (static_cast<double>(i) + 0.5);
  taps.inv_scale = widen ? 1.0 / scale : 1.0;
  const int64_t first = static_cast<int64_t>(taps.center - support + 0.5);
  taps.first = first > 0 ? first : 0;
  const int64_t last = static_cast<int64_t>(taps.center + support + 0.5);
  taps.count = (last < in_size ? last : in_size) - taps.first;
  taps.total = 0.0;
  for (int64_t j = 0; j < taps.count; ++j) taps.total += tap_weight(taps, j);
  if (taps.total == 0.0) taps.total = 1.0;
  return taps;
}

// torch's "nearest" source index (upsample_nearest2d): floor(i * in / out) in float, the last pixel at most.
GPUCORE_HOST_DEVICE inline int64_t nearest_source(int64_t i, int64_t in_size, int64_t out_size) {
  if (in_size == out_size) return i;
  const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
  const int64_t source = static_cast<int64_t>(floorf(static_cast<float>(i) * scale));
  return source < in_size - 1 ? source : in_size - 1;
}

// Float products and sums rounded one at a time, never contracted into a fused multiply-add (nvcc contracts
// by default; geometry_cpu.cpp is compiled -ffp-contract=off): grid_sample's un-normalisation must round
// exactly where torch's kernel rounds.
GPUCORE_HOST_DEVICE inline float mul_rounded(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

GPUCORE_HOST_DEVICE inline float add_rounded(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// torchvision's grid value bx * a + by * b + c (base grid row (bx, by, 1) times the rescaled theta column
// (a, b, c)), each product and sum rounded on its own in order: what the CUDA kernel computes. The CPU kernel
// takes the grid from torch's own bmm instead (geometry_cpu.cpp): how the CPU's float32 bmm rounds depends on
// the machine (MKL's sgemm fuses a product into the sum on AVX-512 CPUs and rounds each one on AVX2 CPUs).
GPUCORE_HOST_DEVICE inline float affine_grid_value(float bx, float by, float a, float b, float c) {
  return add_rounded(add_rounded(mul_rounded(bx, a), mul_rounded(by, b)), c);
}

// grid_sample's un-normalisation (align_corners=False) of grid value g along an axis of `size` pixels, as
// torch's CPU kernel writes it: (g + 1) * (size / 2) - 0.5.
GPUCORE_HOST_DEVICE inline float unnormalize(float g, int64_t size) {
  return add_rounded(mul_rounded(add_rounded(g, 1.0f), 0.5f * static_cast<float>(size)), -0.5f);
}

// Input coordinates (pixel units, x then y) of output pixel (x, y) for an h x w image under `matrix`
// (6 floats: the inverse map relative to the centre), as torchvision's _affine_grid computes the grid in
// float32 (theta / (size / 2), then the bmm) and grid_sample (align_corners=False) un-normalises it.
GPUCORE_HOST_DEVICE inline void affine_source(const float* matrix, int64_t x, int64_t y, int64_t h, int64_t w, float& sx,
                                              float& sy) {
  const float half_w = 0.5f * static_cast<float>(w), half_h = 0.5f * static_cast<float>(h);
  // pixel centres relative to the image centre: half-integers, exact in float like torch's linspace
  const float bx = static_cast<float>(x) - (static_cast<float>(w) - 1.0f) * 0.5f;
  const float by = static_cast<float>(y) - (static_cast<float>(h) - 1.0f) * 0.5f;
  sx = unnormalize(affine_grid_value(bx, by, matrix[0] / half_w, matrix[1] / half_w, matrix[2] / half_w), w);
  sy = unnormalize(affine_grid_value(bx, by, matrix[3] / half_h, matrix[4] / half_h, matrix[5] / half_h), h);
}

// One output value of affine for the plane `plane` (h x w, row-major): grid_sample with zero padding,
// then torchvision's fill through the sampled mask of ones (has_fill), as float.
template <typename T>
GPUCORE_HOST_DEVICE inline float affine_sample(const T* plane, int64_t h, int64_t w, float sx, float sy, bool bilinear,
                                        bool has_fill, float fill) {
  float value = 0.0f, mask = 0.0f;
  if (bilinear) {
    const float x0 = floorf(sx), y0 = floorf(sy);
    const int64_t ix = static_cast<int64_t>(x0), iy = static_cast<int64_t>(y0);
    const float weights[4] = {(x0 + 1.0f - sx) * (y0 + 1.0f - sy), (sx - x0) * (y0 + 1.0f - sy),
                              (x0 + 1.0f - sx) * (sy - y0), (sx - x0) * (sy - y0)};
    const int64_t xs[4] = {ix, ix + 1, ix, ix + 1}, ys[4] = {iy, iy, iy + 1, iy + 1};
    for (int k = 0; k < 4; ++k) {
      if (xs[k] >= 0 && xs[k] < w && ys[k] >= 0 && ys[k] < h) {
        value += static_cast<float>(plane[ys[k] * w + xs[k]]) * weights[k];
        mask += weights[k];
      }
    }
    return has_fill ? (value - fill) * mask + fill : value;
  }
  const int64_t ix = static_cast<int64_t>(nearbyintf(sx)), iy = static_cast<int64_t>(nearbyintf(sy));
  if (ix >= 0 && ix < w && iy >= 0 && iy < h) {
    value = static_cast<float>(plane[iy * w + ix]);
    mask = 1.0f;
  }
  return has_fill && mask < 0.5f ? fill : value;
}

// A float result as uint8 the way torchvision rounds (half to even), clamped to [0, 255].
GPUCORE_HOST_DEVICE inline uint8_t to_uint8(float value) {
  const float rounded = nearbyintf(value);
  return static_cast<uint8_t>(rounded < 0.0f ? 0.0f : (rounded > 255.0f ? 255.0f : rounded));
}

}  // namespace gpucore::ops::resample
