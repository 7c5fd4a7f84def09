#pragma once
// The exponential moving average of a model's state as one torch op (namespace gpucore), with CPU and CUDA
// kernels, run right after the optimizer step; it reads the step count on the device, so it never waits for
// the host.
//
//   ema_update(Tensor(a!)[] averages, Tensor[] sources, Tensor counters, float decay, bool warmup,
//              float warmup_gamma, float warmup_power) -> ()
//       counters: the engine's float32 [steps taken, skipped, skipped in a row] after count_step counted this
//       step. When the step was taken (counters[2] == 0): each floating-point average = lerp(average, source,
//       1 - d) with d = timm ModelEmaV3's decay at update counters[0] (ema_math.h), each other average (integer
//       buffers such as num_batches_tracked) = source. When it was skipped: nothing changes. averages[i] and
//       sources[i]: one dtype, shape and strides (dense), on counters' device.
#include <ATen/core/Tensor.h>

#include "ops/ema_math.h"

namespace gpucore::ops {

// Checks the op's arguments (TORCH_CHECK); the kernels' parameters.
EmaParams ema_params(at::TensorList averages, at::TensorList sources, const at::Tensor& counters, double decay,
                     bool warmup, double warmup_gamma, double warmup_power);

// The op through the dispatcher (CPU or CUDA kernel by the counters' device).
void ema_update(at::TensorList averages, at::TensorList sources, const at::Tensor& counters, const EmaParams& params);

}  // namespace gpucore::ops
