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
#include <vector>

#include "ops/cpu/vector_clones.h"
#include "ops/pool_norm.h"
#include "ops/pool_norm_math.h"

namespace gpucore::ops {
namespace {

// Fixed blocks of rows for the channels-last sums (their partial sums are C values each).
constexpr int64_t kSumBlocks = 64;

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

// Per-channel sums of two quantities over the pooled tensor: value(row, ow, c, sum0, sum1) adds one pooled
// element's into the row's float sums. Rows: plane * OH + oh (contiguous), n * OH + oh (channels-last).
template <typename M, typename Value>
void channel_sums(const PoolNormShape& s, const Value& value, std::vector<double>& sum0, std::vector<double>& sum1) {
  const int64_t C = s.channels, OH = s.pooled_height, OW = s.pooled_width;
  sum0.assign(C, 0.0);
  sum1.assign(C, 0.0);
  if (!s.channels_last) {
    const int64_t planes = s.batch * C;
    std::vector<double> plane0(planes), plane1(planes);
    at::parallel_for(0, planes, 1, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const int64_t c = p % C;
        double a0 = 0.0, a1 = 0.0;
        for (int64_t oh = 0; oh < OH; ++oh) {
          M r0 = 0, r1 = 0;
          const int64_t row = p * OH + oh;
          for (int64_t ow = 0; ow < OW; ++ow) value(row, ow, c, r0, r1);
          a0 += r0, a1 += r1;
        }
        plane0[p] = a0, plane1[p] = a1;
      }
    });
    for (int64_t p = 0; p < planes; ++p) sum0[p % C] += plane0[p], sum1[p % C] += plane1[p];
    return;
  }
  const int64_t rows = s.batch * OH, blocks = std::min(rows, kSumBlocks);
  std::vector<double> block0(blocks * C, 0.0), block1(blocks * C, 0.0);
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<M> r0(C), r1(C);
    for (int64_t b = begin; b < end; ++b) {
      double* a0 = block0.data() + b * C;
      double* a1 = block1.data() + b * C;
      for (int64_t row = rows * b / blocks; row < rows * (b + 1) / blocks; ++row) {
        std::fill(r0.begin(), r0.end(), M(0));
        std::fill(r1.begin(), r1.end(), M(0));
        M* __restrict s0 = r0.data();
        M* __restrict s1 = r1.data();
        for (int64_t ow = 0; ow < OW; ++ow) {
          for (int64_t c = 0; c < C; ++c) value(row, ow, c, s0[c], s1[c]);
        }
        for (int64_t c = 0; c < C; ++c) a0[c] += s0[c], a1[c] += s1[c];
      }
    }
  });
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t c = 0; c < C; ++c) sum0[c] += block0[b * C + c], sum1[c] += block1[b * C + c];
  }
}

// Runs each(row, ow, c) on every pooled element, rows split among threads (as channel_sums numbers them).
template <typename Each>
void each_pooled(const PoolNormShape& s, const Each& each) {
  const int64_t C = s.channels, OH = s.pooled_height, OW = s.pooled_width;
  const int64_t rows = s.channels_last ? s.batch * OH : s.batch * C * OH;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, s.channels_last ? OW * C : OW));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      if (s.channels_last) {
        for (int64_t ow = 0; ow < OW; ++ow) {
          for (int64_t c = 0; c < C; ++c) each(row, ow, c);
        }
      } else {
        const int64_t c = (row / OH) % C;
        for (int64_t ow = 0; ow < OW; ++ow) each(row, ow, c);
      }
    }
  });
}

// Where a pooled element's window starts in the input, and the input's step to its next column and row.
struct Windows {
  int64_t C, H, W, OH, OW, column, line;
  bool channels_last;
  Windows(const PoolNormShape& s)
      : C(s.channels), H(s.height), W(s.width), OH(s.pooled_height), OW(s.pooled_width),
        column(s.channels_last ? s.channels : 1), line(s.channels_last ? s.width * s.channels : s.width),
        channels_last(s.channels_last) {}
  int64_t pooled(int64_t row, int64_t ow, int64_t c) const {
    return channels_last ? (row * OW + ow) * C + c : row * OW + ow;
  }
  int64_t window(int64_t row, int64_t ow, int64_t c) const {
    const int64_t outer = row / OH, oh = row % OH;  // outer: the plane (contiguous), the sample (channels-last)
    return channels_last ? ((outer * H + 2 * oh) * W + 2 * ow) * C + c : (outer * H + 2 * oh) * W + 2 * ow;
  }
};

// Per-channel float64 statistics and parameters of one call.
struct Channels {
  std::vector<double> mean, invstd, var;  // var: the batch's biased variance (training only)
};

template <typename T>
void forward_kernel(const PoolNormShape& s, const T* __restrict x, T* __restrict pooled, T* __restrict out,
                    bool training, const std::vector<double>& gamma, const std::vector<double>& beta, Channels& stats,
                    double eps) {
  using M = at::opmath_type<T>;
  const Windows win(s);
  const int64_t C = s.channels, col = win.column, line = win.line;
  if (training) {
    std::vector<double> sums, unused;
    channel_sums<M>(s, [&](int64_t row, int64_t ow, int64_t c, M& sum, M&) {
      const T* w = x + win.window(row, ow, c);
      const T y = static_cast<T>(window_max<M>(M(w[0]), M(w[col]), M(w[line]), M(w[line + col])));
      pooled[win.pooled(row, ow, c)] = y;
      sum += M(y);
    }, sums, unused);
    const double count = static_cast<double>(s.count());
    std::vector<M> mean(C);
    stats.mean.resize(C);
    for (int64_t c = 0; c < C; ++c) stats.mean[c] = sums[c] / count, mean[c] = static_cast<M>(stats.mean[c]);
    std::vector<double> squares;
    channel_sums<M>(s, [&](int64_t row, int64_t ow, int64_t c, M& sum, M&) {
      const M d = M(pooled[win.pooled(row, ow, c)]) - mean[c];
      sum += d * d;
    }, squares, unused);
    stats.var.resize(C);
    stats.invstd.resize(C);
    for (int64_t c = 0; c < C; ++c) {
      stats.var[c] = squares[c] / count;
      stats.invstd[c] = 1.0 / std::sqrt(stats.var[c] + eps);
    }
  } else {
    each_pooled(s, [&](int64_t row, int64_t ow, int64_t c) {
      const T* w = x + win.window(row, ow, c);
      pooled[win.pooled(row, ow, c)] = static_cast<T>(window_max<M>(M(w[0]), M(w[col]), M(w[line]), M(w[line + col])));
    });
  }
  std::vector<M> scale(C), shift(C);
  for (int64_t c = 0; c < C; ++c) {
    scale[c] = static_cast<M>(gamma[c]) * static_cast<M>(stats.invstd[c]);
    shift[c] = static_cast<M>(beta[c]) - static_cast<M>(stats.mean[c]) * scale[c];
  }
  each_pooled(s, [&](int64_t row, int64_t ow, int64_t c) {
    const int64_t i = win.pooled(row, ow, c);
    out[i] = static_cast<T>(norm_relu<M>(M(pooled[i]), scale[c], shift[c]));
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
  const Windows win(s);
  const int64_t C = s.channels, col = win.column, line = win.line;
  std::vector<M> mean(C);
  for (int64_t c = 0; c < C; ++c) mean[c] = static_cast<M>(stats.mean[c]);
  std::vector<double> sum_g, sum_gx;
  channel_sums<M>(s, [&](int64_t row, int64_t ow, int64_t c, M& g_sum, M& gx_sum) {
    const int64_t i = win.pooled(row, ow, c);
    const M o = M(out[i]);
    const M g = o > M(0) || o != o ? M(grad[i]) : M(0);
    g_sum += g;
    gx_sum += g * (M(pooled[i]) - mean[c]);
  }, sum_g, sum_gx);
  grad_weight.resize(C);
  grad_bias = sum_g;
  const double count = static_cast<double>(s.count());
  std::vector<M> mean_g(C), k(C), gain(C);
  for (int64_t c = 0; c < C; ++c) {
    grad_weight[c] = sum_gx[c] * stats.invstd[c];
    mean_g[c] = training ? static_cast<M>(sum_g[c] / count) : M(0);
    k[c] = training ? static_cast<M>(sum_gx[c] * stats.invstd[c] * stats.invstd[c] / count) : M(0);
    gain[c] = static_cast<M>(gamma[c] * stats.invstd[c]);
  }
  each_pooled(s, [&](int64_t row, int64_t ow, int64_t c) {
    const int64_t i = win.pooled(row, ow, c);
    const M o = M(out[i]);
    const T gy = static_cast<T>(pooled_grad<M>(M(grad[i]), o > M(0) || o != o, M(pooled[i]), mean[c], mean_g[c],
                                               k[c], gain[c]));
    const int64_t at = win.window(row, ow, c);
    const T* w = x + at;
    M max;
    const int index = window_argmax<M>(M(w[0]), M(w[col]), M(w[line]), M(w[line + col]), &max);
    T* gw = grad_input + at;
    gw[0] = index == 0 ? gy : T(0);
    gw[col] = index == 1 ? gy : T(0);
    gw[line] = index == 2 ? gy : T(0);
    gw[line + col] = index == 3 ? gy : T(0);
  });
  // The last column and row where W and H are odd: in no window (max_pool2d's floor), their gradient zero.
  const int64_t H = s.height, W = s.width, outer = s.channels_last ? s.batch : s.batch * C;
  if (H % 2 == 0 && W % 2 == 0) return;
  at::parallel_for(0, outer, 1, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      T* plane = grad_input + o * H * line;
      if (W % 2 == 1) {
        for (int64_t h = 0; h < H; ++h) std::fill_n(plane + h * line + (W - 1) * col, col, T(0));
      }
      if (H % 2 == 1) std::fill_n(plane + (H - 1) * line, line, T(0));
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
