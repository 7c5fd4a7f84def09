#pragma once
// The math of gpucore::ema_update (ema.h), one definition for its CPU and CUDA kernels; free of torch headers
// so nvcc compiles it.
#include <cmath>

#include "ops/host_device.h"

namespace gpucore::ops {

// Config keys ema_decay, ema_warmup, ema_warmup_gamma, ema_warmup_power.
struct EmaParams {
  double decay;
  bool warmup;
  double warmup_gamma, warmup_power;
};

// timm's ModelEmaV3.get_decay(updates) (update_after_step 0, min_decay 0): the first update copies the
// weights (decay 0); with the warm-up the decay then rises as 1 - (1 + n / gamma)^-power up to `decay`.
GPUCORE_HOST_DEVICE inline double ema_decay(const EmaParams& p, double updates) {
  const double step = updates - 1.0;
  if (step <= 0.0) return 0.0;
  if (!p.warmup) return p.decay;
  const double warm = 1.0 - pow(1.0 + step / p.warmup_gamma, -p.warmup_power);
  return fmax(fmin(warm, p.decay), 0.0);
}

// The model's weight in this step's update, read from the engine's counters (gpucore::count_step, after the
// step was counted: [steps taken, skipped, skipped in a row]): 0 when the step was skipped.
GPUCORE_HOST_DEVICE inline double ema_weight(const EmaParams& p, const float* counters) {
  return counters[2] > 0.0f ? 0.0 : 1.0 - ema_decay(p, static_cast<double>(counters[0]));
}

// torch.lerp's formula (exact at weight 0 and 1), in the type `Math` the kernels compute in.
template <typename Math>
GPUCORE_HOST_DEVICE inline Math lerp_toward(Math average, Math value, Math weight) {
  return weight < Math(0.5) ? average + weight * (value - average) : value - (value - average) * (Math(1) - weight);
}

}  // namespace gpucore::ops
