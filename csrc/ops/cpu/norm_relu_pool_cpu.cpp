// CPU kernel of gpucore::bn_relu_maxpool and its backward (norm_relu_pool.h), on channels-last tensors: rows of W
// pixels of C channels, the loops over the channels (they vectorise). Forward: pooled_norm.h's batch statistics of
// the input, then each output row's windows from the (at most three) input rows they cover. Backward: each input
// row's gradients gathered from the (at most two) rows of windows that cover it, summed for the batch norm and kept
// in the input gradient's tensor, which the second pass overwrites with the input's gradient.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <tuple>
#include <vector>

#include "ops/cpu/pooled_norm.h"
#include "ops/cpu/vector_clones.h"
#include "ops/norm_relu_pool.h"
#include "ops/pool_norm_math.h"

namespace gpucore::ops {
namespace {

using pooled_norm::Channels;

// The input's shape as pooled_norm.h's passes see it: one "pooled" value per input value.
PoolNormShape input_shape(const PoolNormShape& s) {
  return PoolNormShape{s.batch, s.channels, s.height, s.width, s.height, s.width, true};
}

// v rounded to T and back, branch-free for bfloat16 (so the loops that call it vectorise): round to nearest even,
// a NaN stays a (quiet) NaN, as c10::BFloat16's conversion gives.
template <typename T, typename M>
__attribute__((always_inline)) inline M rounded(M v) {
  if constexpr (std::is_same_v<T, c10::BFloat16>) {
    uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    const uint32_t nearest = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    const uint32_t bits = (u & 0x7FFFFFFFu) > 0x7F800000u ? (u | 0x00400000u) & 0xFFFF0000u : nearest;
    M out;
    std::memcpy(&out, &bits, sizeof out);
    return out;
  } else {
    return static_cast<M>(static_cast<T>(v));
  }
}

// p[i] in the math type; bfloat16 read as its 16 bits (GCC vectorises no load of c10::BFloat16, a struct).
template <typename T, typename M>
__attribute__((always_inline)) inline M load(const T* __restrict p, int64_t i) {
  if constexpr (std::is_same_v<T, c10::BFloat16>) {
    const uint32_t bits = static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(p)[i]) << 16;
    M out;
    std::memcpy(&out, &bits, sizeof out);
    return out;
  } else {
    return static_cast<M>(p[i]);
  }
}

// p[i] = v rounded to T (bfloat16 written as its 16 bits, as load reads them).
template <typename T, typename M>
__attribute__((always_inline)) inline void store(T* __restrict p, int64_t i, M v) {
  if constexpr (std::is_same_v<T, c10::BFloat16>) {
    const M r = rounded<T, M>(v);
    uint32_t bits;
    std::memcpy(&bits, &r, sizeof bits);
    reinterpret_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(bits >> 16);
  } else {
    p[i] = static_cast<T>(v);
  }
}

// One output row (OW windows of C channels) of image n's input x (H x W x C): each window's maximum of
// T(relu(x * scale + shift)) over its in-bounds elements read row by row, and its place (3 * row + column). best
// and place hold C values of the math type (one element width in the loops, so they vectorise); value: C more.
template <typename T>
GPUCORE_VECTOR_CLONES void pool_row(const T* __restrict x, int64_t H, int64_t W, int64_t C, int64_t oh, int64_t OW,
                                    const at::opmath_type<T>* __restrict scale,
                                    const at::opmath_type<T>* __restrict shift, T* __restrict out,
                                    uint8_t* __restrict window, at::opmath_type<T>* __restrict best,
                                    at::opmath_type<T>* __restrict place, at::opmath_type<T>* __restrict value) {
  using M = at::opmath_type<T>;
  for (int64_t ow = 0; ow < OW; ++ow) {
    // -inf: the first in-bounds element (a ReLU's output, >= 0 or NaN) replaces it, as in max_pool2d
    for (int64_t c = 0; c < C; ++c) best[c] = -std::numeric_limits<M>::infinity(), place[c] = M(0);
    for (int64_t kh = 0; kh < 3; ++kh) {
      const int64_t h = 2 * oh - 1 + kh;
      if (h < 0 || h >= H) continue;
      for (int64_t kw = 0; kw < 3; ++kw) {
        const int64_t w = 2 * ow - 1 + kw;
        if (w < 0 || w >= W) continue;
        const T* __restrict px = x + (h * W + w) * C;
        const M index = static_cast<M>(3 * kh + kw);
        // two loops, each of which GCC vectorises (one with both it does not)
        for (int64_t c = 0; c < C; ++c) value[c] = rounded<T, M>(norm_relu<M>(load<T, M>(px, c), scale[c], shift[c]));
        for (int64_t c = 0; c < C; ++c) {
          const M v = value[c], b = best[c];
          const bool take = (v > b) | (v != v);
          best[c] = take ? v : b;
          place[c] = take ? index : place[c];
        }
      }
    }
    for (int64_t c = 0; c < C; ++c) store<T, M>(out, ow * C + c, best[c]);
    for (int64_t c = 0; c < C; ++c) window[ow * C + c] = static_cast<uint8_t>(place[c]);
  }
}

// Input row h of image n: each element's gradient through the pool and the ReLU, rounded to T, into gin (W x C):
// the sum of grad over the windows (of rows oh of OH, columns ow of OW) whose maximum it is, where that maximum
// (out) is > 0 or NaN. g, o, window: image n's pooled tensors (OH x OW x C); value and place: C values of scratch.
template <typename T>
GPUCORE_VECTOR_CLONES void gather_row(const T* __restrict g, const T* __restrict o, const uint8_t* __restrict window,
                                      int64_t h, int64_t W, int64_t C, int64_t OH, int64_t OW,
                                      at::opmath_type<T>* __restrict gin, at::opmath_type<T>* __restrict value,
                                      at::opmath_type<T>* __restrict place) {
  using M = at::opmath_type<T>;
  // the rows of windows covering row h: h / 2 when h is even; (h - 1) / 2 and (h + 1) / 2 when odd
  const int64_t oh_first = h % 2 == 0 ? h / 2 : (h - 1) / 2, oh_last = std::min(OH - 1, (h + 1) / 2);
  for (int64_t w = 0; w < W; ++w) {
    const int64_t ow_first = w % 2 == 0 ? w / 2 : (w - 1) / 2, ow_last = std::min(OW - 1, (w + 1) / 2);
    M* __restrict acc = gin + w * C;
    for (int64_t c = 0; c < C; ++c) acc[c] = M(0);
    for (int64_t oh = oh_first; oh <= oh_last; ++oh) {
      for (int64_t ow = ow_first; ow <= ow_last; ++ow) {
        const M index = static_cast<M>(3 * (h - 2 * oh + 1) + (w - 2 * ow + 1));
        const int64_t at = (oh * OW + ow) * C;
        // three loops of one element width each, which GCC vectorises
        for (int64_t c = 0; c < C; ++c) value[c] = pooled_norm::masked(load<T, M>(g, at + c), load<T, M>(o, at + c));
        for (int64_t c = 0; c < C; ++c) place[c] = static_cast<M>(window[at + c]);
        for (int64_t c = 0; c < C; ++c) acc[c] += place[c] == index ? value[c] : M(0);
      }
    }
    for (int64_t c = 0; c < C; ++c) acc[c] = rounded<T, M>(acc[c]);
  }
}

// sum[c] += gin, sum[C + c] += gin * (x - mean) over one input row, and gin kept in T (kept: the input gradient's
// row, which input_grad_row then overwrites).
template <typename T>
GPUCORE_VECTOR_CLONES void add_row_sums(const at::opmath_type<T>* __restrict gin, const T* __restrict x,
                                        const at::opmath_type<T>* __restrict mean, int64_t W, int64_t C,
                                        at::opmath_type<T>* __restrict sum, T* __restrict kept) {
  using M = at::opmath_type<T>;
  for (int64_t w = 0; w < W; ++w) {
    for (int64_t c = 0; c < C; ++c) {
      const M gm = gin[w * C + c];
      sum[c] += gm;
      sum[C + c] += gm * (load<T, M>(x, w * C + c) - mean[c]);
    }
  }
  for (int64_t i = 0; i < W * C; ++i) store<T, M>(kept, i, gin[i]);  // exact: gin is already rounded to T
}

// One input row's gradient, in place of its kept pool-and-ReLU gradient (add_row_sums).
template <typename T>
GPUCORE_VECTOR_CLONES void input_grad_row(const pooled_norm::GradCoefficients<at::opmath_type<T>>& co,
                                          const T* __restrict x, int64_t W, int64_t C, T* grad_input) {
  using M = at::opmath_type<T>;
  const M *__restrict m = co.mean.data(), *__restrict mg = co.mean_g.data(), *__restrict kc = co.k.data(),
          *__restrict gn = co.gain.data();
  for (int64_t w = 0; w < W; ++w) {
    for (int64_t c = 0; c < C; ++c) {
      const int64_t i = w * C + c;
      store<T, M>(grad_input, i,
                  pooled_grad<M>(load<T, M>(grad_input, i), true, load<T, M>(x, i), m[c], mg[c], kc[c], gn[c]));
    }
  }
}

NormReluPoolOutputs bn_relu_maxpool_cpu(const at::Tensor& input_, const at::Tensor& weight, const at::Tensor& bias,
                                        const at::Tensor& running_mean, const at::Tensor& running_var, bool training,
                                        double momentum, double eps) {
  const PoolNormShape s = norm_relu_pool_shape(input_, weight, bias, running_mean, running_var, training);
  const at::Tensor input = pool_norm_layout(input_, true);
  const int64_t N = s.batch, C = s.channels, H = s.height, W = s.width, OH = s.pooled_height, OW = s.pooled_width;
  const auto pooled_options = input.options().memory_format(at::MemoryFormat::ChannelsLast);
  at::Tensor out = at::empty({N, C, OH, OW}, pooled_options);
  at::Tensor window = at::empty({N, C, OH, OW}, pooled_options.dtype(at::kByte));
  const at::TensorOptions math = input.options().dtype(pool_norm_math_type(input.scalar_type()));
  Channels stats = training ? Channels{} : pooled_norm::running_channels(running_mean, running_var, eps);
  const std::vector<double> gamma = pooled_norm::channel_values<double>(weight),
                            beta = pooled_norm::channel_values<double>(bias);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "bn_relu_maxpool_cpu", [&] {
    using M = at::opmath_type<scalar_t>;
    const scalar_t* x = input.const_data_ptr<scalar_t>();
    if (training) pooled_norm::batch_statistics<scalar_t>(input_shape(s), [](int64_t, int64_t) {}, x, stats, eps);
    std::vector<M> scale, shift;
    pooled_norm::norm_scale_shift<M>(gamma, beta, stats, scale, shift);
    scalar_t* out_values = out.data_ptr<scalar_t>();
    uint8_t* places = window.data_ptr<uint8_t>();
    at::parallel_for(0, N * OH, 1, [&](int64_t begin, int64_t end) {
      std::vector<M> best(C), place(C), value(C);
      for (int64_t r = begin; r < end; ++r) {
        const int64_t n = r / OH, oh = r % OH;
        pool_row<scalar_t>(x + n * H * W * C, H, W, C, oh, OW, scale.data(), shift.data(), out_values + r * OW * C,
                           places + r * OW * C, best.data(), place.data(), value.data());
      }
    });
  });
  at::Tensor new_mean = at::empty({0}, running_mean.options()), new_var = at::empty({0}, running_var.options());
  if (training) {
    std::tie(new_mean, new_var) =
        pooled_norm::updated_running(input_shape(s), running_mean, running_var, momentum, stats);
  }
  return {out, window, pooled_norm::channel_tensor(stats.mean, math), pooled_norm::channel_tensor(stats.invstd, math),
          new_mean, new_var};
}

NormReluPoolGrads bn_relu_maxpool_backward_cpu(const at::Tensor& grad_out, const at::Tensor& input_,
                                               const at::Tensor& out_, const at::Tensor& window_,
                                               const at::Tensor& weight, const at::Tensor& save_mean,
                                               const at::Tensor& save_invstd, bool training) {
  const PoolNormShape s =
      norm_relu_pool_backward_shape(grad_out, input_, out_, window_, weight, save_mean, save_invstd);
  const at::Tensor input = pool_norm_layout(input_, true), grad = pool_norm_layout(grad_out, true);
  const at::Tensor out = pool_norm_layout(out_, true), window = pool_norm_layout(window_, true);
  const int64_t C = s.channels, H = s.height, W = s.width, OH = s.pooled_height, OW = s.pooled_width;
  at::Tensor grad_input = at::empty_like(input);
  const Channels stats = pooled_norm::saved_channels(save_mean, save_invstd);
  const std::vector<double> gamma = pooled_norm::channel_values<double>(weight);
  std::vector<double> grad_weight, grad_bias;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "bn_relu_maxpool_backward_cpu", [&] {
    using M = at::opmath_type<scalar_t>;
    const scalar_t *x = input.const_data_ptr<scalar_t>(), *g = grad.const_data_ptr<scalar_t>(),
                   *o = out.const_data_ptr<scalar_t>();
    const uint8_t* places = window.const_data_ptr<uint8_t>();
    const auto row_gradients = [&](int64_t r, M* gin) {  // input row r = n * H + h; gin: (W + 2) x C values
      const int64_t n = r / H, pooled_at = n * OH * OW * C;
      gather_row<scalar_t>(g + pooled_at, o + pooled_at, places + pooled_at, r % H, W, C, OH, OW, gin,
                           gin + W * C, gin + (W + 1) * C);
    };
    std::vector<M> mean(C);
    for (int64_t c = 0; c < C; ++c) mean[c] = static_cast<M>(stats.mean[c]);
    const PoolNormShape in = input_shape(s);
    scalar_t* gx = grad_input.data_ptr<scalar_t>();
    const std::vector<double> sums = pooled_norm::channel_sums<2, M>(
        in, [](int64_t, int64_t) { return std::array<double, 2>{}; },  // channels-last: rows only
        [&](int64_t r, M* sum) {
          thread_local std::vector<M> gin;
          gin.resize((W + 2) * C);
          row_gradients(r, gin.data());
          add_row_sums<scalar_t>(gin.data(), x + r * W * C, mean.data(), W, C, sum, gx + r * W * C);
        });
    const pooled_norm::GradCoefficients<M> co =
        pooled_norm::coefficients_from_sums<M>(sums, static_cast<double>(in.count()), training, gamma, stats);
    grad_weight = co.grad_weight;
    grad_bias = co.grad_bias;
    at::parallel_for(0, s.batch * H, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, W * C)),
                     [&](int64_t begin, int64_t end) {
                       for (int64_t r = begin; r < end; ++r) {
                         input_grad_row<scalar_t>(co, x + r * W * C, W, C, gx + r * W * C);
                       }
                     });
  });
  return {grad_input, pooled_norm::channel_tensor(grad_weight, weight.options()),
          pooled_norm::channel_tensor(grad_bias, weight.options())};
}

}  // namespace

TORCH_LIBRARY_IMPL(gpucore, CPU, m) {
  m.impl("bn_relu_maxpool", &bn_relu_maxpool_cpu);
  m.impl("bn_relu_maxpool_backward", &bn_relu_maxpool_backward_cpu);
}

}  // namespace gpucore::ops
