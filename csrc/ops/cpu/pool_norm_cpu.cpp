// CPU kernels of gpucore::maxpool_bn_relu and its backward (pool_norm.h). The pooled tensor's rows (one pooled row
// of one plane for contiguous tensors, one pooled row of all channels for channels-last ones) are split among
// threads; per-channel sums add up in float32 along a row and in float64 across rows, per plane or per fixed block
// of rows, then in a fixed order: the same result for any thread count.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "ops/cpu/vector_clones.h"
#include "ops/pool_norm.h"
#include "ops/pool_norm_math.h"

namespace gpucore::ops {
namespace {

// Fixed blocks of rows for the channels-last sums (their partial sums are C values each).
constexpr int64_t kSumBlocks = 64;
// Contiguous planes sum in float over chunks of this many values, the chunks in float64.
constexpr int64_t kSumChunk = 1024;

template <typename M>
std::vector<M> channel_values(const at::Tensor& values) {
  std::vector<M> out(values.size(0));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, values.scalar_type(), "maxpool_bn_relu_cpu", [&] {
    const scalar_t* data = values.data_ptr<scalar_t>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<M>(data[i * values.stride(0)]);
  });
  return out;
}

template <typename M>
void store_channel_values(at::Tensor& values, const std::vector<M>& from) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, values.scalar_type(), "maxpool_bn_relu_cpu", [&] {
    scalar_t* data = values.data_ptr<scalar_t>();
    for (size_t i = 0; i < from.size(); ++i) data[i] = static_cast<scalar_t>(from[i]);
  });
}

// sum(f(i)) over i < n: in eight float lanes (which the compiler vectorises; a single float sum it may not
// reorder), chunk by chunk into float64, in a fixed order.
template <typename M, typename F>
inline double lane_sum(int64_t n, const F& f) {
  double total = 0.0;
  for (int64_t chunk = 0; chunk < n; chunk += kSumChunk) {
    const int64_t end = std::min(n, chunk + kSumChunk);
    M lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = chunk;
    for (; i + 8 <= end; i += 8) {
      for (int l = 0; l < 8; ++l) lane[l] += f(i + l);
    }
    M rest = 0;
    for (; i < end; ++i) rest += f(i);
    for (int l = 0; l < 8; ++l) rest += lane[l];
    total += static_cast<double>(rest);
  }
  return total;
}

// Per-channel sums over the pooled tensor. Contiguous: plane(p, c) gives plane p's sum (channel c = p % C).
// Channels-last: row(r, sums) adds pooled row r (n * OH + oh: OW pixels of C channels) into the C float sums.
template <typename M, typename Plane, typename Row>
std::vector<double> channel_sums(const PoolNormShape& s, const Plane& plane, const Row& row) {
  const int64_t C = s.channels;
  std::vector<double> sums(C, 0.0);
  if (!s.channels_last) {
    const int64_t planes = s.batch * C;
    std::vector<double> per_plane(planes);
    at::parallel_for(0, planes, 1, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) per_plane[p] = plane(p, p % C);
    });
    for (int64_t p = 0; p < planes; ++p) sums[p % C] += per_plane[p];
    return sums;
  }
  const int64_t rows = s.batch * s.pooled_height, blocks = std::min(rows, kSumBlocks);
  std::vector<double> per_block(blocks * C, 0.0);
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<M> partial(C);
    for (int64_t b = begin; b < end; ++b) {
      double* acc = per_block.data() + b * C;
      for (int64_t r = rows * b / blocks; r < rows * (b + 1) / blocks; ++r) {
        std::fill(partial.begin(), partial.end(), M(0));
        row(r, partial.data());
        for (int64_t c = 0; c < C; ++c) acc[c] += static_cast<double>(partial[c]);
      }
    }
  });
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t c = 0; c < C; ++c) sums[c] += per_block[b * C + c];
  }
  return sums;
}

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

// route() over one channels-last pooled row: OW windows of C channels (restrict parameters: the loop vectorises).
template <typename T>
void route_row(const T* __restrict x0, const T* __restrict x1, const T* __restrict gy, T* __restrict g0,
               T* __restrict g1, int64_t OW, int64_t C) {
  using M = at::opmath_type<T>;
  for (int64_t ow = 0; ow < OW; ++ow) {
    const int64_t w = 2 * ow * C, i = ow * C;
    for (int64_t c = 0; c < C; ++c) {
      route<T, M>(M(x0[w + c]), M(x0[w + C + c]), M(x1[w + c]), M(x1[w + C + c]), gy[i + c], g0 + w + c,
                  g0 + w + C + c, g1 + w + c, g1 + w + C + c);
    }
  }
}

// float32's, also compiled for AVX2 and AVX-512 (vector_clones.h; -ffp-contract=off: the same values).
GPUCORE_VECTOR_CLONES void route_row_float(const float* __restrict x0, const float* __restrict x1,
                                           const float* __restrict gy, float* __restrict g0, float* __restrict g1,
                                           int64_t OW, int64_t C) {
  route_row<float>(x0, x1, gy, g0, g1, OW, C);
}

template <typename T>
void route_channels_last_row(const T* x0, const T* x1, const T* gy, T* g0, T* g1, int64_t OW, int64_t C) {
  if constexpr (std::is_same_v<T, float>) {
    route_row_float(x0, x1, gy, g0, g1, OW, C);
  } else {
    route_row<T>(x0, x1, gy, g0, g1, OW, C);
  }
}

// Per-channel float64 statistics and parameters of one call.
struct Channels {
  std::vector<double> mean, invstd, var;  // var: the batch's biased variance (training only)
};

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
      for (int64_t ow = 0; ow < OW; ++ow) {
        const T *a = r0 + 2 * ow * C, *b = a + C, *c = r1 + 2 * ow * C, *d = c + C;
        T* __restrict yo = y + ow * C;
        for (int64_t ch = 0; ch < C; ++ch) yo[ch] = static_cast<T>(window_max<M>(M(a[ch]), M(b[ch]), M(c[ch]), M(d[ch])));
      }
    }
  }
}

template <typename T>
void forward_kernel(const PoolNormShape& s, const T* __restrict x, T* __restrict pooled, T* __restrict out,
                    bool training, const std::vector<double>& gamma, const std::vector<double>& beta, Channels& stats,
                    double eps) {
  using M = at::opmath_type<T>;
  const int64_t C = s.channels, OH = s.pooled_height, OW = s.pooled_width, area = OH * OW;
  const int64_t rows = s.channels_last ? s.batch * OH : s.batch * C * OH;
  const int64_t row_size = s.channels_last ? OW * C : OW;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, row_size));
  const int64_t px = s.channels_last ? OW : 0;  // pixels per channels-last row
  if (training) {
    // The pool, and the sums in the same pass (its rows still in cache).
    const std::vector<double> sums = channel_sums<M>(
        s,
        [&](int64_t p, int64_t) {
          pool_rows<T>(s, x, pooled, p * OH, (p + 1) * OH);
          const T* __restrict y = pooled + p * area;
          return lane_sum<M>(area, [&](int64_t i) { return M(y[i]); });
        },
        [&](int64_t r, M* __restrict sum) {
          pool_rows<T>(s, x, pooled, r, r + 1);
          const T* __restrict y = pooled + r * OW * C;
          for (int64_t ow = 0; ow < px; ++ow) {
            for (int64_t c = 0; c < C; ++c) sum[c] += M(y[ow * C + c]);
          }
        });
    const double count = static_cast<double>(s.count());
    std::vector<M> mean(C);
    stats.mean.resize(C);
    for (int64_t c = 0; c < C; ++c) stats.mean[c] = sums[c] / count, mean[c] = static_cast<M>(stats.mean[c]);
    const std::vector<double> squares = channel_sums<M>(
        s,
        [&](int64_t p, int64_t c) {
          const T* __restrict y = pooled + p * area;
          const M m = mean[c];
          return lane_sum<M>(area, [&](int64_t i) {
            const M d = M(y[i]) - m;
            return d * d;
          });
        },
        [&](int64_t r, M* __restrict sum) {
          const T* __restrict y = pooled + r * OW * C;
          const M* __restrict m = mean.data();
          for (int64_t ow = 0; ow < px; ++ow) {
            for (int64_t c = 0; c < C; ++c) {
              const M d = M(y[ow * C + c]) - m[c];
              sum[c] += d * d;
            }
          }
        });
    stats.var.resize(C);
    stats.invstd.resize(C);
    for (int64_t c = 0; c < C; ++c) {
      stats.var[c] = squares[c] / count;
      stats.invstd[c] = 1.0 / std::sqrt(stats.var[c] + eps);
    }
  } else {
    at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) { pool_rows<T>(s, x, pooled, begin, end); });
  }
  std::vector<M> scale(C), shift(C);
  for (int64_t c = 0; c < C; ++c) {
    scale[c] = static_cast<M>(gamma[c]) * static_cast<M>(stats.invstd[c]);
    shift[c] = static_cast<M>(beta[c]) - static_cast<M>(stats.mean[c]) * scale[c];
  }
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* __restrict y = pooled + r * row_size;
      T* __restrict o = out + r * row_size;
      if (!s.channels_last) {
        const int64_t c = (r / OH) % C;
        const M sc = scale[c], sh = shift[c];
        for (int64_t i = 0; i < OW; ++i) o[i] = static_cast<T>(norm_relu<M>(M(y[i]), sc, sh));
      } else {
        const M* __restrict sc = scale.data();
        const M* __restrict sh = shift.data();
        for (int64_t ow = 0; ow < OW; ++ow) {
          for (int64_t c = 0; c < C; ++c) {
            o[ow * C + c] = static_cast<T>(norm_relu<M>(M(y[ow * C + c]), sc[c], sh[c]));
          }
        }
      }
    }
  });
}

at::Tensor channel_tensor(const std::vector<double>& values, const at::TensorOptions& options) {
  at::Tensor out = at::empty({static_cast<int64_t>(values.size())}, options);
  store_channel_values(out, values);
  return out;
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
  Channels stats;
  if (!training) {
    stats.mean = channel_values<double>(running_mean);
    stats.invstd = channel_values<double>(running_var);
    for (double& v : stats.invstd) v = 1.0 / std::sqrt(v + eps);
  }
  const std::vector<double> gamma = channel_values<double>(weight), beta = channel_values<double>(bias);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "maxpool_bn_relu_cpu", [&] {
    forward_kernel<scalar_t>(s, input.const_data_ptr<scalar_t>(), pooled.data_ptr<scalar_t>(),
                             out.data_ptr<scalar_t>(), training, gamma, beta, stats, eps);
  });
  at::Tensor new_mean = at::empty({0}, running_mean.options()), new_var = at::empty({0}, running_var.options());
  if (training) {
    // torch's batch_norm: running = (1 - momentum) * running + momentum * batch, the variance unbiased.
    std::vector<double> mean = channel_values<double>(running_mean), var = channel_values<double>(running_var);
    const double count = static_cast<double>(s.count());
    for (int64_t c = 0; c < s.channels; ++c) {
      mean[c] = (1.0 - momentum) * mean[c] + momentum * stats.mean[c];
      var[c] = (1.0 - momentum) * var[c] + momentum * stats.var[c] * count / (count - 1.0);
    }
    new_mean = channel_tensor(mean, running_mean.options());
    new_var = channel_tensor(var, running_var.options());
  }
  return {out, pooled, channel_tensor(stats.mean, math), channel_tensor(stats.invstd, math), new_mean, new_var};
}

template <typename T>
void backward_kernel(const PoolNormShape& s, const T* __restrict grad, const T* __restrict x,
                     const T* __restrict pooled, const T* __restrict out, T* __restrict grad_input, bool training,
                     const std::vector<double>& gamma, const Channels& stats, std::vector<double>& grad_weight,
                     std::vector<double>& grad_bias) {
  using M = at::opmath_type<T>;
  const int64_t C = s.channels, H = s.height, W = s.width, OH = s.pooled_height, OW = s.pooled_width;
  const int64_t area = OH * OW, px = s.channels_last ? OW : 0;
  std::vector<M> mean(C);
  for (int64_t c = 0; c < C; ++c) mean[c] = static_cast<M>(stats.mean[c]);
  // The ReLU's mask: out > 0 (or NaN), as threshold_backward.
  const auto masked = [](M g, M o) { return (o > M(0)) | (o != o) ? g : M(0); };
  grad_bias = channel_sums<M>(
      s,
      [&](int64_t p, int64_t) {
        const T *__restrict g = grad + p * area, *__restrict o = out + p * area;
        return lane_sum<M>(area, [&](int64_t i) { return masked(M(g[i]), M(o[i])); });
      },
      [&](int64_t r, M* __restrict sum) {
        const T *__restrict g = grad + r * OW * C, *__restrict o = out + r * OW * C;
        for (int64_t i = 0; i < px; ++i) {
          for (int64_t c = 0; c < C; ++c) sum[c] += masked(M(g[i * C + c]), M(o[i * C + c]));
        }
      });
  const std::vector<double> sum_gx = channel_sums<M>(
      s,
      [&](int64_t p, int64_t c) {
        const T *__restrict g = grad + p * area, *__restrict o = out + p * area, *__restrict y = pooled + p * area;
        const M m = mean[c];
        return lane_sum<M>(area, [&](int64_t i) { return masked(M(g[i]), M(o[i])) * (M(y[i]) - m); });
      },
      [&](int64_t r, M* __restrict sum) {
        const int64_t at = r * OW * C;
        const T *__restrict g = grad + at, *__restrict o = out + at, *__restrict y = pooled + at;
        const M* __restrict m = mean.data();
        for (int64_t i = 0; i < px; ++i) {
          for (int64_t c = 0; c < C; ++c) {
            sum[c] += masked(M(g[i * C + c]), M(o[i * C + c])) * (M(y[i * C + c]) - m[c]);
          }
        }
      });
  grad_weight.resize(C);
  const double count = static_cast<double>(s.count());
  std::vector<M> mean_g(C), k(C), gain(C);
  for (int64_t c = 0; c < C; ++c) {
    grad_weight[c] = sum_gx[c] * stats.invstd[c];
    mean_g[c] = training ? static_cast<M>(grad_bias[c] / count) : M(0);
    k[c] = training ? static_cast<M>(sum_gx[c] * stats.invstd[c] * stats.invstd[c] / count) : M(0);
    gain[c] = static_cast<M>(gamma[c] * stats.invstd[c]);
  }
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
        const M m = mean[c], mg = mean_g[c], kc = k[c], gn = gain[c];
        for (int64_t ow = 0; ow < OW; ++ow) {
          gys[ow] = static_cast<T>(pooled_grad<M>(masked(M(g[ow]), M(o[ow])), true, M(y[ow]), m, mg, kc, gn));
        }
        for (int64_t ow = 0; ow < OW; ++ow) {
          route<T, M>(M(x0[2 * ow]), M(x0[2 * ow + 1]), M(x1[2 * ow]), M(x1[2 * ow + 1]), gys[ow], &g0[2 * ow],
                      &g0[2 * ow + 1], &g1[2 * ow], &g1[2 * ow + 1]);
        }
      } else {
        const M *__restrict m = mean.data(), *__restrict mg = mean_g.data(), *__restrict kc = k.data(),
                *__restrict gn = gain.data();
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t i = ow * C;
          for (int64_t c = 0; c < C; ++c) {
            gys[i + c] = static_cast<T>(
                pooled_grad<M>(masked(M(g[i + c]), M(o[i + c])), true, M(y[i + c]), m[c], mg[c], kc[c], gn[c]));
          }
        }
        route_channels_last_row<T>(x0, x1, gys, g0, g1, OW, C);
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
  Channels stats{channel_values<double>(save_mean), channel_values<double>(save_invstd), {}};
  const std::vector<double> gamma = channel_values<double>(weight);
  std::vector<double> grad_weight, grad_bias;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "maxpool_bn_relu_backward_cpu", [&] {
    backward_kernel<scalar_t>(s, grad.const_data_ptr<scalar_t>(), input.const_data_ptr<scalar_t>(),
                              pooled_values.const_data_ptr<scalar_t>(), out_values.const_data_ptr<scalar_t>(),
                              grad_input.data_ptr<scalar_t>(), training, gamma, stats, grad_weight, grad_bias);
  });
  return {grad_input, channel_tensor(grad_weight, weight.options()), channel_tensor(grad_bias, weight.options())};
}

}  // namespace

TORCH_LIBRARY_IMPL(gpucore, CPU, m) {
  m.impl("maxpool_bn_relu", &maxpool_bn_relu_cpu);
  m.impl("maxpool_bn_relu_backward", &maxpool_bn_relu_backward_cpu);
}

}  // namespace gpucore::ops
