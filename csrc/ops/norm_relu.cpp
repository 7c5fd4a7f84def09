// gpucore::bn_add_relu's checks and its C++ entry points through the dispatcher.
#include "ops/norm_relu.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <utility>

namespace gpucore::ops {
namespace {

// `tensor` has the input's size, dtype and device; errors name it.
void check_like_input(const char* op, const at::Tensor& tensor, const char* name, const at::Tensor& input) {
  TORCH_CHECK(tensor.sizes() == input.sizes(), op, ": ", name, " must be the input's size ", input.sizes(), ", got ",
              tensor.sizes());
  TORCH_CHECK(tensor.scalar_type() == input.scalar_type(), op, ": ", name, " is ", tensor.scalar_type(),
              ", the input ", input.scalar_type());
  TORCH_CHECK(tensor.device() == input.device(), op, ": ", name, " is on ", tensor.device(), ", the input on ",
              input.device());
}

PoolNormShape unpooled_shape(const at::Tensor& input) {
  return PoolNormShape{input.size(0), input.size(1), input.size(2), input.size(3), input.size(2), input.size(3),
                       input.suggest_memory_format() == at::MemoryFormat::ChannelsLast};
}

}  // namespace

PoolNormShape norm_relu_shape(const at::Tensor& input, const std::optional<at::Tensor>& residual,
                              const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& running_mean,
                              const at::Tensor& running_var, bool training) {
  TORCH_CHECK(input.dim() == 4, "bn_add_relu: input must be N x C x H x W, got ", input.sizes());
  const at::ScalarType dtype = input.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kDouble || dtype == at::kHalf || dtype == at::kBFloat16,
              "bn_add_relu: input must be float32, float64, float16 or bfloat16, got ", dtype);
  check_norm_parameters("bn_add_relu", input.size(1), input, weight, bias, running_mean, running_var);
  if (residual.has_value()) check_like_input("bn_add_relu", *residual, "residual", input);
  const PoolNormShape shape = unpooled_shape(input);
  TORCH_CHECK(!training || shape.count() > 1, "bn_add_relu: expected more than 1 value per channel when training, "
              "got input size ", input.sizes());
  return shape;
}

PoolNormShape norm_relu_backward_shape(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& out,
                                       const at::Tensor& weight, const at::Tensor& save_mean,
                                       const at::Tensor& save_invstd) {
  TORCH_CHECK(input.dim() == 4, "bn_add_relu_backward: input must be N x C x H x W, got ", input.sizes());
  check_like_input("bn_add_relu_backward", grad_out, "grad_out", input);
  check_like_input("bn_add_relu_backward", out, "out", input);
  check_saved_norm("bn_add_relu_backward", input.size(1), input, weight, save_mean, save_invstd);
  return unpooled_shape(input);
}

NormReluOutputs bn_add_relu(const at::Tensor& input, const std::optional<at::Tensor>& residual,
                            const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& running_mean,
                            const at::Tensor& running_var, bool training, double momentum, double eps) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gpucore::bn_add_relu", "")
                             .typed<NormReluOutputs(const at::Tensor&, const std::optional<at::Tensor>&,
                                                    const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                    const at::Tensor&, bool, double, double)>();
  return op.call(input, residual, weight, bias, running_mean, running_var, training, momentum, eps);
}

NormReluGrads bn_add_relu_backward(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& out,
                                   const at::Tensor& weight, const at::Tensor& save_mean,
                                   const at::Tensor& save_invstd, bool training, bool residual) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gpucore::bn_add_relu_backward", "")
                             .typed<NormReluGrads(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                  const at::Tensor&, const at::Tensor&, const at::Tensor&, bool,
                                                  bool)>();
  return op.call(grad_out, input, out, weight, save_mean, save_invstd, training, residual);
}

// The schemas (the CPU kernel in cpu/; the fake kernel and the autograd formula in the Python module named here).
TORCH_LIBRARY_FRAGMENT(gpucore, m) {
  m.set_python_module("gpucore.ops");
  m.def("bn_add_relu(Tensor input, Tensor? residual, Tensor weight, Tensor bias, Tensor running_mean, "
        "Tensor running_var, bool training, float momentum, float eps) -> (Tensor out, Tensor save_mean, "
        "Tensor save_invstd, Tensor new_running_mean, Tensor new_running_var)");
  m.def("bn_add_relu_backward(Tensor grad_out, Tensor input, Tensor out, Tensor weight, Tensor save_mean, "
        "Tensor save_invstd, bool training, bool residual) -> (Tensor grad_input, Tensor grad_residual, "
        "Tensor grad_weight, Tensor grad_bias)");
}

}  // namespace gpucore::ops
