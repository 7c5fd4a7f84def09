#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "ops/cuda/train_step_kernels.h"
#include "ops/cuda/kernel_launch.h"

namespace gpucore::ops::cuda {
namespace {

constexpr int kThreads = 256;

__device__ inline double as_double(float v) { return v; }
__device__ inline double as_double(double v) { return v; }
__device__ inline double as_double(__half v) { return __half2float(v); }
__device__ inline double as_double(__nv_bfloat16 v) { return __bfloat162float(v); }

// Class j's output of one (sample, position) row.
template <typename T>
struct RowValues {
  const T* values;
  int64_t stride;
  __device__ double operator()(int64_t j) const { return as_double(values[j * stride]); }
};

// One thread per (sample, position); a block sums its hits and counted targets and adds them with one atomic
// each (whole numbers: exact in any order).
template <typename T>
__global__ void accumulate_metrics_kernel(double* sums, unsigned long long* counted, const T* output,
                                          const int64_t* targets, int64_t n, int64_t classes, int64_t spatial,
                                          int64_t top_k, int64_t ignore_index) {
  __shared__ unsigned long long block_counts[3];  // hits, top-k hits, counted targets
  if (threadIdx.x < 3) block_counts[threadIdx.x] = 0;
  __syncthreads();
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (row < n * spatial) {
    const int64_t label = targets[row];
    if (label != ignore_index) {
      atomicAdd(&block_counts[2], 1ULL);
      if (label >= 0 && label < classes) {
        const RowValues<T> value{output + (row / spatial) * classes * spatial + row % spatial, spatial};
        const int64_t beaten = classes_beating(value, classes, label, top_k > 1 ? top_k : 1);
        if (beaten == 0) atomicAdd(&block_counts[0], 1ULL);
        if (beaten < top_k) atomicAdd(&block_counts[1], 1ULL);
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicAdd(&sums[2], static_cast<double>(block_counts[0]));
    if (top_k > 0) atomicAdd(&sums[3], static_cast<double>(block_counts[1]));
    atomicAdd(counted, block_counts[2]);
  }
}

// After the blocks: the loss weighted by the targets counted (by N without targets), as the CPU kernel adds it;
// the count is left at zero for the next launch.
__global__ void add_loss_kernel(double* sums, const float* loss, unsigned long long* counted, int64_t n) {
  if (counted == nullptr) {
    add_loss(sums, *loss, static_cast<double>(n));
    return;
  }
  const auto count = static_cast<double>(*counted);
  add_loss(sums, *loss, count);
  sums[4] += count;
  *counted = 0;
}

__global__ void count_step_kernel(float* counters, float* found_inf) {
  const float f = *found_inf;
  counters[0] = counters[0] + 1.0f - f;
  counters[1] = counters[1] + f;
  counters[2] = (counters[2] + 1.0f) * f;
  *found_inf = 0.0f;
}

__global__ void learning_rate_kernel(const float* step, float* lr, ScheduleParams params) {
  *lr = static_cast<float>(scheduled_lr(params, static_cast<double>(*step)));
}

template <typename T>
void launch_metrics(double* sums, const float* loss, const void* output, const int64_t* targets, int64_t n,
                    int64_t classes, int64_t spatial, int64_t top_k, int64_t ignore_index, unsigned long long* counted,
                    cudaStream_t stream) {
  const int64_t rows = n * spatial;
  if (targets != nullptr && rows > 0) {
    const unsigned blocks = static_cast<unsigned>((rows + kThreads - 1) / kThreads);
    GPUCORE_LAUNCH(accumulate_metrics_kernel, blocks, kThreads, 0, stream, sums, counted,
                   static_cast<const T*>(output), targets, n, classes, spatial, top_k, ignore_index);
  }
  GPUCORE_LAUNCH(add_loss_kernel, 1, 1, 0, stream, sums, loss, targets != nullptr ? counted : nullptr, n);
}

}  // namespace

void launch_accumulate_metrics(double* sums, const float* loss, const void* output, KernelDtype type,
                               const int64_t* targets, int64_t n, int64_t classes, int64_t spatial, int64_t top_k,
                               int64_t ignore_index, unsigned long long* counted, cudaStream_t stream) {
  MetricsOutputDtypes::dispatch(type, [&](auto element) {
    launch_metrics<typename decltype(element)::type>(sums, loss, output, targets, n, classes, spatial, top_k,
                                                     ignore_index, counted, stream);
  });
}

void launch_count_step(float* counters, float* found_inf, cudaStream_t stream) {
  GPUCORE_LAUNCH(count_step_kernel, 1, 1, 0, stream, counters, found_inf);
}

void launch_learning_rate(const float* step, float* lr, const ScheduleParams& params, cudaStream_t stream) {
  GPUCORE_LAUNCH(learning_rate_kernel, 1, 1, 0, stream, step, lr, params);
}

}  // namespace gpucore::ops::cuda
