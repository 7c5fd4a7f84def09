#pragma once
// Launchers of the color ops' CUDA kernels (raw buffers on the current device), kept free of torch headers.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/kernel_dtype.h"

namespace gpucore::ops::cuda {

// images: uint8 N x C x H x W contiguous, adjusted in place; scratch: a buffer of the same size (sharpness reads
// its source there); codes int64 and magnitudes float64 N x steps. One block per image.
void launch_color_ops(uint8_t* images, uint8_t* scratch, const int64_t* codes, const double* magnitudes, int64_t n,
                      int64_t steps, int64_t channels, int64_t h, int64_t w, cudaStream_t stream);

using EraseDtypes = FloatingKernelDtypes;

// images: `type` (one of EraseDtypes) N x C x H x W contiguous, erased in place; boxes int64 N x 4; fill float32
// N x C or null, then noise_seeds int64 N.
void launch_erase(void* images, KernelDtype type, const int64_t* boxes, const float* fill, const int64_t* noise_seeds,
                  int64_t n, int64_t channels, int64_t h, int64_t w, cudaStream_t stream);

}  // namespace gpucore::ops::cuda
