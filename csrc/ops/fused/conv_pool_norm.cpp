// gpucore::conv3x3_maxpool_bn_relu's checks and its C++ entry points through the dispatcher.
#include "ops/fused/conv_pool_norm.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <vector>

namespace gpucore::ops {
namespace {

constexpr const char* kOp = "conv3x3_maxpool_bn_relu";

// torch's CPU convolution writes channels-last when its input or weight is.
bool convolution_channels_last(const at::Tensor& input, const at::Tensor& conv_weight) {
  return input.suggest_memory_format() == at::MemoryFormat::ChannelsLast ||
         conv_weight.suggest_memory_format() == at::MemoryFormat::ChannelsLast;
}

}  // namespace

ConvPoolNormShape conv_pool_norm_shape(const at::Tensor& input, const at::Tensor& conv_weight,
                                       const at::Tensor& weight, const at::Tensor& bias,
                                       const at::Tensor& running_mean, const at::Tensor& running_var, bool training) {
  TORCH_CHECK(input.dim() == 4, kOp, ": input must be N x Cin x H x W, got ", input.sizes());
  const at::ScalarType dtype = input.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kDouble || dtype == at::kHalf || dtype == at::kBFloat16, kOp,
              ": input must be float32, float64, float16 or bfloat16, got ", dtype);
  TORCH_CHECK(conv_weight.dim() == 4 && conv_weight.size(1) == input.size(1) && conv_weight.size(2) == 3 &&
                  conv_weight.size(3) == 3,
              kOp, ": conv_weight must be C x ", input.size(1), " x 3 x 3 for an input of ", input.size(1),
              " channels, got ", conv_weight.sizes());
  TORCH_CHECK(conv_weight.scalar_type() == dtype, kOp, ": conv_weight must be the input's dtype (", dtype, "), got ",
              conv_weight.scalar_type());
  TORCH_CHECK(conv_weight.device() == input.device(), kOp, ": conv_weight is on ", conv_weight.device(),
              ", the input on ", input.device());
  const int64_t channels = conv_weight.size(0);
  TORCH_CHECK(channels > 0, kOp, ": conv_weight must have at least one output channel, got ", conv_weight.sizes());
  check_norm_parameters(kOp, channels, input, weight, bias, running_mean, running_var);
  const PoolNormShape pooled{input.size(0), channels, input.size(2), input.size(3), input.size(2) / 2,
                             input.size(3) / 2, true};
  TORCH_CHECK(pooled.pooled_height > 0 && pooled.pooled_width > 0, kOp, ": the input (", input.sizes(),
              ") must be at least 2 x 2 for a 2x2 max-pool");
  TORCH_CHECK(!training || pooled.count() > 1, kOp, ": expected more than 1 value per channel when training, got "
              "input size ", input.sizes(), " (pooled ", pooled.pooled_height, " x ", pooled.pooled_width, ")");
  return {pooled, input.size(1), convolution_channels_last(input, conv_weight)};
}

ConvPoolNormShape conv_pool_norm_backward_shape(const at::Tensor& grad_out, const at::Tensor& input,
                                                const at::Tensor& conv_weight, const at::Tensor& pooled,
                                                const at::Tensor& window, const at::Tensor& out,
                                                const at::Tensor& weight, const at::Tensor& save_mean,
                                                const at::Tensor& save_invstd) {
  const std::string op = std::string(kOp) + "_backward";
  TORCH_CHECK(input.dim() == 4 && conv_weight.dim() == 4 && conv_weight.size(1) == input.size(1), op,
              ": input (N x Cin x H x W) and conv_weight (C x Cin x 3 x 3) do not match: ", input.sizes(), " and ",
              conv_weight.sizes());
  const int64_t channels = conv_weight.size(0);
  const std::vector<int64_t> pooled_size{input.size(0), channels, input.size(2) / 2, input.size(3) / 2};
  for (const auto& [tensor, name] :
       {std::pair{&grad_out, "grad_out"}, {&pooled, "pooled"}, {&out, "out"}, {&window, "window"}}) {
    TORCH_CHECK(tensor->sizes() == at::IntArrayRef(pooled_size), op, ": ", name, " must be ",
                at::IntArrayRef(pooled_size), " (the pooled convolution), got ", tensor->sizes());
    TORCH_CHECK(tensor->scalar_type() == (tensor == &window ? at::kByte : input.scalar_type()), op, ": ", name,
                " is ", tensor->scalar_type(), ", expected ", (tensor == &window ? at::kByte : input.scalar_type()));
    TORCH_CHECK(tensor->device() == input.device(), op, ": ", name, " is on ", tensor->device(), ", the input on ",
                input.device());
  }
  check_saved_norm(op.c_str(), channels, input, weight, save_mean, save_invstd);
  const PoolNormShape shape{input.size(0), channels, input.size(2), input.size(3), input.size(2) / 2,
                            input.size(3) / 2, true};
  return {shape, input.size(1), convolution_channels_last(input, conv_weight)};
}

ConvPoolNormOutputs conv3x3_maxpool_bn_relu(const at::Tensor& input, const at::Tensor& conv_weight,
                                            const at::Tensor& weight, const at::Tensor& bias,
                                            const at::Tensor& running_mean, const at::Tensor& running_var,
                                            bool training, double momentum, double eps) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("gpucore::conv3x3_maxpool_bn_relu", "")
          .typed<ConvPoolNormOutputs(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                     const at::Tensor&, const at::Tensor&, bool, double, double)>();
  return op.call(input, conv_weight, weight, bias, running_mean, running_var, training, momentum, eps);
}

ConvPoolNormGrads conv3x3_maxpool_bn_relu_backward(const at::Tensor& grad_out, const at::Tensor& input,
                                                   const at::Tensor& conv_weight, const at::Tensor& pooled,
                                                   const at::Tensor& window, const at::Tensor& out,
                                                   const at::Tensor& weight, const at::Tensor& save_mean,
                                                   const at::Tensor& save_invstd, bool training) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("gpucore::conv3x3_maxpool_bn_relu_backward", "")
          .typed<ConvPoolNormGrads(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                   const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                   const at::Tensor&, bool)>();
  return op.call(grad_out, input, conv_weight, pooled, window, out, weight, save_mean, save_invstd, training);
}

// The schemas (the CPU kernel in cpu/; fake kernels and the autograd formula in the Python module named here).
TORCH_LIBRARY_FRAGMENT(gpucore, m) {
  m.set_python_module("gpucore.ops");
  m.def("conv3x3_maxpool_bn_relu(Tensor input, Tensor conv_weight, Tensor weight, Tensor bias, "
        "Tensor running_mean, Tensor running_var, bool training, float momentum, float eps) -> (Tensor out, "
        "Tensor pooled, Tensor window, Tensor save_mean, Tensor save_invstd, Tensor new_running_mean, "
        "Tensor new_running_var)");
  m.def("conv3x3_maxpool_bn_relu_backward(Tensor grad_out, Tensor input, Tensor conv_weight, Tensor pooled, "
        "Tensor window, Tensor out, Tensor weight, Tensor save_mean, Tensor save_invstd, bool training) -> "
        "(Tensor grad_conv_weight, Tensor grad_weight, Tensor grad_bias)");
}

}  // namespace gpucore::ops
