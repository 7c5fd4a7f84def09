// CUDA side of the color ops: checks, contiguous inputs, device guard and stream, then the kernels.
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "ops/augment/color.h"
#include "ops/cuda/color_kernels.h"
#include "ops/cuda/kernel_launch_check.h"

namespace gpucore::ops {
namespace {

// The codes' values are not checked here (reading them would wait for the device): the kernel checks them, in
// release builds too (GPUCORE_KERNEL_ASSERT), and an unknown code fails the launch with a device-side assert.
at::Tensor color_ops_cuda(const at::Tensor& images, const at::Tensor& codes, const at::Tensor& magnitudes) {
  check_color_ops_inputs(images, codes, magnitudes);
  const c10::cuda::CUDAGuard guard(images.device());
  at::Tensor out = images.contiguous().clone();
  at::Tensor scratch = at::empty_like(out);
  const at::Tensor code = codes.contiguous(), magnitude = magnitudes.contiguous();
  cuda::launch_color_ops(out.data_ptr<uint8_t>(), scratch.data_ptr<uint8_t>(), code.data_ptr<int64_t>(),
                         magnitude.data_ptr<double>(), out.size(0), code.size(1), out.size(1), out.size(2), out.size(3),
                         c10::cuda::getCurrentCUDAStream().stream());
  check_kernel_launch("gpucore::color_ops");
  return out;
}

at::Tensor erase_cuda(const at::Tensor& images, const at::Tensor& boxes, const std::optional<at::Tensor>& fill,
                      const std::optional<at::Tensor>& noise_seeds) {
  check_erase_inputs(images, boxes, fill, noise_seeds);
  const c10::cuda::CUDAGuard guard(images.device());
  at::Tensor out = images.contiguous().clone();
  const at::Tensor box = boxes.contiguous();
  const at::Tensor fill_values = fill ? fill->contiguous() : at::Tensor();
  const at::Tensor seeds = noise_seeds ? noise_seeds->contiguous() : at::Tensor();
  const cuda::KernelDtype type = kernel_dtype(out.scalar_type(), cuda::EraseDtypes::values, "erase", "images");
  cuda::launch_erase(out.data_ptr(), type, box.data_ptr<int64_t>(),
                     fill ? fill_values.data_ptr<float>() : nullptr, noise_seeds ? seeds.data_ptr<int64_t>() : nullptr,
                     out.size(0), out.size(1), out.size(2), out.size(3), c10::cuda::getCurrentCUDAStream().stream());
  check_kernel_launch("gpucore::erase");
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(gpucore, CUDA, m) {
  m.impl("color_ops", &color_ops_cuda);
  m.impl("erase", &erase_cuda);
}

}  // namespace gpucore::ops
