#pragma once
// A network's first block as one torch op (namespace gpucore, CPU kernel): a 3x3 convolution (stride 1, padding 1,
// no bias) of an input with few channels, a 2x2 stride-2 max-pool, batch norm and ReLU. FastCNN's first block
// (conv -> MaxPool2d(2) -> BatchNorm2d -> ReLU) where torch writes the convolution's full-size output and its
// gradient, four times the pooled size (C times the input's): this op computes each window's four convolution
// values and keeps their maximum and its place, and the backward sums the convolution weights' gradient from the
// pooled gradients and the input at those places. The input's gradient is not computed (a first layer's input
// needs none; the autograd formula refuses a call that asks for it).
//
//   conv3x3_maxpool_bn_relu(Tensor input, Tensor conv_weight, Tensor weight, Tensor bias, Tensor running_mean,
//                           Tensor running_var, bool training, float momentum, float eps)
//       -> (Tensor out, Tensor pooled, Tensor window, Tensor save_mean, Tensor save_invstd,
//           Tensor new_running_mean, Tensor new_running_var)
//       input: N x Cin x H x W, float32, float64, float16 or bfloat16, any strides; conv_weight: C x Cin x 3 x 3
//       of the input's dtype (under autocast the caller casts both, as autocast casts conv2d's). The convolution
//       adds in float32 (float64 for float64), each value rounded to the input's dtype before the pool, as a
//       convolution in that dtype writes it. weight, bias, running_*: as maxpool_bn_relu's (pool_norm.h), of C.
//       out = relu(batch_norm(max_pool2d(conv2d(input, conv_weight, padding=1), 2))) in the memory format torch's
//       CPU convolution would give (channels-last when the input or conv_weight is);
//       pooled (the pooled convolution values) and window (uint8: 0 to 3, which element of each 2x2 window is the
//       maximum, by max_pool2d's rule) channels-last; the statistics as maxpool_bn_relu's.
//
//   conv3x3_maxpool_bn_relu_backward(Tensor grad_out, Tensor input, Tensor conv_weight, Tensor pooled,
//                                    Tensor window, Tensor out, Tensor weight, Tensor save_mean,
//                                    Tensor save_invstd, bool training)
//       -> (Tensor grad_conv_weight, Tensor grad_weight, Tensor grad_bias)
#include <ATen/core/Tensor.h>

#include <tuple>

#include "ops/fused/pool_norm.h"

namespace gpucore::ops {

// The checked shape of one call: the pooled tensor's (channels = the convolution's outputs, height and width the
// input's) and the input's channels.
struct ConvPoolNormShape {
  PoolNormShape pooled;  // channels_last: always (the kernels' layout)
  int64_t in_channels;
  bool out_channels_last;  // out's memory format, torch's convolution's
};

ConvPoolNormShape conv_pool_norm_shape(const at::Tensor& input, const at::Tensor& conv_weight,
                                       const at::Tensor& weight, const at::Tensor& bias,
                                       const at::Tensor& running_mean, const at::Tensor& running_var, bool training);
ConvPoolNormShape conv_pool_norm_backward_shape(const at::Tensor& grad_out, const at::Tensor& input,
                                                const at::Tensor& conv_weight, const at::Tensor& pooled,
                                                const at::Tensor& window, const at::Tensor& out,
                                                const at::Tensor& weight, const at::Tensor& save_mean,
                                                const at::Tensor& save_invstd);

using ConvPoolNormOutputs =
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using ConvPoolNormGrads = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// The ops through the dispatcher.
ConvPoolNormOutputs conv3x3_maxpool_bn_relu(const at::Tensor& input, const at::Tensor& conv_weight,
                                            const at::Tensor& weight, const at::Tensor& bias,
                                            const at::Tensor& running_mean, const at::Tensor& running_var,
                                            bool training, double momentum, double eps);
ConvPoolNormGrads conv3x3_maxpool_bn_relu_backward(const at::Tensor& grad_out, const at::Tensor& input,
                                                   const at::Tensor& conv_weight, const at::Tensor& pooled,
                                                   const at::Tensor& window, const at::Tensor& out,
                                                   const at::Tensor& weight, const at::Tensor& save_mean,
                                                   const at::Tensor& save_invstd, bool training);

}  // namespace gpucore::ops
