#pragma once
// The photometric transforms as torch ops (namespace gpucore), CPU and CUDA kernels, applied per sample to a
// batch with per-sample parameters drawn on the host (the transforms in batches/transforms draw them):
//
//   color_ops(Tensor images, Tensor codes, Tensor magnitudes) -> Tensor
//       images: uint8 N x C x H x W, C 1 or 3. codes: int64 N x K, magnitudes: float64 N x K (the functionals' Python floats). For each
//       image, the adjustments codes[n, 0], ..., codes[n, K - 1] (ColorOpCode, color_math.h) one after the
//       other, each with its magnitude, each as torchvision.transforms.v2.functional's function of that name
//       on a uint8 image (uint8 in, uint8 out). One op serves ColorJitter (K = 4 in the sample's order),
//       RandomGrayscale and the photometric steps of the auto-augment policies.
//   erase(Tensor images, Tensor boxes, Tensor? fill, Tensor? noise_seeds) -> Tensor
//       images: floating N x C x H x W (after Normalize). boxes: int64 N x 4, (top, left, height, width);
//       height or width 0 leaves the image unchanged. Exactly one of fill (float32 N x C: the value per channel)
//       and noise_seeds (int64 N: a standard normal value per erased element from the sample's seed,
//       color_math.h's erase_noise) says what the box is filled with: torchvision's erase.
// The randomness comes in as tensors, so the ops are pure functions whose results never depend on threads.
#include <ATen/core/Tensor.h>

#include <optional>

namespace gpucore::ops {

// Shapes, dtypes and devices; the CPU kernel also checks the codes' and magnitudes' values (check_color_values),
// the CUDA kernel only in debug builds (reading them would wait for the device).
void check_color_ops_inputs(const at::Tensor& images, const at::Tensor& codes, const at::Tensor& magnitudes);
void check_color_values(const at::Tensor& codes, const at::Tensor& magnitudes);
void check_erase_inputs(const at::Tensor& images, const at::Tensor& boxes, const std::optional<at::Tensor>& fill,
                        const std::optional<at::Tensor>& noise_seeds);

// The ops through the dispatcher (CPU or CUDA kernel by the images' device).
at::Tensor color_ops(const at::Tensor& images, const at::Tensor& codes, const at::Tensor& magnitudes);
at::Tensor erase(const at::Tensor& images, const at::Tensor& boxes, const std::optional<at::Tensor>& fill,
                 const std::optional<at::Tensor>& noise_seeds);

}  // namespace gpucore::ops
