// CPU kernels of gpucore::maxpool_bn_relu and its backward (pool_norm.h). The pooled tensor's rows (one pooled row
// of one plane for contiguous tensors, one pooled row of all channels for channels-last ones) are split among
// threads; the batch norm over the pooled values is pooled_norm.h's, shared with conv3x3_maxpool_bn_relu.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <tuple>
#include <type_traits>
#include <vector>

#include "ops/cpu/pooled_norm.h"
#include "ops/cpu/vector_clones.h"
#include "ops/fused/pool_norm.h"
#include "ops/pool_norm_math.h"

namespace gpucore::ops {
namespace {

using pooled_norm::Channels;

// The window's four elements' gradients, branch-free (so the loops vectorise): the maximum torch's max_pool2d picks
// (window_argmax's rule) gets gy, the others zero.
template <typename T, typename M>
__attribute__((always_inline)) inline void route(M a, M b, M c, M d, T gy, T* ga, T* gb, T* gc, T* gd) {
  const bool tb = (b > a) | (b != b);
  const M best_ab = tb ? b : a;
  const bool tc = (c > best_ab) | (c != c);
  const M best_abc = tc ? c : best_ab;
  const bool td = (d > best_abc) | (d != d);
  const T zero = T(0);
  const T after_d = td ? zero : gy;  // gy unless d is the maximum
  const T after_c = tc ? zero : after_d;
  *gd = td ? gy : zero;
  *gc = tc ? after_d : zero;
  *gb = tb ? after_c : zero;
  *ga = tb ? zero : after_c;
}

// One channels-last pooled row's backward (OW windows of C channels; restrict parameters: the loops vectorise):
// the pooled values' gradients into gys, then route()d to the windows' elements in g0 (upper row) and g1.
template <typename T>
__attribute__((always_inline)) inline void backward_row(const pooled_norm::GradCoefficients<at::opmath_type<T>>& co,
                                                        const T* __restrict g, const T* __restrict o,
                                                        const T* __restrict y, const T* __restrict x0,
                                                        const T* __restrict x1, T* __restrict gys, T* __restrict g0,
                                                        T* __restrict g1, int64_t OW, int64_t C) {
  using M = at::opmath_type<T>;
  pooled_norm::pooled_row_grads<T, T>(co, g, o, y, OW, C, gys, C);
  for (int64_t ow = 0; ow < OW; ++ow) {
    const int64_t w = 2 * ow * C, i = ow * C;
    for (int64_t c = 0; c < C; ++c) {
      route<T, M>(M(x0[w + c]), M(x0[w + C + c]), M(x1[w + c]), M(x1[w + C + c]), gys[i + c], g0 + w + c,
                  g0 + w + C + c, g1 + w + c, g1 + w + C + c);
    }
  }
}

// One channels-last pooled row's maxima (OW windows of C channels) from input rows r0 and r1.
template <typename T>
__attribute__((always_inline)) inline void pool_row(const T* __restrict r0, const T* __restrict r1,
                                                    T* __restrict y, int64_t OW, int64_t C) {
  using M = at::opmath_type<T>;
  for (int64_t ow = 0; ow < OW; ++ow) {
    const T *a = r0 + 2 * ow * C, *b = a + C, *c = r1 + 2 * ow * C, *d = c + C;
    T* __restrict yo = y + ow * C;
    for (int64_t ch = 0; ch < C; ++ch) yo[ch] = static_cast<T>(window_max<M>(M(a[ch]), M(b[ch]), M(c[ch]), M(d[ch])));
  }
}

// A 16-bit type's row backward: widened to its math type, the math type's backward_row, the two gradient rows
// narrowed. route()'s selects on 16-bit values stay scalar (their conversions branch on NaN), plain widening and
// narrowing loops vectorise. The same values as backward_row<T>: widening is exact, and each gradient is rounded to T
// once, at the end instead of in gys (it is copied or zeroed in between).
template <typename T>
__attribute__((always_inline)) inline void backward_row_widened(
    const pooled_norm::GradCoefficients<at::opmath_type<T>>& co, const T* __restrict g, const T* __restrict o,
    const T* __restrict y, const T* __restrict x0, const T* __restrict x1, T* __restrict g0, T* __restrict g1,
    int64_t OW, int64_t C) {
  using M = at::opmath_type<T>;
  const int64_t n = OW * C, wide = 2 * n;  // a pooled row's values; an input row's (the windows' two columns)
  thread_local std::vector<M> rows;
  rows.resize(4 * n + 4 * wide);
  M *gm = rows.data(), *om = gm + n, *ym = om + n, *gys = ym + n, *x0m = gys + n, *x1m = x0m + wide,
    *g0m = x1m + wide, *g1m = g0m + wide;
  const auto widen = [](const T* __restrict from, M* __restrict to, int64_t count) {
    for (int64_t i = 0; i < count; ++i) to[i] = static_cast<M>(from[i]);
  };
  widen(g, gm, n);
  widen(o, om, n);
  widen(y, ym, n);
  widen(x0, x0m, wide);
  widen(x1, x1m, wide);
  backward_row<M>(co, gm, om, ym, x0m, x1m, gys, g0m, g1m, OW, C);
  for (int64_t i = 0; i < wide; ++i) g0[i] = static_cast<T>(g0m[i]);
  for (int64_t i = 0; i < wide; ++i) g1[i] = static_cast<T>(g1m[i]);
}

// The two, also compiled for AVX2 and AVX-512 for each type (vector_clones.h; -ffp-contract=off: the same values).
template <typename T>
GPUCORE_VECTOR_CLONES void cloned_backward_row(const pooled_norm::GradCoefficients<at::opmath_type<T>>& co,
                                               const T* g, const T* o, const T* y, const T* x0, const T* x1, T* gys,
                                               T* g0, T* g1, int64_t OW, int64_t C) {
  if constexpr (sizeof(T) == 2) {
    backward_row_widened<T>(co, g, o, y, x0, x1, g0, g1, OW, C);
  } else {
    backward_row<T>(co, g, o, y, x0, x1, gys, g0, g1, OW, C);
  }
}

template <typename T>
GPUCORE_VECTOR_CLONES void cloned_pool_row(const T* r0, const T* r1, T* y, int64_t OW, int64_t C) {
  pool_row<T>(r0, r1, y, OW, C);
}

// The pooled values of pooled rows [begin, end): contiguous, row = plane * OH + oh; channels-last, n * OH + oh.
template <typename T>
void pool_rows(const PoolNormShape& s, const T* __restrict x, T* __restrict pooled, int64_t begin, int64_t end) {
  using M = at::opmath_type<T>;
  const int64_t C = s.channels_last ? s.channels : 1, H = s.height, W = s.width, OH = s.pooled_height,
                OW = s.pooled_width;
  for (int64_t r = begin; r < end; ++r) {
    const int64_t outer = r / OH, oh = r % OH;
    const T* __restrict r0 = x + (outer * H + 2 * oh) * W * C;
    const T* __restrict r1 = r0 + W * C;
    T* __restrict y = pooled + r * OW * C;
    if (C == 1) {
      for (int64_t ow = 0; ow < OW; ++ow) {
        y[ow] = static_cast<T>(window_max<M>(M(r0[2 * ow]), M(r0[2 * ow + 1]), M(r1[2 * ow]), M(r1[2 * ow + 1])));
      }
    } else {
      cloned_pool_row<T>(r0, r1, y, OW, C);
    }
  }
}

PoolNormOutputs maxpool_bn_relu_cpu(const at::Tensor& input_, const at::Tensor& weight, const at::Tensor& bias,
                                    const at::Tensor& running_mean, const at::Tensor& running_var, bool training,
                                    double momentum, double eps) {
  const PoolNormShape s = pool_norm_shape(input_, weight, bias, running_mean, running_var, training);
  const at::Tensor input = pool_norm_layout(input_, s.channels_last);
  const auto format = s.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  const std::vector<int64_t> size{s.batch, s.channels, s.pooled_height, s.pooled_width};
  at::Tensor pooled = at::empty(size, input.options().memory_format(format));
  at::Tensor out = at::empty(size, input.options().memory_format(format));
  const at::TensorOptions math = input.options().dtype(pool_norm_math_type(input.scalar_type()));
  Channels stats = training ? Channels{} : pooled_norm::running_channels(running_mean, running_var, eps);
  const std::vector<double> gamma = pooled_norm::channel_values<double>(weight),
                            beta = pooled_norm::channel_values<double>(bias);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "maxpool_bn_relu_cpu", [&] {
    const scalar_t* x = input.const_data_ptr<scalar_t>();
    scalar_t* pooled_values = pooled.data_ptr<scalar_t>();
    pooled_norm::normalize_pooled<scalar_t>(
        s, [&](int64_t begin, int64_t end) { pool_rows<scalar_t>(s, x, pooled_values, begin, end); },
        pooled_values, out.data_ptr<scalar_t>(), training, gamma, beta, stats, eps);
  });
  at::Tensor new_mean = at::empty({0}, running_mean.options()), new_var = at::empty({0}, running_var.options());
  if (training) std::tie(new_mean, new_var) = pooled_norm::updated_running(s, running_mean, running_var, momentum, stats);
  return {out, pooled, pooled_norm::channel_tensor(stats.mean, math), pooled_norm::channel_tensor(stats.invstd, math),
          new_mean, new_var};
}

template <typename T>
void backward_kernel(const PoolNormShape& s, const T* __restrict grad, const T* __restrict x,
                     const T* __restrict pooled, const T* __restrict out, T* __restrict grad_input, bool training,
                     const std::vector<double>& gamma, const Channels& stats, std::vector<double>& grad_weight,
                     std::vector<double>& grad_bias) {
  using M = at::opmath_type<T>;
  const int64_t C = s.channels, H = s.height, W = s.width, OH = s.pooled_height, OW = s.pooled_width;
  const pooled_norm::GradCoefficients<M> co =
      pooled_norm::grad_coefficients<T>(s, grad, pooled, out, training, gamma, stats);
  grad_weight = co.grad_weight;
  grad_bias = co.grad_bias;
  // Each window writes its four input gradients; the last column and row where W and H are odd (in no window:
  // max_pool2d's floor) are written zero beside them.
  const int64_t lanes = s.channels_last ? C : 1;
  const int64_t rows = s.channels_last ? s.batch * OH : s.batch * C * OH;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, OW * lanes));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<T> row_grads(OW * lanes);  // the pooled row's gradients, then routed (two loops that vectorise)
    T* __restrict gys = row_grads.data();
    for (int64_t r = begin; r < end; ++r) {
      const int64_t outer = r / OH, oh = r % OH, in_row = (outer * H + 2 * oh) * W * lanes;
      const T *__restrict x0 = x + in_row, *__restrict x1 = x0 + W * lanes;
      T *__restrict g0 = grad_input + in_row, *__restrict g1 = g0 + W * lanes;
      const int64_t at = r * OW * lanes;
      const T *__restrict g = grad + at, *__restrict o = out + at, *__restrict y = pooled + at;
      if (!s.channels_last) {
        const int64_t c = outer % C;
        const M m = co.mean[c], mg = co.mean_g[c], kc = co.k[c], gn = co.gain[c];
        for (int64_t ow = 0; ow < OW; ++ow) {
          gys[ow] = static_cast<T>(
              pooled_grad<M>(pooled_norm::masked(M(g[ow]), M(o[ow])), true, M(y[ow]), m, mg, kc, gn));
        }
        for (int64_t ow = 0; ow < OW; ++ow) {
          route<T, M>(M(x0[2 * ow]), M(x0[2 * ow + 1]), M(x1[2 * ow]), M(x1[2 * ow + 1]), gys[ow], &g0[2 * ow],
                      &g0[2 * ow + 1], &g1[2 * ow], &g1[2 * ow + 1]);
        }
      } else {
        cloned_backward_row<T>(co, g, o, y, x0, x1, gys, g0, g1, OW, C);
      }
      if (W % 2 == 1) {
        std::fill_n(g0 + (W - 1) * lanes, lanes, T(0));
        std::fill_n(g1 + (W - 1) * lanes, lanes, T(0));
      }
      if (H % 2 == 1 && oh == OH - 1) std::fill_n(g1 + W * lanes, W * lanes, T(0));
    }
  });
}

PoolNormGrads maxpool_bn_relu_backward_cpu(const at::Tensor& grad_out, const at::Tensor& input_,
                                           const at::Tensor& pooled, const at::Tensor& out, const at::Tensor& weight,
                                           const at::Tensor& save_mean, const at::Tensor& save_invstd, bool training) {
  const PoolNormShape s =
      pool_norm_backward_shape(grad_out, input_, pooled, out, weight, save_mean, save_invstd);
  const at::Tensor input = pool_norm_layout(input_, s.channels_last);
  const at::Tensor grad = pool_norm_layout(grad_out, s.channels_last);
  const at::Tensor pooled_values = pool_norm_layout(pooled, s.channels_last);
  const at::Tensor out_values = pool_norm_layout(out, s.channels_last);
  at::Tensor grad_input = at::empty_like(input);
  const Channels stats = pooled_norm::saved_channels(save_mean, save_invstd);
  const std::vector<double> gamma = pooled_norm::channel_values<double>(weight);
  std::vector<double> grad_weight, grad_bias;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "maxpool_bn_relu_backward_cpu", [&] {
    backward_kernel<scalar_t>(s, grad.const_data_ptr<scalar_t>(), input.const_data_ptr<scalar_t>(),
                              pooled_values.const_data_ptr<scalar_t>(), out_values.const_data_ptr<scalar_t>(),
                              grad_input.data_ptr<scalar_t>(), training, gamma, stats, grad_weight, grad_bias);
  });
  return {grad_input, pooled_norm::channel_tensor(grad_weight, weight.options()),
          pooled_norm::channel_tensor(grad_bias, weight.options())};
}

}  // namespace

TORCH_LIBRARY_IMPL(gpucore, CPU, m) {
  m.impl("maxpool_bn_relu", &maxpool_bn_relu_cpu);
  m.impl("maxpool_bn_relu_backward", &maxpool_bn_relu_backward_cpu);
}

}  // namespace gpucore::ops
