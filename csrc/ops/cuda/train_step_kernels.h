#pragma once
// Launchers of the train-step CUDA kernels (raw buffers on the current device), kept free of torch headers.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/kernel_dtype.h"
#include "ops/step_math.h"

namespace gpucore::ops::cuda {

using MetricsOutputDtypes = FloatingKernelDtypes;

// sums: float64 (slots as accumulate_metrics); loss: one float32; output: contiguous N x C x spatial of
// `type` (one of MetricsOutputDtypes); targets: int64 N x spatial, or null for loss and count only; counted
// (with targets, else null): one zeroed uint64 on the device, where the blocks count the targets that are not
// ignore_index before the loss is weighted by their number (left at zero again).
void launch_accumulate_metrics(double* sums, const float* loss, const void* output, KernelDtype type,
                               const int64_t* targets, int64_t n, int64_t classes, int64_t spatial, int64_t top_k,
                               int64_t ignore_index, unsigned long long* counted, cudaStream_t stream);
void launch_count_step(float* counters, float* found_inf, cudaStream_t stream);
void launch_learning_rate(const float* step, float* lr, const ScheduleParams& params, cudaStream_t stream);

}  // namespace gpucore::ops::cuda
