// CUDA side of the mix ops: checks, device guard and stream, then the kernels (ops/augment/mixup.h).
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "ops/cuda/mixup_kernels.h"
#include "ops/cuda/kernel_launch_check.h"
#include "ops/augment/mixup.h"

namespace gpucore::ops {
namespace {

at::Tensor mix_inputs_cuda(const at::Tensor& inputs, const at::Tensor& params) {
  const at::Tensor images = mix_images_view(inputs);
  check_mix_params(inputs, params, "mix_inputs");
  const cuda::KernelDtype type =
      kernel_dtype(inputs.scalar_type(), cuda::MixDtypes::values, "mix_inputs", "inputs");
  const c10::cuda::CUDAGuard guard(inputs.device());
  at::Tensor out = at::empty_like(inputs);
  const at::Tensor out_images = mix_images_view(out), rows = params.contiguous();
  cuda::MixShape shape{};
  for (int d = 0; d < 4; ++d) {
    shape.size[d] = images.size(d);
    shape.in_stride[d] = images.stride(d);
    shape.out_stride[d] = out_images.stride(d);
  }
  cuda::launch_mix_inputs(images.const_data_ptr(), out.mutable_data_ptr(), type, shape, rows.const_data_ptr<float>(),
                          c10::cuda::getCurrentCUDAStream().stream());
  check_kernel_launch("gpucore::mix_inputs");
  return out;
}

at::Tensor mix_targets_cuda(const at::Tensor& targets, const at::Tensor& params, int64_t num_classes,
                            double smoothing) {
  check_mix_targets(targets, params, num_classes, smoothing);
  const c10::cuda::CUDAGuard guard(targets.device());
  const at::Tensor labels = targets.to(at::kLong).contiguous(), rows = params.contiguous();
  at::Tensor out = at::empty({labels.size(0), num_classes}, targets.options().dtype(at::kFloat));
  const auto off = static_cast<float>(smoothing / static_cast<double>(num_classes));
  const auto on = static_cast<float>(1.0 - smoothing + smoothing / static_cast<double>(num_classes));
  cuda::launch_mix_targets(labels.const_data_ptr<int64_t>(), rows.const_data_ptr<float>(), out.mutable_data_ptr<float>(),
                           labels.size(0), num_classes, on, off, c10::cuda::getCurrentCUDAStream().stream());
  check_kernel_launch("gpucore::mix_targets");
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(gpucore, CUDA, m) {
  m.impl("mix_inputs", &mix_inputs_cuda);
  m.impl("mix_targets", &mix_targets_cuda);
}

}  // namespace gpucore::ops
