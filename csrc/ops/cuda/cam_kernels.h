#pragma once
// Launchers of the CAM CUDA kernels: raw float32 contiguous buffers on the current device, queued on
// `stream`. Kept free of torch headers so nvcc compiles them in any C++ dialect; cam_cuda.cpp holds
// the ATen side (checks, allocation, stream, device guard).
#include <cuda_runtime_api.h>

#include <cstdint>

namespace gpucore::ops::cuda {

// method: 0 gradcam, 1 gradcam++, 2 xgradcam (CamMethod's order).
void launch_cam_weights(const float* activations, const float* gradients, float* out, int64_t channels, int64_t area,
                        int method, cudaStream_t stream);
void launch_cam_weighted_sum(const float* activations, const float* weights, float* out, int64_t n, int64_t channels,
                             int64_t area, bool elementwise, cudaStream_t stream);
void launch_cam_normalize(const float* cams, float* out, int64_t n, int64_t h, int64_t w, int64_t out_h, int64_t out_w,
                          cudaStream_t stream);
void launch_cam_overlay(const uint8_t* images, const float* cams, uint8_t* out, int64_t n, int64_t pixels, float alpha,
                        cudaStream_t stream);

}  // namespace gpucore::ops::cuda
