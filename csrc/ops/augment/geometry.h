#pragma once
// The geometric image ops (namespace gpucore), CPU and CUDA kernels, behind the transforms of the
// `transforms` list (csrc/batches/transforms/geometric_transforms.cpp). Images are N x C x H x W, uint8 (results
// rounded half to even and clamped, as torchvision rounds) or float32 (segmentation masks as class ids,
// nearest); each sample has its own parameters, given as tensors, so the ops are pure functions.
//
//   crop(Tensor images, Tensor offsets, Tensor flips, int[] size, float[] fill) -> Tensor
//     out[n, c, y, x] = images[n, c, offsets[n, 0] + y', offsets[n, 1] + x'] with y' = size[0] - 1 - y where
//     flips[n, 0] (vertical), x' = size[1] - 1 - x where flips[n, 1] (horizontal), else y, x; a source pixel
//     outside the image reads fill[c] (fill: one value per channel, one for all, or none: 0). offsets: int64
//     N x 2, the source row and column of the output's top-left corner before flipping (negative: padding),
//     flips: bool N x 2. torchvision's RandomCrop (constant padding), CenterCrop and the flips.
//
//   resized_crop(Tensor images, Tensor boxes, int[] size, str interpolation, bool antialias) -> Tensor
//     each sample's box (int64 N x 4: top, left, height, width, inside the image) resized to size
//     (height, width), "bilinear" (torch's _upsample_bilinear2d_aa when antialias, else plain bilinear;
//     align_corners=False) or "nearest" (torch's "nearest"). torchvision's resized_crop and resize.
//
//   affine(Tensor images, Tensor matrices, str interpolation, float[] fill) -> Tensor
//     matrices: float32 N x 6, per sample the inverse affine map from output pixel to input coordinates,
//     both relative to the image centre, as torchvision's _get_inverse_affine_matrix gives it;
//     interpolation "nearest" or "bilinear"; fill: one value per channel, one for all, or none (no fill
//     mask: outside reads 0). The same size out, as torchvision.transforms.v2.functional.affine on uint8.
#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace gpucore::ops {

void check_crop_inputs(const at::Tensor& images, const at::Tensor& offsets, const at::Tensor& flips,
                       at::IntArrayRef size, at::ArrayRef<double> fill);
void check_resized_crop_inputs(const at::Tensor& images, const at::Tensor& boxes, at::IntArrayRef size,
                               const std::string& interpolation);
void check_affine_inputs(const at::Tensor& images, const at::Tensor& matrices, const std::string& interpolation,
                         at::ArrayRef<double> fill);
// The CPU affine kernel's grids: torchvision's _affine_grid of each of n matrices (6 floats each) for h x w images,
// through torch's own bmm with torchvision's shapes, n x (h * w) x 2. The CUDA kernel rounds each product instead
// (resample_math.h's affine_grid_value), which equals this except where the CPU's BLAS fuses (MKL on some CPUs).
at::Tensor affine_grids(const float* matrices, int64_t n, int64_t h, int64_t w);
// fill as one value per channel of `channels` (empty fill: zeros).
std::vector<float> fill_per_channel(at::ArrayRef<double> fill, int64_t channels);

// The ops through the dispatcher (CPU or CUDA kernel by the images' device).
at::Tensor crop(const at::Tensor& images, const at::Tensor& offsets, const at::Tensor& flips, at::IntArrayRef size,
                at::ArrayRef<double> fill);
at::Tensor resized_crop(const at::Tensor& images, const at::Tensor& boxes, at::IntArrayRef size,
                        const std::string& interpolation, bool antialias);
at::Tensor affine(const at::Tensor& images, const at::Tensor& matrices, const std::string& interpolation,
                  at::ArrayRef<double> fill);

}  // namespace gpucore::ops
