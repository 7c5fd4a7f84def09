// CUDA side of the geometric ops: checks, contiguous inputs, device guard and stream, then the kernels.
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "ops/cuda/geometry_kernels.h"
#include "ops/cuda/kernel_launch_check.h"
#include "ops/augment/geometry.h"

namespace gpucore::ops {
namespace {

cuda::ChannelFill channel_fill(at::ArrayRef<double> fill, int64_t channels) {
  TORCH_CHECK(channels <= cuda::kGeometryMaxChannels, "the geometric ops on CUDA handle up to ",
              cuda::kGeometryMaxChannels, " channels, got ", channels);
  cuda::ChannelFill values{};
  const std::vector<float> per_channel = fill_per_channel(fill, channels);
  for (int64_t c = 0; c < channels; ++c) values.value[c] = per_channel[c];
  return values;
}

at::Tensor crop_cuda(const at::Tensor& images, const at::Tensor& offsets, const at::Tensor& flips, at::IntArrayRef size,
                     at::ArrayRef<double> fill) {
  check_crop_inputs(images, offsets, flips, size, fill);
  const c10::cuda::CUDAGuard guard(images.device());
  const at::Tensor in = images.contiguous(), off = offsets.contiguous(), flip = flips.contiguous();
  const cuda::ChannelFill values = channel_fill(fill, in.size(1));
  at::Tensor out = at::empty({in.size(0), in.size(1), size[0], size[1]}, in.options());
  cuda::launch_crop(in.data_ptr(), in.scalar_type() == at::kByte, off.data_ptr<int64_t>(), flip.data_ptr<bool>(),
                    out.data_ptr(), in.size(0), in.size(1), in.size(2), in.size(3), size[0], size[1], values,
                    c10::cuda::getCurrentCUDAStream().stream());
  check_kernel_launch("gpucore::crop");
  return out;
}

at::Tensor resized_crop_cuda(const at::Tensor& images, const at::Tensor& boxes, at::IntArrayRef size,
                             c10::string_view interpolation, bool antialias) {
  const std::string mode(interpolation);
  check_resized_crop_inputs(images, boxes, size, mode);
  const c10::cuda::CUDAGuard guard(images.device());
  const at::Tensor in = images.contiguous(), box = boxes.contiguous();
  at::Tensor out = at::empty({in.size(0), in.size(1), size[0], size[1]}, in.options());
  cuda::launch_resized_crop(in.data_ptr(), in.scalar_type() == at::kByte, box.data_ptr<int64_t>(), out.data_ptr(),
                            in.size(0), in.size(1), in.size(2), in.size(3), size[0], size[1], mode == "bilinear",
                            antialias, c10::cuda::getCurrentCUDAStream().stream());
  check_kernel_launch("gpucore::resized_crop");
  return out;
}

at::Tensor affine_cuda(const at::Tensor& images, const at::Tensor& matrices, c10::string_view interpolation,
                       at::ArrayRef<double> fill) {
  const std::string mode(interpolation);
  check_affine_inputs(images, matrices, mode, fill);
  const c10::cuda::CUDAGuard guard(images.device());
  const at::Tensor in = images.contiguous(), matrix = matrices.contiguous();
  const cuda::ChannelFill values = channel_fill(fill, in.size(1));
  at::Tensor out = at::empty(in.sizes(), in.options());
  cuda::launch_affine(in.data_ptr(), in.scalar_type() == at::kByte, matrix.data_ptr<float>(), out.data_ptr(),
                      in.size(0), in.size(1), in.size(2), in.size(3), mode == "bilinear", !fill.empty(), values,
                      c10::cuda::getCurrentCUDAStream().stream());
  check_kernel_launch("gpucore::affine");
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(gpucore, CUDA, m) {
  m.impl("crop", &crop_cuda);
  m.impl("resized_crop", &resized_crop_cuda);
  m.impl("affine", &affine_cuda);
}

}  // namespace gpucore::ops
