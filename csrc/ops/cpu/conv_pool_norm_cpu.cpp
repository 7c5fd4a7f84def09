// CPU kernel of gpucore::conv3x3_maxpool_bn_relu and its backward (conv_pool_norm.h). A pooled row (one image's
// pooled row of all channels, channels-last) is computed from a zero-padded tile of the four input rows its
// windows' 3x3 neighbourhoods cover; the batch norm over the pooled values is pooled_norm.h's. The convolution
// weights' gradient adds up per pooled row in float32 and per fixed block of rows in float64 (block_sums): the
// same result for any thread count.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <vector>

#include "ops/fused/conv_pool_norm.h"
#include "ops/cpu/pooled_norm.h"
#include "ops/cpu/vector_clones.h"
#include "ops/pool_norm_math.h"

namespace gpucore::ops {
namespace {

using pooled_norm::Channels;

// The input as the kernels read it: any strides.
template <typename T>
struct InputView {
  const T* data;
  int64_t stride_n, stride_c, stride_h, stride_w, channels, height, width;
};

// Input rows 2 * oh - 1 to 2 * oh + 2 of image n, columns -1 to W, zero outside the image: [4][W + 2][Cin].
template <typename T, typename M>
void fill_tile(const InputView<T>& x, int64_t n, int64_t oh, M* __restrict tile) {
  const int64_t Cin = x.channels, W = x.width, cols = W + 2;
  for (int64_t i = 0; i < 4; ++i) {
    const int64_t h = 2 * oh - 1 + i;
    M* __restrict row = tile + i * cols * Cin;
    if (h < 0 || h >= x.height) {
      std::fill_n(row, cols * Cin, M(0));
      continue;
    }
    std::fill_n(row, Cin, M(0));
    std::fill_n(row + (W + 1) * Cin, Cin, M(0));
    const T* src = x.data + n * x.stride_n + h * x.stride_h;
    if (x.stride_w == Cin && (Cin == 1 || x.stride_c == 1)) {  // the row's W x Cin values in order (a copy)
      for (int64_t i = 0; i < W * Cin; ++i) row[Cin + i] = M(src[i]);
      continue;
    }
    for (int64_t w = 0; w < W; ++w) {
      for (int64_t ci = 0; ci < Cin; ++ci) row[(w + 1) * Cin + ci] = M(src[w * x.stride_w + ci * x.stride_c]);
    }
  }
}

// One 64-byte vector of the math type (GCC's vector extension: an AVX-512 register in the x86-64-v4 clone, two
// AVX2 ones in the v3 clone, four SSE ones otherwise). Channels go through the kernels a vector at a time, the
// taps' weights and the kernels' buffers padded to a multiple of its lanes with zeros.
template <typename M>
struct Lanes;
template <>
struct Lanes<float> {
  typedef float type __attribute__((vector_size(64)));
};
template <>
struct Lanes<double> {
  typedef double type __attribute__((vector_size(64)));
};
template <typename M>
constexpr int64_t kLaneCount = 64 / sizeof(M);

// (By pointer, not returned: a returned vector's ABI differs between the clones.)
template <typename M>
__attribute__((always_inline)) inline void load_lanes(typename Lanes<M>::type* to, const M* from) {
  std::memcpy(to, from, sizeof(*to));
}

int64_t padded_channels(int64_t channels, int64_t lanes) { return (channels + lanes - 1) / lanes * lanes; }

// One pooled row (OW windows of C channels, channels-last) and its windows' places, from the row's tile: each
// window's four convolution values per channel (its elements top left, top right, bottom left, bottom right; the
// taps added in the order (kh, kw, ci), each product rounded before its sum: -ffp-contract=off), each rounded to T
// (as a convolution in T writes it), then their maximum and its place by max_pool2d's rule (window_argmax's,
// branch-free). taps: [kh][kw][ci][Cp]. kCin: the input's channels when known at compile time (0: cin).
template <typename T, int kCin>
__attribute__((always_inline)) inline void conv_pool_row(const at::opmath_type<T>* __restrict tile,
                                                         const at::opmath_type<T>* __restrict taps, int64_t W,
                                                         int64_t OW, int64_t cin, int64_t C, T* __restrict pooled,
                                                         uint8_t* __restrict window) {
  using M = at::opmath_type<T>;
  using V = typename Lanes<M>::type;
  constexpr int64_t L = kLaneCount<M>;
  const int64_t Cin = kCin > 0 ? kCin : cin, cols = W + 2, Cp = padded_channels(C, L);
  for (int64_t c0 = 0; c0 < C; c0 += L) {
    const int64_t lanes = std::min(L, C - c0);
    for (int64_t ow = 0; ow < OW; ++ow) {
      const M* __restrict at_window = tile + 2 * ow * Cin;
      V a0 = {}, a1 = {}, a2 = {}, a3 = {};
      for (int64_t kh = 0; kh < 3; ++kh) {
        for (int64_t kw = 0; kw < 3; ++kw) {
          for (int64_t ci = 0; ci < Cin; ++ci) {
            V w;
            load_lanes(&w, taps + ((kh * 3 + kw) * Cin + ci) * Cp + c0);
            a0 += w * at_window[(kh * cols + kw) * Cin + ci];
            a1 += w * at_window[(kh * cols + kw + 1) * Cin + ci];
            a2 += w * at_window[((kh + 1) * cols + kw) * Cin + ci];
            a3 += w * at_window[((kh + 1) * cols + kw + 1) * Cin + ci];
          }
        }
      }
      M acc[4][L];
      std::memcpy(acc[0], &a0, sizeof(V));
      std::memcpy(acc[1], &a1, sizeof(V));
      std::memcpy(acc[2], &a2, sizeof(V));
      std::memcpy(acc[3], &a3, sizeof(V));
      T* __restrict y = pooled + ow * C + c0;
      uint8_t* __restrict place = window + ow * C + c0;
      for (int64_t c = 0; c < lanes; ++c) {
        const M v0 = M(T(acc[0][c])), v1 = M(T(acc[1][c])), v2 = M(T(acc[2][c])), v3 = M(T(acc[3][c]));
        const bool t1 = (v1 > v0) | (v1 != v1);
        M best = t1 ? v1 : v0;
        int index = t1 ? 1 : 0;
        const bool t2 = (v2 > best) | (v2 != v2);
        best = t2 ? v2 : best;
        index = t2 ? 2 : index;
        const bool t3 = (v3 > best) | (v3 != v3);
        best = t3 ? v3 : best;
        index = t3 ? 3 : index;
        y[c] = static_cast<T>(best);
        place[c] = static_cast<uint8_t>(index);
      }
    }
  }
}

// The convolution weights' gradient from one pooled row: partial[tap * C + c] += the pooled gradient of channel c
// at each window times the input at tap's offset from the window's maximum (the windows added in order into one
// sum per tap). g, o, y, place: the row's gradient reaching out, out, the pooled values and the windows' places
// ([OW][C]); grads and places: buffers of [OW][Cp] math-type values whose padding lanes are zero.
template <typename T, int kCin>
__attribute__((always_inline)) inline void conv_weight_grad_row(
    const at::opmath_type<T>* __restrict tile, const pooled_norm::GradCoefficients<at::opmath_type<T>>& co,
    const T* __restrict g, const T* __restrict o, const T* __restrict y, const uint8_t* __restrict place,
    int64_t W, int64_t OW, int64_t cin, int64_t C, at::opmath_type<T>* __restrict grads,
    at::opmath_type<T>* __restrict places, at::opmath_type<T>* __restrict partial) {
  using M = at::opmath_type<T>;
  using V = typename Lanes<M>::type;
  constexpr int64_t L = kLaneCount<M>;
  const int64_t Cin = kCin > 0 ? kCin : cin, cols = W + 2, Cp = padded_channels(C, L);
  pooled_norm::pooled_row_grads<T, M>(co, g, o, y, OW, C, grads, Cp);
  for (int64_t ow = 0; ow < OW; ++ow) {
    for (int64_t c = 0; c < C; ++c) places[ow * Cp + c] = M(place[ow * C + c]);
  }
  const V zero = {}, one = zero + M(1), two = zero + M(2);
  for (int64_t c0 = 0; c0 < C; c0 += L) {
    const int64_t lanes = std::min(L, C - c0);
    for (int64_t kh = 0; kh < 3; ++kh) {
      for (int64_t kw = 0; kw < 3; ++kw) {
        for (int64_t ci = 0; ci < Cin; ++ci) {
          V sum = {};
          for (int64_t ow = 0; ow < OW; ++ow) {
            const M* __restrict at_window = tile + 2 * ow * Cin;
            const V x0 = zero + at_window[(kh * cols + kw) * Cin + ci];
            const V x1 = zero + at_window[(kh * cols + kw + 1) * Cin + ci];
            const V x2 = zero + at_window[((kh + 1) * cols + kw) * Cin + ci];
            const V x3 = zero + at_window[((kh + 1) * cols + kw + 1) * Cin + ci];
            V p, gv;
            load_lanes(&p, places + ow * Cp + c0);
            load_lanes(&gv, grads + ow * Cp + c0);
            const V x = p == zero ? x0 : (p == one ? x1 : (p == two ? x2 : x3));
            sum += gv * x;
          }
          M lane[L];
          std::memcpy(lane, &sum, sizeof(V));
          M* __restrict out = partial + ((kh * 3 + kw) * Cin + ci) * C + c0;
          for (int64_t c = 0; c < lanes; ++c) out[c] += lane[c];
        }
      }
    }
  }
}

// The kernels by the input's channels: 1 (grey) and 3 (RGB) with their loops unrolled.
template <typename T>
__attribute__((always_inline)) inline void conv_pool_row_by_channels(const at::opmath_type<T>* tile,
                                                                     const at::opmath_type<T>* taps, int64_t W,
                                                                     int64_t OW, int64_t Cin, int64_t C, T* pooled,
                                                                     uint8_t* window) {
  if (Cin == 1) {
    conv_pool_row<T, 1>(tile, taps, W, OW, Cin, C, pooled, window);
  } else if (Cin == 3) {
    conv_pool_row<T, 3>(tile, taps, W, OW, Cin, C, pooled, window);
  } else {
    conv_pool_row<T, 0>(tile, taps, W, OW, Cin, C, pooled, window);
  }
}

// The arguments of conv_weight_grad_row after its kCin.
#define GPUCORE_WEIGHT_GRAD_ARGS tile, co, g, o, y, place, W, OW, Cin, C, grads, places, partial

template <typename T>
__attribute__((always_inline)) inline void conv_weight_grad_row_by_channels(
    const at::opmath_type<T>* tile, const pooled_norm::GradCoefficients<at::opmath_type<T>>& co, const T* g,
    const T* o, const T* y, const uint8_t* place, int64_t W, int64_t OW, int64_t Cin, int64_t C,
    at::opmath_type<T>* grads, at::opmath_type<T>* places, at::opmath_type<T>* partial) {
  if (Cin == 1) {
    conv_weight_grad_row<T, 1>(GPUCORE_WEIGHT_GRAD_ARGS);
  } else if (Cin == 3) {
    conv_weight_grad_row<T, 3>(GPUCORE_WEIGHT_GRAD_ARGS);
  } else {
    conv_weight_grad_row<T, 0>(GPUCORE_WEIGHT_GRAD_ARGS);
  }
}

// The two, also compiled for AVX2 and AVX-512 for each type (vector_clones.h; -ffp-contract=off: the same values).
template <typename T>
GPUCORE_VECTOR_CLONES void cloned_conv_pool_row(const at::opmath_type<T>* tile, const at::opmath_type<T>* taps,
                                                int64_t W, int64_t OW, int64_t Cin, int64_t C, T* pooled,
                                                uint8_t* window) {
  conv_pool_row_by_channels<T>(tile, taps, W, OW, Cin, C, pooled, window);
}

template <typename T>
GPUCORE_VECTOR_CLONES void cloned_conv_weight_grad_row(
    const at::opmath_type<T>* tile, const pooled_norm::GradCoefficients<at::opmath_type<T>>& co, const T* g,
    const T* o, const T* y, const uint8_t* place, int64_t W, int64_t OW, int64_t Cin, int64_t C,
    at::opmath_type<T>* grads, at::opmath_type<T>* places, at::opmath_type<T>* partial) {
  conv_weight_grad_row_by_channels<T>(GPUCORE_WEIGHT_GRAD_ARGS);
}

#undef GPUCORE_WEIGHT_GRAD_ARGS

// Each thread's tile and row buffers, kept between rows and calls.
template <typename T>
struct Scratch {
  using M = at::opmath_type<T>;
  std::vector<M> tile, grads, places;  // grads and places: [OW][Cp], the padding lanes zero (never written)
};

template <typename T>
Scratch<T>& thread_scratch(const ConvPoolNormShape& s) {
  thread_local Scratch<T> scratch;
  const int64_t OW = s.pooled.pooled_width;
  const int64_t Cp = padded_channels(s.pooled.channels, kLaneCount<at::opmath_type<T>>);
  scratch.tile.resize(4 * (s.pooled.width + 2) * s.in_channels);
  scratch.grads.resize(OW * Cp);
  scratch.places.resize(OW * Cp);
  return scratch;
}

// The convolution weights as [kh][kw][ci][Cp] in the math type, channels C to Cp zero.
template <typename T>
std::vector<at::opmath_type<T>> taps_by_channel(const at::Tensor& conv_weight) {
  using M = at::opmath_type<T>;
  const int64_t C = conv_weight.size(0), Cp = padded_channels(C, kLaneCount<M>);
  const at::Tensor w = conv_weight.permute({2, 3, 1, 0}).contiguous();  // 3 x 3 x Cin x C
  const T* data = w.const_data_ptr<T>();
  std::vector<M> taps(w.numel() / C * Cp, M(0));
  for (int64_t tap = 0; tap < w.numel() / C; ++tap) {
    for (int64_t c = 0; c < C; ++c) taps[tap * Cp + c] = static_cast<M>(data[tap * C + c]);
  }
  return taps;
}

template <typename T>
InputView<T> input_view(const at::Tensor& input) {
  return {input.const_data_ptr<T>(), input.stride(0), input.stride(1), input.stride(2), input.stride(3),
          input.size(1), input.size(2), input.size(3)};
}

ConvPoolNormOutputs conv3x3_maxpool_bn_relu_cpu(const at::Tensor& input, const at::Tensor& conv_weight,
                                                const at::Tensor& weight, const at::Tensor& bias,
                                                const at::Tensor& running_mean, const at::Tensor& running_var,
                                                bool training, double momentum, double eps) {
  const ConvPoolNormShape shape =
      conv_pool_norm_shape(input, conv_weight, weight, bias, running_mean, running_var, training);
  const PoolNormShape& s = shape.pooled;
  const std::vector<int64_t> size{s.batch, s.channels, s.pooled_height, s.pooled_width};
  const auto channels_last = at::MemoryFormat::ChannelsLast;
  at::Tensor pooled = at::empty(size, input.options().memory_format(channels_last));
  at::Tensor out = at::empty(size, input.options().memory_format(channels_last));
  at::Tensor window = at::empty(size, input.options().dtype(at::kByte).memory_format(channels_last));
  const at::TensorOptions math = input.options().dtype(pool_norm_math_type(input.scalar_type()));
  Channels stats = training ? Channels{} : pooled_norm::running_channels(running_mean, running_var, eps);
  const std::vector<double> gamma = pooled_norm::channel_values<double>(weight),
                            beta = pooled_norm::channel_values<double>(bias);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "conv3x3_maxpool_bn_relu_cpu", [&] {
    const InputView<scalar_t> x = input_view<scalar_t>(input);
    const auto taps = taps_by_channel<scalar_t>(conv_weight);
    scalar_t* pooled_values = pooled.data_ptr<scalar_t>();
    uint8_t* places = window.data_ptr<uint8_t>();
    const int64_t OH = s.pooled_height, row_size = s.pooled_width * s.channels;
    const auto pool_rows = [&](int64_t begin, int64_t end) {
      auto& scratch = thread_scratch<scalar_t>(shape);
      for (int64_t r = begin; r < end; ++r) {
        fill_tile(x, r / OH, r % OH, scratch.tile.data());
        cloned_conv_pool_row<scalar_t>(scratch.tile.data(), taps.data(), s.width, s.pooled_width, shape.in_channels,
                                       s.channels, pooled_values + r * row_size, places + r * row_size);
      }
    };
    pooled_norm::normalize_pooled<scalar_t>(s, pool_rows, pooled_values, out.data_ptr<scalar_t>(), training, gamma,
                                            beta, stats, eps);
  });
  at::Tensor new_mean = at::empty({0}, running_mean.options()), new_var = at::empty({0}, running_var.options());
  if (training) std::tie(new_mean, new_var) = pooled_norm::updated_running(s, running_mean, running_var, momentum, stats);
  if (!shape.out_channels_last) out = out.contiguous();
  return {out,
          pooled,
          window,
          pooled_norm::channel_tensor(stats.mean, math),
          pooled_norm::channel_tensor(stats.invstd, math),
          new_mean,
          new_var};
}

ConvPoolNormGrads conv3x3_maxpool_bn_relu_backward_cpu(const at::Tensor& grad_out, const at::Tensor& input,
                                                       const at::Tensor& conv_weight, const at::Tensor& pooled,
                                                       const at::Tensor& window, const at::Tensor& out,
                                                       const at::Tensor& weight, const at::Tensor& save_mean,
                                                       const at::Tensor& save_invstd, bool training) {
  const ConvPoolNormShape shape = conv_pool_norm_backward_shape(grad_out, input, conv_weight, pooled, window, out,
                                                                weight, save_mean, save_invstd);
  const PoolNormShape& s = shape.pooled;
  const at::Tensor grad = pool_norm_layout(grad_out, true);
  const at::Tensor pooled_values = pool_norm_layout(pooled, true);
  const at::Tensor out_values = pool_norm_layout(out, true);
  const at::Tensor places = pool_norm_layout(window, true);
  const Channels stats = pooled_norm::saved_channels(save_mean, save_invstd);
  const std::vector<double> gamma = pooled_norm::channel_values<double>(weight);
  const int64_t C = s.channels, Cin = shape.in_channels, OH = s.pooled_height, OW = s.pooled_width;
  std::vector<double> grad_conv, grad_weight, grad_bias;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(),
                                  "conv3x3_maxpool_bn_relu_backward_cpu", [&] {
    using M = at::opmath_type<scalar_t>;
    const scalar_t* g = grad.const_data_ptr<scalar_t>();
    const scalar_t* y = pooled_values.const_data_ptr<scalar_t>();
    const scalar_t* o = out_values.const_data_ptr<scalar_t>();
    const uint8_t* place = places.const_data_ptr<uint8_t>();
    const pooled_norm::GradCoefficients<M> co = pooled_norm::grad_coefficients<scalar_t>(s, g, y, o, training, gamma,
                                                                                         stats);
    grad_weight = co.grad_weight;
    grad_bias = co.grad_bias;
    const InputView<scalar_t> x = input_view<scalar_t>(input);
    grad_conv = pooled_norm::block_sums<M>(s.batch * OH, 9 * Cin * C, [&](int64_t r, M* __restrict partial) {
      auto& scratch = thread_scratch<scalar_t>(shape);
      const int64_t at = r * OW * C;
      fill_tile(x, r / OH, r % OH, scratch.tile.data());
      cloned_conv_weight_grad_row<scalar_t>(scratch.tile.data(), co, g + at, o + at, y + at, place + at, s.width, OW,
                                            Cin, C, scratch.grads.data(), scratch.places.data(), partial);
    });
  });
  // [kh][kw][ci][c] -> C x Cin x 3 x 3, in conv_weight's dtype and memory format
  const at::Tensor by_tap = pooled_norm::channel_tensor(grad_conv, conv_weight.options().dtype(at::kDouble));
  const at::Tensor grad_conv_weight = by_tap.view({3, 3, Cin, C})
                                          .permute({3, 2, 0, 1})
                                          .to(conv_weight.scalar_type())
                                          .contiguous(conv_weight.suggest_memory_format());
  return {grad_conv_weight, pooled_norm::channel_tensor(grad_weight, weight.options()),
          pooled_norm::channel_tensor(grad_bias, weight.options())};
}

}  // namespace

TORCH_LIBRARY_IMPL(gpucore, CPU, m) {
  m.impl("conv3x3_maxpool_bn_relu", &conv3x3_maxpool_bn_relu_cpu);
  m.impl("conv3x3_maxpool_bn_relu_backward", &conv3x3_maxpool_bn_relu_backward_cpu);
}

}  // namespace gpucore::ops
