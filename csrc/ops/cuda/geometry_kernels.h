#pragma once
// Launchers of the geometric ops' CUDA kernels (raw buffers on the current device), kept free of torch
// headers. Images uint8 (is_uint8) or float32, N x C x H x W contiguous; out the same type.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace gpucore::ops::cuda {

constexpr int kGeometryMaxChannels = 8;

struct ChannelFill {
  float value[kGeometryMaxChannels];
};

void launch_crop(const void* images, bool is_uint8, const int64_t* offsets, const bool* flips, void* out, int64_t n,
                 int64_t channels, int64_t h, int64_t w, int64_t out_h, int64_t out_w, ChannelFill fill,
                 cudaStream_t stream);

void launch_resized_crop(const void* images, bool is_uint8, const int64_t* boxes, void* out, int64_t n,
                         int64_t channels, int64_t h, int64_t w, int64_t out_h, int64_t out_w, bool bilinear,
                         bool antialias, cudaStream_t stream);

void launch_affine(const void* images, bool is_uint8, const float* matrices, void* out, int64_t n, int64_t channels,
                   int64_t h, int64_t w, bool bilinear, bool has_fill, ChannelFill fill, cudaStream_t stream);

}  // namespace gpucore::ops::cuda
