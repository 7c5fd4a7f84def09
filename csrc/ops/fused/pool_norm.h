#pragma once
// A 2x2 stride-2 max-pool, batch norm and ReLU as one torch op (namespace gpucore), with CPU and CUDA kernels:
// FastCNN's blocks (conv -> MaxPool2d(2) -> BatchNorm2d -> ReLU) in two passes over the pooled values forward
// and one over the input backward, where torch runs five ops and zero-fills the pool's gradient.
//
//   maxpool_bn_relu(Tensor input, Tensor weight, Tensor bias, Tensor running_mean, Tensor running_var,
//                   bool training, float momentum, float eps)
//       -> (Tensor out, Tensor pooled, Tensor save_mean, Tensor save_invstd, Tensor new_running_mean,
//           Tensor new_running_var)
//       input: N x C x H x W, float32, float64, float16 or bfloat16, contiguous or channels-last (any other
//       strides are made contiguous); the pool takes floor(H / 2) x floor(W / 2) windows (max_pool2d(x, 2)).
//       weight, bias, running_mean, running_var: C values, the input's dtype or float32 (one dtype for the four).
//       training: batch statistics over N x H/2 x W/2 (at least 2 values per channel), new_running_* =
//       (1 - momentum) * running + momentum * batch (the variance unbiased), as torch's BatchNorm2d; else the
//       running statistics, and new_running_* are empty. Computed in float32 (float64 for float64 input).
//       out = relu(batch_norm(max_pool2d(input, 2))) and pooled = max_pool2d(input, 2) in the input's dtype and
//       memory format; save_mean and save_invstd (C, float32; float64 for float64): the statistics used.
//       The op is functional: the caller copies new_running_* into its buffers (MaxPoolBatchNormReLU does).
//
//   maxpool_bn_relu_backward(Tensor grad_out, Tensor input, Tensor pooled, Tensor out, Tensor weight,
//                            Tensor save_mean, Tensor save_invstd, bool training)
//       -> (Tensor grad_input, Tensor grad_weight, Tensor grad_bias)
//       The gradients of input, weight and bias given out's (ReLU's mask from out > 0): each 2x2 window writes
//       its four input gradients (the maximum torch's max_pool2d picks gets the value, the others zero; rows and
//       columns outside every window zero), so nothing is zero-filled first.
#include <ATen/core/Tensor.h>

#include <tuple>

namespace gpucore::ops {

// The checked shape of one call.
struct PoolNormShape {
  int64_t batch, channels, height, width, pooled_height, pooled_width;
  bool channels_last;
  int64_t count() const { return batch * pooled_height * pooled_width; }  // values per channel
};

// Checks the batch norm's four per-channel tensors (`channels` values of one dtype, the input's or float32, on the
// input's device); errors begin with op.
void check_norm_parameters(const char* op, int64_t channels, const at::Tensor& input, const at::Tensor& weight,
                           const at::Tensor& bias, const at::Tensor& running_mean, const at::Tensor& running_var);
// Checks what a backward gets of the forward's batch norm: its weight (`channels` values, the input's dtype or
// float32) and the saved statistics (`channels` values of the math type), all on the input's device.
void check_saved_norm(const char* op, int64_t channels, const at::Tensor& input, const at::Tensor& weight,
                      const at::Tensor& save_mean, const at::Tensor& save_invstd);
// Checks the forward's arguments (TORCH_CHECK) and gives its shape.
PoolNormShape pool_norm_shape(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                              const at::Tensor& running_mean, const at::Tensor& running_var, bool training);
// Checks the backward's arguments against the forward's.
PoolNormShape pool_norm_backward_shape(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& pooled,
                                       const at::Tensor& out, const at::Tensor& weight, const at::Tensor& save_mean,
                                       const at::Tensor& save_invstd);
// The input in the memory format the kernels read (contiguous or channels-last).
at::Tensor pool_norm_layout(const at::Tensor& tensor, bool channels_last);
// float32 for float32, float16 and bfloat16; float64 for float64.
at::ScalarType pool_norm_math_type(at::ScalarType input);

using PoolNormOutputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using PoolNormGrads = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// The ops through the dispatcher (CPU or CUDA kernel by the input's device).
PoolNormOutputs maxpool_bn_relu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                                const at::Tensor& running_mean, const at::Tensor& running_var, bool training,
                                double momentum, double eps);
PoolNormGrads maxpool_bn_relu_backward(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& pooled,
                                       const at::Tensor& out, const at::Tensor& weight, const at::Tensor& save_mean,
                                       const at::Tensor& save_invstd, bool training);

}  // namespace gpucore::ops
