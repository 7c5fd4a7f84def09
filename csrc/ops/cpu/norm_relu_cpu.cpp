// CPU kernel of gpucore::bn_add_relu and its backward (norm_relu.h): pooled_norm.h's batch norm over the input
// itself (no pooling), with the residual added in its output pass; the backward's rows (one row of one plane for
// contiguous tensors, one row of all channels for channels-last ones) split among threads.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <tuple>
#include <vector>

#include "ops/cpu/pooled_norm.h"
#include "ops/cpu/vector_clones.h"
#include "ops/norm_relu.h"
#include "ops/pool_norm_math.h"

namespace gpucore::ops {
namespace {

using pooled_norm::Channels;

// One channels-last row's gradients (W pixels of C channels): the input's, and the residual's (the masked
// gradient) where grad_residual is not null.
template <typename T>
GPUCORE_VECTOR_CLONES void backward_row(const pooled_norm::GradCoefficients<at::opmath_type<T>>& co,
                                        const T* __restrict g, const T* __restrict o, const T* __restrict x,
                                        T* __restrict grad_input, T* __restrict grad_residual, int64_t W, int64_t C) {
  using M = at::opmath_type<T>;
  pooled_norm::pooled_row_grads<T, T>(co, g, o, x, W, C, grad_input, C);
  if (grad_residual != nullptr) {
    for (int64_t i = 0; i < W * C; ++i) grad_residual[i] = static_cast<T>(pooled_norm::masked(M(g[i]), M(o[i])));
  }
}

NormReluOutputs bn_add_relu_cpu(const at::Tensor& input_, const std::optional<at::Tensor>& residual_,
                                const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& running_mean,
                                const at::Tensor& running_var, bool training, double momentum, double eps) {
  const PoolNormShape s = norm_relu_shape(input_, residual_, weight, bias, running_mean, running_var, training);
  const at::Tensor input = pool_norm_layout(input_, s.channels_last);
  const at::Tensor residual = residual_.has_value() ? pool_norm_layout(*residual_, s.channels_last) : at::Tensor();
  at::Tensor out = at::empty_like(input);
  const at::TensorOptions math = input.options().dtype(pool_norm_math_type(input.scalar_type()));
  Channels stats = training ? Channels{} : pooled_norm::running_channels(running_mean, running_var, eps);
  const std::vector<double> gamma = pooled_norm::channel_values<double>(weight),
                            beta = pooled_norm::channel_values<double>(bias);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "bn_add_relu_cpu", [&] {
    pooled_norm::normalize_pooled<scalar_t>(
        s, [](int64_t, int64_t) {}, input.const_data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), training, gamma,
        beta, stats, eps, residual.defined() ? residual.const_data_ptr<scalar_t>() : nullptr);
  });
  at::Tensor new_mean = at::empty({0}, running_mean.options()), new_var = at::empty({0}, running_var.options());
  if (training) std::tie(new_mean, new_var) = pooled_norm::updated_running(s, running_mean, running_var, momentum, stats);
  return {out, pooled_norm::channel_tensor(stats.mean, math), pooled_norm::channel_tensor(stats.invstd, math),
          new_mean, new_var};
}

template <typename T>
void backward_kernel(const PoolNormShape& s, const T* __restrict grad, const T* __restrict x,
                     const T* __restrict out, T* __restrict grad_input, T* __restrict grad_residual, bool training,
                     const std::vector<double>& gamma, const Channels& stats, std::vector<double>& grad_weight,
                     std::vector<double>& grad_bias) {
  using M = at::opmath_type<T>;
  const int64_t C = s.channels, H = s.height, W = s.width;
  const pooled_norm::GradCoefficients<M> co =
      pooled_norm::grad_coefficients<T>(s, grad, x, out, training, gamma, stats);
  grad_weight = co.grad_weight;
  grad_bias = co.grad_bias;
  const int64_t lanes = s.channels_last ? C : 1;
  const int64_t rows = s.channels_last ? s.batch * H : s.batch * C * H;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, W * lanes));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t at = r * W * lanes;
      T* __restrict gr = grad_residual == nullptr ? nullptr : grad_residual + at;
      if (s.channels_last) {
        backward_row<T>(co, grad + at, out + at, x + at, grad_input + at, gr, W, C);
        continue;
      }
      const int64_t c = (r / H) % C;
      const M m = co.mean[c], mg = co.mean_g[c], kc = co.k[c], gn = co.gain[c];
      for (int64_t w = 0; w < W; ++w) {
        const M gm = pooled_norm::masked(M(grad[at + w]), M(out[at + w]));
        grad_input[at + w] = static_cast<T>(pooled_grad<M>(gm, true, M(x[at + w]), m, mg, kc, gn));
        if (gr != nullptr) gr[w] = static_cast<T>(gm);
      }
    }
  });
}

NormReluGrads bn_add_relu_backward_cpu(const at::Tensor& grad_out, const at::Tensor& input_, const at::Tensor& out,
                                       const at::Tensor& weight, const at::Tensor& save_mean,
                                       const at::Tensor& save_invstd, bool training, bool residual) {
  const PoolNormShape s = norm_relu_backward_shape(grad_out, input_, out, weight, save_mean, save_invstd);
  const at::Tensor input = pool_norm_layout(input_, s.channels_last);
  const at::Tensor grad = pool_norm_layout(grad_out, s.channels_last);
  const at::Tensor out_values = pool_norm_layout(out, s.channels_last);
  at::Tensor grad_input = at::empty_like(input);
  at::Tensor grad_residual = residual ? at::empty_like(input) : at::empty({0}, input.options());
  const Channels stats = pooled_norm::saved_channels(save_mean, save_invstd);
  const std::vector<double> gamma = pooled_norm::channel_values<double>(weight);
  std::vector<double> grad_weight, grad_bias;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "bn_add_relu_backward_cpu", [&] {
    backward_kernel<scalar_t>(s, grad.const_data_ptr<scalar_t>(), input.const_data_ptr<scalar_t>(),
                              out_values.const_data_ptr<scalar_t>(), grad_input.data_ptr<scalar_t>(),
                              residual ? grad_residual.data_ptr<scalar_t>() : nullptr, training, gamma, stats,
                              grad_weight, grad_bias);
  });
  return {grad_input, grad_residual, pooled_norm::channel_tensor(grad_weight, weight.options()),
          pooled_norm::channel_tensor(grad_bias, weight.options())};
}

}  // namespace

TORCH_LIBRARY_IMPL(gpucore, CPU, m) {
  m.impl("bn_add_relu", &bn_add_relu_cpu);
  m.impl("bn_add_relu_backward", &bn_add_relu_backward_cpu);
}

}  // namespace gpucore::ops
