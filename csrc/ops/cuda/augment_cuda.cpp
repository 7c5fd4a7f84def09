// CUDA side of the augment op: checks, contiguous inputs, device guard and stream, then the kernel.
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "ops/augment/augment.h"
#include "ops/float_contiguous.h"
#include "ops/cuda/augment_kernels.h"
#include "ops/cuda/kernel_launch_check.h"

namespace gpucore::ops {
namespace {

at::Tensor augment_cuda(const at::Tensor& images, const at::Tensor& offsets, const at::Tensor& flips,
                        at::ArrayRef<double> mean, at::ArrayRef<double> std, at::ScalarType dtype) {
  const std::vector<double> mean_values(mean.begin(), mean.end()), std_values(std.begin(), std.end());
  check_augment_inputs(images, offsets, flips, mean_values, std_values);
  TORCH_CHECK(images.size(1) <= cuda::kAugmentMaxChannels, "augment on CUDA handles up to ",
              cuda::kAugmentMaxChannels, " channels, got ", images.size(1));
  std::vector<float> scale, shift;
  augment_affine(images, mean_values, std_values, scale, shift);
  cuda::ChannelAffine affine{};
  for (size_t c = 0; c < scale.size(); ++c) {
    affine.scale[c] = scale[c];
    affine.shift[c] = shift[c];
  }
  const c10::cuda::CUDAGuard guard(images.device());
  const bool is_uint8 = images.scalar_type() == at::kByte;
  const at::Tensor in = is_uint8 ? images.contiguous() : float_contiguous(images);
  const at::Tensor off = offsets.contiguous(), flip = flips.contiguous();
  const cuda::KernelDtype out_type =
      kernel_dtype(dtype, cuda::AugmentOutDtypes::values, "augment", "the output dtype");
  at::Tensor out = at::empty(images.sizes(), images.options().dtype(dtype));
  cuda::launch_augment(in.data_ptr(), is_uint8, off.data_ptr<int64_t>(), flip.data_ptr<bool>(), out.data_ptr(), out_type,
                       in.size(0), in.size(1), in.size(2), in.size(3), affine,
                       c10::cuda::getCurrentCUDAStream().stream());
  check_kernel_launch("gpucore::augment");
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(gpucore, CUDA, m) { m.impl("augment", &augment_cuda); }

}  // namespace gpucore::ops
