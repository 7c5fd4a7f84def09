// gpucore::maxpool_bn_relu's checks and its C++ entry points through the dispatcher.
#include "ops/fused/pool_norm.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

namespace gpucore::ops {
namespace {

void check_parameter(const char* op, const at::Tensor& param, const char* name, int64_t channels,
                     const at::Tensor& input, at::ScalarType dtype) {
  TORCH_CHECK(param.dim() == 1 && param.size(0) == channels, op, ": ", name, " must hold one value per channel (",
              channels, "), got ", param.sizes());
  TORCH_CHECK(param.scalar_type() == dtype, op, ": weight, bias, running_mean and running_var must share one dtype, "
              "the input's or float32; ", name, " is ", param.scalar_type(), ", weight ", dtype);
  TORCH_CHECK(param.device() == input.device(), op, ": ", name, " is on ", param.device(), ", the input on ",
              input.device());
}

}  // namespace

void check_norm_parameters(const char* op, int64_t channels, const at::Tensor& input, const at::Tensor& weight,
                           const at::Tensor& bias, const at::Tensor& running_mean, const at::Tensor& running_var) {
  const at::ScalarType dtype = input.scalar_type(), param_type = weight.scalar_type();
  TORCH_CHECK(param_type == dtype || param_type == at::kFloat, op, ": weight must be the input's dtype (", dtype,
              ") or float32, got ", param_type);
  check_parameter(op, weight, "weight", channels, input, param_type);
  check_parameter(op, bias, "bias", channels, input, param_type);
  check_parameter(op, running_mean, "running_mean", channels, input, param_type);
  check_parameter(op, running_var, "running_var", channels, input, param_type);
}

void check_saved_norm(const char* op, int64_t channels, const at::Tensor& input, const at::Tensor& weight,
                      const at::Tensor& save_mean, const at::Tensor& save_invstd) {
  const at::ScalarType math = pool_norm_math_type(input.scalar_type());
  for (const auto& [tensor, name] : {std::pair{&save_mean, "save_mean"}, {&save_invstd, "save_invstd"}}) {
    TORCH_CHECK(tensor->dim() == 1 && tensor->size(0) == channels && tensor->scalar_type() == math &&
                    tensor->device() == input.device(),
                op, ": ", name, " must be ", channels, " ", math, " values on ", input.device(), ", got ",
                tensor->scalar_type(), " ", tensor->sizes());
  }
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == channels &&
                  (weight.scalar_type() == input.scalar_type() || weight.scalar_type() == at::kFloat) &&
                  weight.device() == input.device(),
              op, ": weight must be ", channels, " values of the input's dtype or float32");
}

at::ScalarType pool_norm_math_type(at::ScalarType input) {
  return input == at::kDouble ? at::kDouble : at::kFloat;
}

PoolNormShape pool_norm_shape(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                              const at::Tensor& running_mean, const at::Tensor& running_var, bool training) {
  TORCH_CHECK(input.dim() == 4, "maxpool_bn_relu: input must be N x C x H x W, got ", input.sizes());
  const at::ScalarType dtype = input.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kDouble || dtype == at::kHalf || dtype == at::kBFloat16,
              "maxpool_bn_relu: input must be float32, float64, float16 or bfloat16, got ", dtype);
  check_norm_parameters("maxpool_bn_relu", input.size(1), input, weight, bias, running_mean, running_var);
  PoolNormShape shape{input.size(0), input.size(1), input.size(2), input.size(3), input.size(2) / 2,
                      input.size(3) / 2, input.suggest_memory_format() == at::MemoryFormat::ChannelsLast};
  TORCH_CHECK(shape.pooled_height > 0 && shape.pooled_width > 0, "maxpool_bn_relu: the input (", input.sizes(),
              ") must be at least 2 x 2 for a 2x2 max-pool");
  TORCH_CHECK(!training || shape.count() > 1, "maxpool_bn_relu: expected more than 1 value per channel when "
              "training, got input size ", input.sizes(), " (pooled ", shape.pooled_height, " x ",
              shape.pooled_width, ")");
  return shape;
}

PoolNormShape pool_norm_backward_shape(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& pooled,
                                       const at::Tensor& out, const at::Tensor& weight, const at::Tensor& save_mean,
                                       const at::Tensor& save_invstd) {
  TORCH_CHECK(input.dim() == 4, "maxpool_bn_relu_backward: input must be N x C x H x W, got ", input.sizes());
  const std::vector<int64_t> pooled_size{input.size(0), input.size(1), input.size(2) / 2, input.size(3) / 2};
  for (const auto& [tensor, name] : {std::pair{&grad_out, "grad_out"}, {&pooled, "pooled"}, {&out, "out"}}) {
    TORCH_CHECK(tensor->sizes() == at::IntArrayRef(pooled_size), "maxpool_bn_relu_backward: ", name, " must be ",
                at::IntArrayRef(pooled_size), " (the pooled input), got ", tensor->sizes());
    TORCH_CHECK(tensor->scalar_type() == input.scalar_type(), "maxpool_bn_relu_backward: ", name, " is ",
                tensor->scalar_type(), ", the input ", input.scalar_type());
    TORCH_CHECK(tensor->device() == input.device(), "maxpool_bn_relu_backward: ", name, " is on ",
                tensor->device(), ", the input on ", input.device());
  }
  check_saved_norm("maxpool_bn_relu_backward", input.size(1), input, weight, save_mean, save_invstd);
  return PoolNormShape{input.size(0), input.size(1), input.size(2), input.size(3), input.size(2) / 2,
                       input.size(3) / 2, input.suggest_memory_format() == at::MemoryFormat::ChannelsLast};
}

at::Tensor pool_norm_layout(const at::Tensor& tensor, bool channels_last) {
  return tensor.contiguous(channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous);
}

PoolNormOutputs maxpool_bn_relu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                                const at::Tensor& running_mean, const at::Tensor& running_var, bool training,
                                double momentum, double eps) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gpucore::maxpool_bn_relu", "")
                             .typed<PoolNormOutputs(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                    const at::Tensor&, const at::Tensor&, bool, double, double)>();
  return op.call(input, weight, bias, running_mean, running_var, training, momentum, eps);
}

PoolNormGrads maxpool_bn_relu_backward(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& pooled,
                                       const at::Tensor& out, const at::Tensor& weight, const at::Tensor& save_mean,
                                       const at::Tensor& save_invstd, bool training) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("gpucore::maxpool_bn_relu_backward", "")
          .typed<PoolNormGrads(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                               const at::Tensor&, const at::Tensor&, const at::Tensor&, bool)>();
  return op.call(grad_out, input, pooled, out, weight, save_mean, save_invstd, training);
}

// The schemas (kernels in cpu/ and cuda/; fake kernels and the autograd formula in the Python module named here).
TORCH_LIBRARY_FRAGMENT(gpucore, m) {
  m.set_python_module("gpucore.ops");
  m.def("maxpool_bn_relu(Tensor input, Tensor weight, Tensor bias, Tensor running_mean, Tensor running_var, "
        "bool training, float momentum, float eps) -> (Tensor out, Tensor pooled, Tensor save_mean, "
        "Tensor save_invstd, Tensor new_running_mean, Tensor new_running_var)");
  m.def("maxpool_bn_relu_backward(Tensor grad_out, Tensor input, Tensor pooled, Tensor out, Tensor weight, "
        "Tensor save_mean, Tensor save_invstd, bool training) -> (Tensor grad_input, Tensor grad_weight, "
        "Tensor grad_bias)");
}

}  // namespace gpucore::ops
