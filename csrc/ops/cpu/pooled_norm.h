#pragma once
// The batch norm + ReLU over 2x2-max-pooled values that gpucore's CPU kernels of maxpool_bn_relu (pool_norm.h) and
// conv3x3_maxpool_bn_relu (conv_pool_norm.h) share: the per-channel statistics, the normalisation, the running
// statistics, and the backward's per-channel sums and coefficients. Each op brings its own pooling (forward) and its
// own use of the pooled values' gradients (backward). Per-channel sums add up in float32 along a row and in float64
// across rows, per plane or per fixed block of rows, then in a fixed order: the same result for any thread count.
// Included by files compiled -ffp-contract=off -fno-trapping-math (CMakeLists.txt).
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <tuple>
#include <type_traits>
#include <vector>

#include "ops/fused/pool_norm.h"
#include "ops/pool_norm_math.h"

namespace gpucore::ops::pooled_norm {

// Fixed blocks of rows for the channels-last sums (their partial sums are `width` values each).
constexpr int64_t kSumBlocks = 64;
// Contiguous planes sum in float over chunks of this many values, the chunks in float64.
constexpr int64_t kSumChunk = 1024;

// The channels-last passes over one pooled row (px pixels of C channels), vectorised across the channels: each
// channel's values add up in the same order in every compiled version, so all give the same results.
enum class RowPass {
  kSum,                // sum[c] += y
  kSquares,            // sum[c] += (y - a[c])^2, a the mean
  kNormRelu,           // out = norm_relu(y, a[c], b[c]), a the scale, b the shift
  kGradientSums,       // sum[c] += masked(g, o), sum[C + c] += masked(g, o) * (y - a[c]), a the mean
};

// One pass's operands: the pooled values y, the gradient g reaching out o, per-channel a and b, the sums or out.
template <typename T>
struct Row {
  using M = at::opmath_type<T>;
  const T* y = nullptr;
  const T* g = nullptr;
  const T* o = nullptr;
  const M* a = nullptr;
  const M* b = nullptr;
  M* sum = nullptr;
  T* out = nullptr;
  int64_t px = 0, C = 0;
};

// The ReLU's mask: out > 0 (or NaN), as threshold_backward.
template <typename M>
inline M masked(M g, M o) {
  return (o > M(0)) | (o != o) ? g : M(0);
}

template <typename T, typename M>
__attribute__((always_inline)) inline void add_values(const T* __restrict y, const M* __restrict a,
                                                      M* __restrict sum, int64_t px, int64_t C, bool squares) {
  for (int64_t i = 0; i < px; ++i) {
    if (squares) {
      for (int64_t c = 0; c < C; ++c) {
        const M d = M(y[i * C + c]) - a[c];
        sum[c] += d * d;
      }
    } else {
      for (int64_t c = 0; c < C; ++c) sum[c] += M(y[i * C + c]);
    }
  }
}

template <typename T, typename M>
__attribute__((always_inline)) inline void normalize_values(const T* __restrict y, const M* __restrict scale,
                                                            const M* __restrict shift, T* __restrict out, int64_t px,
                                                            int64_t C) {
  for (int64_t i = 0; i < px; ++i) {
    for (int64_t c = 0; c < C; ++c) out[i * C + c] = static_cast<T>(norm_relu<M>(M(y[i * C + c]), scale[c], shift[c]));
  }
}

template <typename T, typename M>
__attribute__((always_inline)) inline void add_gradients(const T* __restrict g, const T* __restrict o,
                                                         const T* __restrict y, const M* __restrict mean,
                                                         M* __restrict sum, M* __restrict deviations, int64_t px,
                                                         int64_t C) {
  for (int64_t i = 0; i < px; ++i) {
    for (int64_t c = 0; c < C; ++c) {
      const M gm = masked(M(g[i * C + c]), M(o[i * C + c]));
      sum[c] += gm;
      deviations[c] += gm * (M(y[i * C + c]) - mean[c]);
    }
  }
}

template <typename T>
__attribute__((always_inline)) inline void row_pass(RowPass pass, const Row<T>& r) {
  using M = at::opmath_type<T>;
  switch (pass) {
    case RowPass::kSum:
      return add_values<T, M>(r.y, r.a, r.sum, r.px, r.C, false);
    case RowPass::kSquares:
      return add_values<T, M>(r.y, r.a, r.sum, r.px, r.C, true);
    case RowPass::kNormRelu:
      return normalize_values<T, M>(r.y, r.a, r.b, r.out, r.px, r.C);
    case RowPass::kGradientSums:
      return add_gradients<T, M>(r.g, r.o, r.y, r.a, r.sum, r.sum + r.C, r.px, r.C);
  }
}

// row_pass, also compiled for AVX2 and AVX-512 (pooled_norm_rows.cpp, vector_clones.h), for each floating type.
template <typename T>
void run_row_pass(RowPass pass, const Row<T>& r);

template <typename M>
std::vector<M> channel_values(const at::Tensor& values) {
  std::vector<M> out(values.size(0));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, values.scalar_type(), "pooled_norm_cpu", [&] {
    const scalar_t* data = values.data_ptr<scalar_t>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<M>(data[i * values.stride(0)]);
  });
  return out;
}

inline at::Tensor channel_tensor(const std::vector<double>& values, const at::TensorOptions& options) {
  at::Tensor out = at::empty({static_cast<int64_t>(values.size())}, options);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "pooled_norm_cpu", [&] {
    scalar_t* data = out.data_ptr<scalar_t>();
    for (size_t i = 0; i < values.size(); ++i) data[i] = static_cast<scalar_t>(values[i]);
  });
  return out;
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

// `width` sums over `rows` rows: row(r, partial) adds row r into `width` float values (zeroed before each row),
// which add into float64 per fixed block of rows, the blocks in order.
template <typename M, typename Row>
std::vector<double> block_sums(int64_t rows, int64_t width, const Row& row) {
  std::vector<double> sums(width, 0.0);
  const int64_t blocks = std::min(rows, kSumBlocks);
  std::vector<double> per_block(blocks * width, 0.0);
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<M> partial(width);
    for (int64_t b = begin; b < end; ++b) {
      double* acc = per_block.data() + b * width;
      for (int64_t r = rows * b / blocks; r < rows * (b + 1) / blocks; ++r) {
        std::fill(partial.begin(), partial.end(), M(0));
        row(r, partial.data());
        for (int64_t i = 0; i < width; ++i) acc[i] += static_cast<double>(partial[i]);
      }
    }
  });
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t i = 0; i < width; ++i) sums[i] += per_block[b * width + i];
  }
  return sums;
}

// K per-channel sums over the pooled tensor, sum k of channel c at [k * C + c]. Contiguous: plane(p, c) gives plane
// p's K sums (channel c = p % C) as a std::array<double, K>. Channels-last: row(r, sums) adds pooled row r (n * OH +
// oh: OW pixels of C channels) into the K * C float sums.
template <int K, typename M, typename Plane, typename Row>
std::vector<double> channel_sums(const PoolNormShape& s, const Plane& plane, const Row& row) {
  const int64_t C = s.channels;
  if (s.channels_last) return block_sums<M>(s.batch * s.pooled_height, K * C, row);
  std::vector<double> sums(K * C, 0.0);
  const int64_t planes = s.batch * C;
  std::vector<std::array<double, K>> per_plane(planes);
  at::parallel_for(0, planes, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) per_plane[p] = plane(p, p % C);
  });
  for (int64_t p = 0; p < planes; ++p) {
    for (int k = 0; k < K; ++k) sums[k * C + p % C] += per_plane[p][k];
  }
  return sums;
}

// Per-channel float64 statistics of one call.
struct Channels {
  std::vector<double> mean, invstd, var;  // var: the batch's biased variance (training only)
};

// The running statistics (evaluation): mean and 1 / sqrt(var + eps).
inline Channels running_channels(const at::Tensor& running_mean, const at::Tensor& running_var, double eps) {
  Channels stats{channel_values<double>(running_mean), channel_values<double>(running_var), {}};
  for (double& v : stats.invstd) v = 1.0 / std::sqrt(v + eps);
  return stats;
}

// The statistics a forward saved for its backward (save_mean, save_invstd).
inline Channels saved_channels(const at::Tensor& save_mean, const at::Tensor& save_invstd) {
  return Channels{channel_values<double>(save_mean), channel_values<double>(save_invstd), {}};
}

// The forward's batch norm and ReLU of the pooled tensor (shape s: pooled rows of OW values, or OW x C values
// channels-last). pool_rows(begin, end) writes pooled rows [begin, end) (contiguous: row = plane * OH + oh;
// channels-last: n * OH + oh); training calls it inside the first statistics pass (its rows still in cache) and
// fills stats, evaluation uses the running statistics in stats.
template <typename T, typename PoolRows>
void normalize_pooled(const PoolNormShape& s, const PoolRows& pool_rows, const T* __restrict pooled,
                      T* __restrict out, bool training, const std::vector<double>& gamma,
                      const std::vector<double>& beta, Channels& stats, double eps) {
  using M = at::opmath_type<T>;
  const int64_t C = s.channels, OH = s.pooled_height, OW = s.pooled_width, area = OH * OW;
  const int64_t rows = s.channels_last ? s.batch * OH : s.batch * C * OH;
  const int64_t row_size = s.channels_last ? OW * C : OW;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, row_size));
  const int64_t px = s.channels_last ? OW : 0;  // pixels per channels-last row
  if (training) {
    const std::vector<double> sums = channel_sums<1, M>(
        s,
        [&](int64_t p, int64_t) {
          pool_rows(p * OH, (p + 1) * OH);
          const T* __restrict y = pooled + p * area;
          return std::array<double, 1>{lane_sum<M>(area, [&](int64_t i) { return M(y[i]); })};
        },
        [&](int64_t r, M* sum) {
          pool_rows(r, r + 1);
          run_row_pass<T>(RowPass::kSum, Row<T>{.y = pooled + r * OW * C, .sum = sum, .px = px, .C = C});
        });
    const double count = static_cast<double>(s.count());
    std::vector<M> mean(C);
    stats.mean.resize(C);
    for (int64_t c = 0; c < C; ++c) stats.mean[c] = sums[c] / count, mean[c] = static_cast<M>(stats.mean[c]);
    const std::vector<double> squares = channel_sums<1, M>(
        s,
        [&](int64_t p, int64_t c) {
          const T* __restrict y = pooled + p * area;
          const M m = mean[c];
          return std::array<double, 1>{lane_sum<M>(area, [&](int64_t i) {
            const M d = M(y[i]) - m;
            return d * d;
          })};
        },
        [&](int64_t r, M* sum) {
          run_row_pass<T>(RowPass::kSquares,
                          Row<T>{.y = pooled + r * OW * C, .a = mean.data(), .sum = sum, .px = px, .C = C});
        });
    stats.var.resize(C);
    stats.invstd.resize(C);
    for (int64_t c = 0; c < C; ++c) {
      stats.var[c] = squares[c] / count;
      stats.invstd[c] = 1.0 / std::sqrt(stats.var[c] + eps);
    }
  } else {
    at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) { pool_rows(begin, end); });
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
        run_row_pass<T>(RowPass::kNormRelu,
                        Row<T>{.y = y, .a = scale.data(), .b = shift.data(), .out = o, .px = OW, .C = C});
      }
    }
  });
}

// torch's batch_norm update: running = (1 - momentum) * running + momentum * batch, the variance unbiased.
// Training only; (new_running_mean, new_running_var) in the running statistics' dtype.
inline std::tuple<at::Tensor, at::Tensor> updated_running(const PoolNormShape& s, const at::Tensor& running_mean,
                                                          const at::Tensor& running_var, double momentum,
                                                          const Channels& stats) {
  std::vector<double> mean = channel_values<double>(running_mean), var = channel_values<double>(running_var);
  const double count = static_cast<double>(s.count());
  for (int64_t c = 0; c < s.channels; ++c) {
    mean[c] = (1.0 - momentum) * mean[c] + momentum * stats.mean[c];
    var[c] = (1.0 - momentum) * var[c] + momentum * stats.var[c] * count / (count - 1.0);
  }
  return {channel_tensor(mean, running_mean.options()), channel_tensor(var, running_var.options())};
}

// The backward's per-channel coefficients (pooled_grad's) and the batch norm's parameter gradients.
template <typename M>
struct GradCoefficients {
  std::vector<M> mean, mean_g, k, gain;
  std::vector<double> grad_weight, grad_bias;
};

// From the gradient reaching out, and out and the pooled values the forward wrote (shape s).
template <typename T>
GradCoefficients<at::opmath_type<T>> grad_coefficients(const PoolNormShape& s, const T* __restrict grad,
                                                        const T* __restrict pooled, const T* __restrict out,
                                                        bool training, const std::vector<double>& gamma,
                                                        const Channels& stats) {
  using M = at::opmath_type<T>;
  const int64_t C = s.channels, OW = s.pooled_width, area = s.pooled_height * OW;
  const int64_t px = s.channels_last ? OW : 0;
  GradCoefficients<M> co;
  co.mean.resize(C);
  for (int64_t c = 0; c < C; ++c) co.mean[c] = static_cast<M>(stats.mean[c]);
  // the masked gradients' sums (grad_bias) and their sums times the deviations, in one pass over the three tensors
  const std::vector<double> sums = channel_sums<2, M>(
      s,
      [&](int64_t p, int64_t c) {
        const T *__restrict g = grad + p * area, *__restrict o = out + p * area, *__restrict y = pooled + p * area;
        const M m = co.mean[c];
        return std::array<double, 2>{
            lane_sum<M>(area, [&](int64_t i) { return masked(M(g[i]), M(o[i])); }),
            lane_sum<M>(area, [&](int64_t i) { return masked(M(g[i]), M(o[i])) * (M(y[i]) - m); })};
      },
      [&](int64_t r, M* sum) {
        const int64_t at = r * OW * C;
        run_row_pass<T>(RowPass::kGradientSums, Row<T>{.y = pooled + at, .g = grad + at, .o = out + at,
                                                       .a = co.mean.data(), .sum = sum, .px = px, .C = C});
      });
  co.grad_bias.assign(sums.begin(), sums.begin() + C);
  const double* sum_gx = sums.data() + C;
  co.grad_weight.resize(C);
  co.mean_g.resize(C);
  co.k.resize(C);
  co.gain.resize(C);
  const double count = static_cast<double>(s.count());
  for (int64_t c = 0; c < C; ++c) {
    co.grad_weight[c] = sum_gx[c] * stats.invstd[c];
    co.mean_g[c] = training ? static_cast<M>(co.grad_bias[c] / count) : M(0);
    co.k[c] = training ? static_cast<M>(sum_gx[c] * stats.invstd[c] * stats.invstd[c] / count) : M(0);
    co.gain[c] = static_cast<M>(gamma[c] * stats.invstd[c]);
  }
  return co;
}

// The gradients of one channels-last pooled row's values (OW pixels of C channels), each rounded to T, into
// gys[ow * stride + c] as Out (T, or the math type for a kernel that computes in it).
template <typename T, typename Out>
__attribute__((always_inline)) inline void pooled_row_grads(const GradCoefficients<at::opmath_type<T>>& co,
                                                            const T* __restrict g, const T* __restrict o,
                                                            const T* __restrict y, int64_t OW, int64_t C,
                                                            Out* __restrict gys, int64_t stride) {
  using M = at::opmath_type<T>;
  const M *__restrict m = co.mean.data(), *__restrict mg = co.mean_g.data(), *__restrict kc = co.k.data(),
          *__restrict gn = co.gain.data();
  for (int64_t ow = 0; ow < OW; ++ow) {
    const int64_t i = ow * C;
    Out* __restrict row = gys + ow * stride;
    for (int64_t c = 0; c < C; ++c) {
      row[c] = static_cast<Out>(static_cast<T>(
          pooled_grad<M>(masked(M(g[i + c]), M(o[i + c])), true, M(y[i + c]), m[c], mg[c], kc[c], gn[c])));
    }
  }
}

}  // namespace gpucore::ops::pooled_norm
