#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "ops/cuda/device_values.h"
#include "ops/cuda/kernel_launch.h"
#include "ops/cuda/pool_norm_kernels.h"
#include "ops/pool_norm_math.h"

namespace gpucore::ops::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

// Where pooled element i (in the tensors' memory order) is: its channel and the offset of its window in the input.
struct Place {
  int64_t channel, window;
};
__device__ inline Place place(const PoolNormDims& d, int64_t i) {
  if (d.channels_last) {
    const int64_t c = i % d.channels, pixel = i / d.channels;
    const int64_t ow = pixel % d.pooled_width, oh = (pixel / d.pooled_width) % d.pooled_height;
    const int64_t n = pixel / (d.pooled_width * d.pooled_height);
    return {c, ((n * d.height + 2 * oh) * d.width + 2 * ow) * d.channels + c};
  }
  const int64_t ow = i % d.pooled_width, oh = (i / d.pooled_width) % d.pooled_height;
  const int64_t plane = i / (d.pooled_width * d.pooled_height);
  return {plane % d.channels, (plane * d.height + 2 * oh) * d.width + 2 * ow};
}

// The pooled element of channel c numbered j (0 .. N * OH * OW - 1, sample-major) in memory order.
__device__ inline int64_t channel_element(const PoolNormDims& d, int64_t c, int64_t j) {
  const int64_t area = d.pooled_height * d.pooled_width, n = j / area, pixel = j % area;
  return d.channels_last ? (n * area + pixel) * d.channels + c : (n * d.channels + c) * area + pixel;
}

template <typename T>
__global__ void pool_kernel(const T* input, T* pooled, PoolNormDims d) {
  using M = decltype(to_math(T()));
  const int64_t total = d.batch * d.channels * d.pooled_height * d.pooled_width;
  const int64_t column = d.channels_last ? d.channels : 1, line = d.width * column;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const T* w = input + place(d, i).window;
    store(pooled + i, window_max<M>(to_math(w[0]), to_math(w[column]), to_math(w[line]), to_math(w[line + column])));
  }
}

// One block per channel: the statistics used, and (training) the new running statistics.
template <typename T>
__global__ void stats_kernel(const T* pooled, PoolNormChannels ch, bool training, double momentum, double eps,
                             PoolNormDims d) {
  using M = decltype(to_math(T()));
  const int64_t c = blockIdx.x, count = d.batch * d.pooled_height * d.pooled_width;
  const M* running_mean = static_cast<const M*>(ch.running_mean);
  const M* running_var = static_cast<const M*>(ch.running_var);
  M* save_mean = static_cast<M*>(ch.save_mean);
  M* save_invstd = static_cast<M*>(ch.save_invstd);
  if (!training) {
    if (threadIdx.x == 0) {
      save_mean[c] = running_mean[c];
      save_invstd[c] = static_cast<M>(1.0 / sqrt(static_cast<double>(running_var[c]) + eps));
    }
    return;
  }
  M sum = 0;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) sum += to_math(pooled[channel_element(d, c, j)]);
  const double mean = static_cast<double>(block_sum<kThreads>(sum)) / static_cast<double>(count);
  const M mean_m = static_cast<M>(mean);
  M squares = 0;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const M diff = to_math(pooled[channel_element(d, c, j)]) - mean_m;
    squares += diff * diff;
  }
  const double var = static_cast<double>(block_sum<kThreads>(squares)) / static_cast<double>(count);
  if (threadIdx.x == 0) {
    save_mean[c] = mean_m;
    save_invstd[c] = static_cast<M>(1.0 / sqrt(var + eps));
    static_cast<M*>(ch.new_running_mean)[c] =
        static_cast<M>((1.0 - momentum) * static_cast<double>(running_mean[c]) + momentum * mean);
    static_cast<M*>(ch.new_running_var)[c] = static_cast<M>(
        (1.0 - momentum) * static_cast<double>(running_var[c]) +
        momentum * var * static_cast<double>(count) / static_cast<double>(count - 1));
  }
}

template <typename T>
__global__ void norm_kernel(const T* pooled, T* out, PoolNormChannels ch, PoolNormDims d) {
  using M = decltype(to_math(T()));
  const int64_t total = d.batch * d.channels * d.pooled_height * d.pooled_width;
  const M* weight = static_cast<const M*>(ch.weight);
  const M* bias = static_cast<const M*>(ch.bias);
  const M* mean = static_cast<const M*>(ch.save_mean);
  const M* invstd = static_cast<const M*>(ch.save_invstd);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = place(d, i).channel;
    const M scale = weight[c] * invstd[c];
    const M shift = bias[c] - mean[c] * scale;
    store(out + i, norm_relu<M>(to_math(pooled[i]), scale, shift));
  }
}

template <typename M>
__device__ inline bool relu_passes(M out) {
  return out > M(0) || out != out;
}

// One block per channel: the weight's and bias's gradients.
template <typename T>
__global__ void grad_sums_kernel(const T* grad_out, const T* pooled, const T* out, const void* save_mean_,
                                 const void* save_invstd_, void* grad_weight_, void* grad_bias_, PoolNormDims d) {
  using M = decltype(to_math(T()));
  const int64_t c = blockIdx.x, count = d.batch * d.pooled_height * d.pooled_width;
  const M mean = static_cast<const M*>(save_mean_)[c];
  M sum_g = 0, sum_gx = 0;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const int64_t i = channel_element(d, c, j);
    const M g = relu_passes(to_math(out[i])) ? to_math(grad_out[i]) : M(0);
    sum_g += g;
    sum_gx += g * (to_math(pooled[i]) - mean);
  }
  sum_g = block_sum<kThreads>(sum_g);
  sum_gx = block_sum<kThreads>(sum_gx);
  if (threadIdx.x == 0) {
    static_cast<M*>(grad_bias_)[c] = sum_g;
    static_cast<M*>(grad_weight_)[c] = sum_gx * static_cast<const M*>(save_invstd_)[c];
  }
}

// One thread per pooled element: its window's four input gradients, and the odd last column's and row's zeros
// beside it (the last window of a row or column writes them).
template <typename T>
__global__ void input_grad_kernel(const T* grad_out, const T* input, const T* pooled, const T* out, const void* weight_,
                                  const void* save_mean_, const void* save_invstd_, const void* grad_weight_,
                                  const void* grad_bias_, T* grad_input, bool training, PoolNormDims d) {
  using M = decltype(to_math(T()));
  const M* weight = static_cast<const M*>(weight_);
  const M* mean = static_cast<const M*>(save_mean_);
  const M* invstd = static_cast<const M*>(save_invstd_);
  const M* grad_weight = static_cast<const M*>(grad_weight_);
  const M* grad_bias = static_cast<const M*>(grad_bias_);
  const int64_t total = d.batch * d.channels * d.pooled_height * d.pooled_width;
  const M count = static_cast<M>(d.batch * d.pooled_height * d.pooled_width);
  const int64_t column = d.channels_last ? d.channels : 1, line = d.width * column;
  T zero;
  store(&zero, M(0));
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const Place p = place(d, i);
    const int64_t c = p.channel;
    // sum(g * (y - mean)) = grad_weight / invstd: k = grad_weight * invstd / count.
    const M mean_g = training ? grad_bias[c] / count : M(0);
    const M k = training ? grad_weight[c] * invstd[c] / count : M(0);
    T gy;
    store(&gy, pooled_grad<M>(to_math(grad_out[i]), relu_passes(to_math(out[i])), to_math(pooled[i]), mean[c], mean_g,
                              k, weight[c] * invstd[c]));
    const T* w = input + p.window;
    M max;
    const int index = window_argmax<M>(to_math(w[0]), to_math(w[column]), to_math(w[line]), to_math(w[line + column]),
                                       &max);
    T* g = grad_input + p.window;
    g[0] = index == 0 ? gy : zero;
    g[column] = index == 1 ? gy : zero;
    g[line] = index == 2 ? gy : zero;
    g[line + column] = index == 3 ? gy : zero;
    const int64_t pixel = d.channels_last ? i / d.channels : i;
    const bool last_column = pixel % d.pooled_width == d.pooled_width - 1;
    const bool last_row = (pixel / d.pooled_width) % d.pooled_height == d.pooled_height - 1;
    const bool odd_width = d.width % 2 == 1, odd_height = d.height % 2 == 1;
    if (odd_width && last_column) g[2 * column] = zero, g[line + 2 * column] = zero;
    if (odd_height && last_row) {
      g[2 * line] = zero, g[2 * line + column] = zero;
      if (odd_width && last_column) g[2 * line + 2 * column] = zero;
    }
  }
}

unsigned blocks_for(int64_t total) {
  const int64_t wanted = (total + kThreads - 1) / kThreads;
  return static_cast<unsigned>(wanted < 1 ? 1 : (wanted < kMaxBlocks ? wanted : kMaxBlocks));
}

}  // namespace

void launch_maxpool_bn_relu(const void* input, void* pooled, void* out, const PoolNormChannels& channels,
                            bool training, double momentum, double eps, const PoolNormDims& dims, KernelDtype type,
                            cudaStream_t stream) {
  const int64_t total = dims.batch * dims.channels * dims.pooled_height * dims.pooled_width;
  if (dims.channels == 0) return;
  PoolNormDtypes::dispatch(type, [&](auto element) {
    using T = typename decltype(element)::type;
    if (total > 0) {
      GPUCORE_LAUNCH(pool_kernel<T>, blocks_for(total), kThreads, 0, stream, static_cast<const T*>(input),
                     static_cast<T*>(pooled), dims);
    }
    GPUCORE_LAUNCH(stats_kernel<T>, static_cast<unsigned>(dims.channels), kThreads, 0, stream,
                   static_cast<const T*>(pooled), channels, training, momentum, eps, dims);
    if (total > 0) {
      GPUCORE_LAUNCH(norm_kernel<T>, blocks_for(total), kThreads, 0, stream, static_cast<const T*>(pooled),
                     static_cast<T*>(out), channels, dims);
    }
  });
}

void launch_maxpool_bn_relu_backward(const void* grad_out, const void* input, const void* pooled, const void* out,
                                     const void* weight, const void* save_mean, const void* save_invstd,
                                     void* grad_input, void* grad_weight, void* grad_bias, bool training,
                                     const PoolNormDims& dims, KernelDtype type, cudaStream_t stream) {
  const int64_t total = dims.batch * dims.channels * dims.pooled_height * dims.pooled_width;
  if (dims.channels == 0) return;
  PoolNormDtypes::dispatch(type, [&](auto element) {
    using T = typename decltype(element)::type;
    GPUCORE_LAUNCH(grad_sums_kernel<T>, static_cast<unsigned>(dims.channels), kThreads, 0, stream,
                   static_cast<const T*>(grad_out), static_cast<const T*>(pooled), static_cast<const T*>(out),
                   save_mean, save_invstd, grad_weight, grad_bias, dims);
    if (total > 0) {
      GPUCORE_LAUNCH(input_grad_kernel<T>, blocks_for(total), kThreads, 0, stream, static_cast<const T*>(grad_out),
                     static_cast<const T*>(input), static_cast<const T*>(pooled), static_cast<const T*>(out), weight,
                     save_mean, save_invstd, static_cast<const void*>(grad_weight),
                     static_cast<const void*>(grad_bias), static_cast<T*>(grad_input), training, dims);
    }
  });
}

}  // namespace gpucore::ops::cuda
