#pragma once
// The exponential moving average of a model's state, as timm's ModelEmaV3 keeps it: floating-point
// parameters and buffers (BatchNorm's running statistics too) averaged, the others copied, after every
// optimizer step that was taken; computed on the device from the device-side step count (gpucore::ema_update).
#include <ATen/core/Tensor.h>

#include <vector>

namespace gpucore {

struct EmaConfig {
  double decay = 0.0;                // 0: off (ranges::kEmaDecay)
  bool warmup = false;               // timm's use_warmup: decay = min(decay, 1 - (1 + n / gamma)^-power)
  double warmup_gamma = 1.0;         // ranges::kEmaWarmupGamma
  double warmup_power = 2.0 / 3.0;   // ranges::kEmaWarmupPower
};
// TORCH_CHECK that each setting is in its range (gpucore/ranges.h), naming its config key; config.py checks first.
void validate(const EmaConfig& config);

class WeightAverage {
 public:
  WeightAverage() = default;  // off
  // averages[i] follows sources[i] (one dtype, shape, strides; on counters' device); counters: the engine's
  // [steps taken, skipped, skipped in a row]. Tensors with config.decay 0, or none with it set: a ConfigError.
  WeightAverage(const EmaConfig& config, std::vector<at::Tensor> averages, std::vector<at::Tensor> sources,
                at::Tensor counters);
  bool enabled() const { return !averages_.empty(); }
  // After count_step counted the optimizer step: one op, no host sync; a skipped step changes nothing.
  void update() const;

 private:
  EmaConfig config_;
  std::vector<at::Tensor> averages_, sources_;
  at::Tensor counters_;
};

}  // namespace gpucore
