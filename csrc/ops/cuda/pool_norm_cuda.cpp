// CUDA side of gpucore::maxpool_bn_relu: checks, device guard and stream, the per-channel values in the kernels'
// math type, then the kernels (ops/fused/pool_norm.h). No host sync: the statistics stay on the device.
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "ops/cuda/kernel_launch_check.h"
#include "ops/cuda/pool_norm_kernels.h"
#include "ops/fused/pool_norm.h"

namespace gpucore::ops {
namespace {

cuda::PoolNormDims dims_of(const PoolNormShape& s) {
  return {s.batch, s.channels, s.height, s.width, s.pooled_height, s.pooled_width, s.channels_last};
}

PoolNormOutputs maxpool_bn_relu_cuda(const at::Tensor& input_, const at::Tensor& weight, const at::Tensor& bias,
                                     const at::Tensor& running_mean, const at::Tensor& running_var, bool training,
                                     double momentum, double eps) {
  const PoolNormShape s = pool_norm_shape(input_, weight, bias, running_mean, running_var, training);
  const cuda::KernelDtype type =
      kernel_dtype(input_.scalar_type(), cuda::PoolNormDtypes::values, "maxpool_bn_relu", "input");
  const c10::cuda::CUDAGuard guard(input_.device());
  const at::Tensor input = pool_norm_layout(input_, s.channels_last);
  const auto format = s.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  const std::vector<int64_t> size{s.batch, s.channels, s.pooled_height, s.pooled_width};
  at::Tensor pooled = at::empty(size, input.options().memory_format(format));
  at::Tensor out = at::empty(size, input.options().memory_format(format));
  const at::ScalarType math = pool_norm_math_type(input.scalar_type());
  const at::Tensor w = weight.to(math).contiguous(), b = bias.to(math).contiguous();
  const at::Tensor rm = running_mean.to(math).contiguous(), rv = running_var.to(math).contiguous();
  at::Tensor save_mean = at::empty({s.channels}, input.options().dtype(math));
  at::Tensor save_invstd = at::empty({s.channels}, input.options().dtype(math));
  at::Tensor new_mean = at::empty({training ? s.channels : 0}, input.options().dtype(math));
  at::Tensor new_var = at::empty({training ? s.channels : 0}, input.options().dtype(math));
  const cuda::PoolNormChannels channels{w.const_data_ptr(), b.const_data_ptr(), rm.const_data_ptr(),
                                        rv.const_data_ptr(), save_mean.mutable_data_ptr(),
                                        save_invstd.mutable_data_ptr(), new_mean.mutable_data_ptr(),
                                        new_var.mutable_data_ptr()};
  cuda::launch_maxpool_bn_relu(input.const_data_ptr(), pooled.mutable_data_ptr(), out.mutable_data_ptr(), channels,
                               training, momentum, eps, dims_of(s), type, c10::cuda::getCurrentCUDAStream().stream());
  check_kernel_launch("gpucore::maxpool_bn_relu");
  return {out, pooled, save_mean, save_invstd, new_mean.to(running_mean.scalar_type()),
          new_var.to(running_var.scalar_type())};
}

PoolNormGrads maxpool_bn_relu_backward_cuda(const at::Tensor& grad_out, const at::Tensor& input_,
                                            const at::Tensor& pooled, const at::Tensor& out, const at::Tensor& weight,
                                            const at::Tensor& save_mean, const at::Tensor& save_invstd,
                                            bool training) {
  const PoolNormShape s = pool_norm_backward_shape(grad_out, input_, pooled, out, weight, save_mean, save_invstd);
  const cuda::KernelDtype type =
      kernel_dtype(input_.scalar_type(), cuda::PoolNormDtypes::values, "maxpool_bn_relu_backward", "input");
  const c10::cuda::CUDAGuard guard(input_.device());
  const at::Tensor input = pool_norm_layout(input_, s.channels_last);
  const at::Tensor grad = pool_norm_layout(grad_out, s.channels_last);
  const at::Tensor pooled_values = pool_norm_layout(pooled, s.channels_last);
  const at::Tensor out_values = pool_norm_layout(out, s.channels_last);
  const at::ScalarType math = pool_norm_math_type(input.scalar_type());
  const at::Tensor w = weight.to(math).contiguous(), mean = save_mean.contiguous(), invstd = save_invstd.contiguous();
  at::Tensor grad_input = at::empty_like(input);
  at::Tensor grad_weight = at::empty({s.channels}, input.options().dtype(math));
  at::Tensor grad_bias = at::empty({s.channels}, input.options().dtype(math));
  cuda::launch_maxpool_bn_relu_backward(grad.const_data_ptr(), input.const_data_ptr(), pooled_values.const_data_ptr(),
                                        out_values.const_data_ptr(), w.const_data_ptr(), mean.const_data_ptr(),
                                        invstd.const_data_ptr(), grad_input.mutable_data_ptr(),
                                        grad_weight.mutable_data_ptr(), grad_bias.mutable_data_ptr(), training,
                                        dims_of(s), type, c10::cuda::getCurrentCUDAStream().stream());
  check_kernel_launch("gpucore::maxpool_bn_relu_backward");
  return {grad_input, grad_weight.to(weight.scalar_type()), grad_bias.to(weight.scalar_type())};
}

}  // namespace

TORCH_LIBRARY_IMPL(gpucore, CUDA, m) {
  m.impl("maxpool_bn_relu", &maxpool_bn_relu_cuda);
  m.impl("maxpool_bn_relu_backward", &maxpool_bn_relu_backward_cuda);
}

}  // namespace gpucore::ops
