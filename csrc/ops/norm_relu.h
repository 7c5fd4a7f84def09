#pragma once
// Batch norm, an optional residual add and ReLU as one torch op (namespace gpucore, CPU kernel): a ResNet's
// BatchNorm2d -> ReLU (each block's first) and BatchNorm2d -> + identity -> ReLU (each block's end). Where torch runs
// batch_norm, add and relu forward and threshold_backward and batch_norm_backward backward, each a pass over the
// activations, this op makes two statistics passes and one output pass forward, one sums pass and one gradient pass
// backward (the ReLU's mask read from out inside both). The batch norm is maxpool_bn_relu's (cpu/pooled_norm.h)
// over the unpooled input.
//
//   bn_add_relu(Tensor input, Tensor? residual, Tensor weight, Tensor bias, Tensor running_mean,
//               Tensor running_var, bool training, float momentum, float eps)
//       -> (Tensor out, Tensor save_mean, Tensor save_invstd, Tensor new_running_mean, Tensor new_running_var)
//       input: N x C x H x W, float32, float64, float16 or bfloat16, contiguous or channels-last (any other strides
//       are made contiguous); residual: None or the input's size and dtype (laid out as the input).
//       weight, bias, running_*: as maxpool_bn_relu's (pool_norm.h). training: batch statistics over N x H x W.
//       out = relu(batch_norm(input) + residual) in the input's dtype and memory format, the batch norm's output
//       and the sum each rounded to that dtype as torch's ops write them; the statistics as maxpool_bn_relu's.
//
//   bn_add_relu_backward(Tensor grad_out, Tensor input, Tensor out, Tensor weight, Tensor save_mean,
//                        Tensor save_invstd, bool training, bool residual)
//       -> (Tensor grad_input, Tensor grad_residual, Tensor grad_weight, Tensor grad_bias)
//       The gradients given out's (ReLU's mask from out > 0, as threshold_backward's); grad_residual is the masked
//       gradient (empty when residual is false).
#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

#include "ops/pool_norm.h"

namespace gpucore::ops {

// Checks the forward's arguments (TORCH_CHECK) and gives its shape: the pooled size is the input's.
PoolNormShape norm_relu_shape(const at::Tensor& input, const std::optional<at::Tensor>& residual,
                              const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& running_mean,
                              const at::Tensor& running_var, bool training);
// Checks the backward's arguments against the forward's.
PoolNormShape norm_relu_backward_shape(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& out,
                                       const at::Tensor& weight, const at::Tensor& save_mean,
                                       const at::Tensor& save_invstd);

using NormReluOutputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using NormReluGrads = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// The ops through the dispatcher.
NormReluOutputs bn_add_relu(const at::Tensor& input, const std::optional<at::Tensor>& residual,
                            const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& running_mean,
                            const at::Tensor& running_var, bool training, double momentum, double eps);
NormReluGrads bn_add_relu_backward(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& out,
                                   const at::Tensor& weight, const at::Tensor& save_mean,
                                   const at::Tensor& save_invstd, bool training, bool residual);

}  // namespace gpucore::ops
