#pragma once
// The fused batch transform as a torch op (namespace gpucore), CPU and CUDA kernels:
//
//   augment(Tensor images, Tensor offsets, Tensor flips, int padding, float[] mean, float[] std,
//           ScalarType dtype) -> Tensor
//
// images: N x C x H x W, uint8 (scaled to [0, 1]) or floating point. For each image: a random crop of
// the zero-padded image (torchvision's RandomCrop(size, padding)) whose top-left corner in padded
// coordinates is offsets[n] = (dy, dx) in [0, 2 * padding]; then a horizontal flip where flips[n];
// then (x - mean[c]) / std[c] (mean and std empty: no normalisation); the result as `dtype`, N x C x H x W.
// The randomness comes in as tensors, so the op is a pure function and its result never depends on
// threads or devices.
#include <ATen/core/Tensor.h>

#include <vector>

namespace gpucore::ops {

void check_augment_inputs(const at::Tensor& images, const at::Tensor& offsets, const at::Tensor& flips, int64_t padding,
                          const std::vector<double>& mean, const std::vector<double>& std);

// Per-channel scale and shift so that out = value * scale[c] + shift[c] (uint8 division folded in).
void augment_affine(const at::Tensor& images, const std::vector<double>& mean, const std::vector<double>& std,
                    std::vector<float>& scale, std::vector<float>& shift);

// Calls the op through the dispatcher (CPU or CUDA kernel by the images' device).
at::Tensor augment(const at::Tensor& images, const at::Tensor& offsets, const at::Tensor& flips, int64_t padding,
                   const std::vector<double>& mean, const std::vector<double>& std, at::ScalarType dtype);

}  // namespace gpucore::ops
