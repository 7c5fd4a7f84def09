#pragma once
// Launcher of the augment CUDA kernel (raw buffers on the current device), kept free of torch headers.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/kernel_dtype.h"

namespace gpucore::ops::cuda {

constexpr int kAugmentMaxChannels = 8;

struct ChannelAffine {
  float scale[kAugmentMaxChannels];
  float shift[kAugmentMaxChannels];
};

using AugmentOutDtypes = KernelDtypes<KernelDtype::kFloat32, KernelDtype::kFloat16, KernelDtype::kBFloat16>;

// images: uint8 (is_uint8) or float32 N x C x H x W contiguous; out: `out_type` (one of AugmentOutDtypes),
// same shape (computed in float32, rounded to nearest even once); offsets: the crops' corners (ops/augment/augment.h).
void launch_augment(const void* images, bool is_uint8, const int64_t* offsets, const bool* flips, void* out,
                    KernelDtype out_type, int64_t n, int64_t channels, int64_t h, int64_t w, ChannelAffine affine,
                    cudaStream_t stream);

}  // namespace gpucore::ops::cuda
