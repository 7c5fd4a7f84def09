#pragma once
// The fused batch transform as a torch op (namespace gpucore), CPU and CUDA kernels:
//
//   augment(Tensor images, Tensor offsets, Tensor flips, float[] mean, float[] std, ScalarType dtype) -> Tensor
//
// images: N x C x H x W, uint8 (scaled to [0, 1]) or floating point. For each image: a crop of its own size
// whose top-left corner is offsets[n] = (dy, dx) (int64), the source row and column as the crop op takes them
// (negative: padding), a source pixel outside the image reading 0 (torchvision's RandomCrop(size, padding) with
// fill 0: the corner it draws in the padded image, minus the padding); then a horizontal flip where flips[n];
// then (x - mean[c]) / std[c] (mean and std empty: no normalisation); the result as `dtype`, N x C x H x W.
// The randomness comes in as tensors, so the op is a pure function and its result never depends on
// threads or devices.
#include <ATen/core/Tensor.h>

#include <vector>

namespace gpucore::ops {

void check_augment_inputs(const at::Tensor& images, const at::Tensor& offsets, const at::Tensor& flips,
                          const std::vector<double>& mean, const std::vector<double>& std);

// Per-channel scale and shift so that out = value * scale[c] + shift[c] (uint8 division folded in).
void augment_affine(const at::Tensor& images, const std::vector<double>& mean, const std::vector<double>& std,
                    std::vector<float>& scale, std::vector<float>& shift);

// Calls the op through the dispatcher (CPU or CUDA kernel by the images' device).
at::Tensor augment(const at::Tensor& images, const at::Tensor& offsets, const at::Tensor& flips,
                   const std::vector<double>& mean, const std::vector<double>& std, at::ScalarType dtype);

}  // namespace gpucore::ops
