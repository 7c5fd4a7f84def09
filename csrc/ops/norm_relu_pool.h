#pragma once
// Batch norm, ReLU and a 3x3 stride-2 max-pool (padding 1) as one torch op (namespace gpucore, CPU kernel): a
// ResNet's stem after its first convolution (BatchNorm2d -> ReLU -> MaxPool2d(3, 2, 1), torchvision's and timm's).
// Torch writes the ReLU's full-size output and, backward, its full-size gradient (zero-filled, then scattered to by
// the pool); this op writes only the pooled output and which element of each window was its maximum, and the
// backward gathers each input element's gradient from the (at most four) windows that picked it. The batch statistics
// are maxpool_bn_relu's (cpu/pooled_norm.h), over the input.
//
//   bn_relu_maxpool(Tensor input, Tensor weight, Tensor bias, Tensor running_mean, Tensor running_var,
//                   bool training, float momentum, float eps)
//       -> (Tensor out, Tensor window, Tensor save_mean, Tensor save_invstd, Tensor new_running_mean,
//           Tensor new_running_var)
//       input: N x C x H x W, float32, float64, float16 or bfloat16, any strides (read channels-last).
//       weight, bias, running_*: as maxpool_bn_relu's (pool_norm.h).
//       out = max_pool2d(relu(batch_norm(input)), 3, stride 2, padding 1): N x C x (H - 1) / 2 + 1 x
//       (W - 1) / 2 + 1, channels-last, each value the ReLU's output rounded to the input's dtype (torch's pool
//       input), the maximum by max_pool2d's rule (a window read row by row; a value replaces the maximum when greater
//       or NaN). window: uint8 of out's size and layout, 3 * row + column of the maximum in its window. The
//       statistics as maxpool_bn_relu's.
//
//   bn_relu_maxpool_backward(Tensor grad_out, Tensor input, Tensor out, Tensor window, Tensor weight,
//                            Tensor save_mean, Tensor save_invstd, bool training)
//       -> (Tensor grad_input, Tensor grad_weight, Tensor grad_bias)
//       Each input element's gradient: the sum of the gradients of the windows whose maximum it is (rounded to the
//       input's dtype, as max_pool2d's backward writes it), where that maximum is > 0 or NaN (the ReLU's mask), then
//       the batch norm's backward. grad_input channels-last.
#include <ATen/core/Tensor.h>

#include <tuple>

#include "ops/pool_norm.h"

namespace gpucore::ops {

// The pooled size of a 3x3 stride-2 max-pool with padding 1 over `size` values.
inline int64_t stem_pooled(int64_t size) { return (size - 1) / 2 + 1; }

// Checks the forward's arguments (TORCH_CHECK) and gives its shape (pooled_*: the pool's output; channels_last).
PoolNormShape norm_relu_pool_shape(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                                   const at::Tensor& running_mean, const at::Tensor& running_var, bool training);
// Checks the backward's arguments against the forward's.
PoolNormShape norm_relu_pool_backward_shape(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& out,
                                            const at::Tensor& window, const at::Tensor& weight,
                                            const at::Tensor& save_mean, const at::Tensor& save_invstd);

using NormReluPoolOutputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using NormReluPoolGrads = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// The ops through the dispatcher.
NormReluPoolOutputs bn_relu_maxpool(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                                    const at::Tensor& running_mean, const at::Tensor& running_var, bool training,
                                    double momentum, double eps);
NormReluPoolGrads bn_relu_maxpool_backward(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& out,
                                           const at::Tensor& window, const at::Tensor& weight,
                                           const at::Tensor& save_mean, const at::Tensor& save_invstd, bool training);

}  // namespace gpucore::ops
