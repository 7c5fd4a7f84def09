// gpucore::bn_relu_maxpool's checks and its C++ entry points through the dispatcher.
#include "ops/norm_relu_pool.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <utility>
#include <vector>

namespace gpucore::ops {

PoolNormShape norm_relu_pool_shape(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                                   const at::Tensor& running_mean, const at::Tensor& running_var, bool training) {
  TORCH_CHECK(input.dim() == 4, "bn_relu_maxpool: input must be N x C x H x W, got ", input.sizes());
  const at::ScalarType dtype = input.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kDouble || dtype == at::kHalf || dtype == at::kBFloat16,
              "bn_relu_maxpool: input must be float32, float64, float16 or bfloat16, got ", dtype);
  check_norm_parameters("bn_relu_maxpool", input.size(1), input, weight, bias, running_mean, running_var);
  TORCH_CHECK(input.size(2) > 0 && input.size(3) > 0, "bn_relu_maxpool: the input (", input.sizes(),
              ") must have at least one row and column");
  const PoolNormShape shape{input.size(0), input.size(1), input.size(2), input.size(3), stem_pooled(input.size(2)),
                            stem_pooled(input.size(3)), true};
  TORCH_CHECK(!training || shape.batch * shape.height * shape.width > 1, "bn_relu_maxpool: expected more than 1 "
              "value per channel when training, got input size ", input.sizes());
  return shape;
}

PoolNormShape norm_relu_pool_backward_shape(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& out,
                                            const at::Tensor& window, const at::Tensor& weight,
                                            const at::Tensor& save_mean, const at::Tensor& save_invstd) {
  TORCH_CHECK(input.dim() == 4, "bn_relu_maxpool_backward: input must be N x C x H x W, got ", input.sizes());
  const std::vector<int64_t> pooled{input.size(0), input.size(1), stem_pooled(input.size(2)),
                                    stem_pooled(input.size(3))};
  for (const auto& [tensor, name, dtype] : {std::tuple{&grad_out, "grad_out", input.scalar_type()},
                                            {&out, "out", input.scalar_type()}, {&window, "window", at::kByte}}) {
    TORCH_CHECK(tensor->sizes() == at::IntArrayRef(pooled), "bn_relu_maxpool_backward: ", name, " must be ",
                at::IntArrayRef(pooled), " (the pooled input), got ", tensor->sizes());
    TORCH_CHECK(tensor->scalar_type() == dtype, "bn_relu_maxpool_backward: ", name, " must be ", dtype, ", got ",
                tensor->scalar_type());
    TORCH_CHECK(tensor->device() == input.device(), "bn_relu_maxpool_backward: ", name, " is on ", tensor->device(),
                ", the input on ", input.device());
  }
  check_saved_norm("bn_relu_maxpool_backward", input.size(1), input, weight, save_mean, save_invstd);
  return PoolNormShape{input.size(0), input.size(1), input.size(2), input.size(3), pooled[2], pooled[3], true};
}

NormReluPoolOutputs bn_relu_maxpool(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                                    const at::Tensor& running_mean, const at::Tensor& running_var, bool training,
                                    double momentum, double eps) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gpucore::bn_relu_maxpool", "")
                             .typed<NormReluPoolOutputs(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                        const at::Tensor&, const at::Tensor&, bool, double, double)>();
  return op.call(input, weight, bias, running_mean, running_var, training, momentum, eps);
}

NormReluPoolGrads bn_relu_maxpool_backward(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& out,
                                           const at::Tensor& window, const at::Tensor& weight,
                                           const at::Tensor& save_mean, const at::Tensor& save_invstd, bool training) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gpucore::bn_relu_maxpool_backward", "")
                             .typed<NormReluPoolGrads(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                      const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                      const at::Tensor&, bool)>();
  return op.call(grad_out, input, out, window, weight, save_mean, save_invstd, training);
}

// The schemas (the CPU kernel in cpu/; the fake kernel and the autograd formula in the Python module named here).
TORCH_LIBRARY_FRAGMENT(gpucore, m) {
  m.set_python_module("gpucore.ops");
  m.def("bn_relu_maxpool(Tensor input, Tensor weight, Tensor bias, Tensor running_mean, Tensor running_var, "
        "bool training, float momentum, float eps) -> (Tensor out, Tensor window, Tensor save_mean, "
        "Tensor save_invstd, Tensor new_running_mean, Tensor new_running_var)");
  m.def("bn_relu_maxpool_backward(Tensor grad_out, Tensor input, Tensor out, Tensor window, Tensor weight, "
        "Tensor save_mean, Tensor save_invstd, bool training) -> (Tensor grad_input, Tensor grad_weight, "
        "Tensor grad_bias)");
}

}  // namespace gpucore::ops
