#pragma once
// Bilinear resize of one NCHW image on the CPU, rounded as torchvision's Resize rounds it, for every gpucore resize
// a user would compare with torchvision's (resized_crop, the image readers' size and max_resolution).
#include <ATen/ops/_upsample_bilinear2d_aa.h>
#include <ATen/ops/upsample_bilinear2d.h>

#include "ops/cpu/torch_capability.h"

namespace gpucore::ops {

// `image` (1 x C x H x W, uint8 or float32) resized into `out` (1 x C x OH x OW, the same dtype). torchvision
// resizes uint8 natively only where torch runs its vector kernels; elsewhere it goes through float32 (interpolate,
// round half to even), and so does this: torch's baseline uint8 kernel rounds otherwise.
inline void bilinear_resize_into(const at::Tensor& image, at::Tensor& out, bool antialias) {
  const at::IntArrayRef size = out.sizes().slice(2);
  const auto resize = [&](const at::Tensor& from) {
    return antialias ? at::_upsample_bilinear2d_aa(from, size, false) : at::upsample_bilinear2d(from, size, false);
  };
  if (image.scalar_type() == at::kByte && !torch_runs_vector_kernels()) {
    out.copy_(resize(image.to(at::kFloat)).round_());
  } else if (antialias) {
    at::_upsample_bilinear2d_aa_out(out, image, size, false);
  } else {
    at::upsample_bilinear2d_out(out, image, size, false);
  }
}

}  // namespace gpucore::ops
