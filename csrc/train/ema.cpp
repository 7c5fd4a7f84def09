#include "gpucore/train/ema.h"

#include <c10/util/Exception.h>

#include <string>

#include "gpucore/errors.h"
#include "gpucore/ranges.h"
#include "ops/train_step/ema.h"

namespace gpucore {

void validate(const EmaConfig& c) {
  ranges::kEmaDecay.check(c.decay);
  ranges::kEmaWarmupGamma.check(c.warmup_gamma);
  ranges::kEmaWarmupPower.check(c.warmup_power);
}

WeightAverage::WeightAverage(const EmaConfig& config, std::vector<at::Tensor> averages, std::vector<at::Tensor> sources,
                             at::Tensor counters)
    : config_(config), averages_(std::move(averages)), sources_(std::move(sources)), counters_(std::move(counters)) {
  validate(config_);
  if (config_.decay == 0.0 && !(averages_.empty() && sources_.empty())) {
    throw ConfigError("tensors to average were given, but ema_decay is 0 (off)");
  }
  if (config_.decay > 0.0 && sources_.empty()) {
    throw ConfigError("ema_decay is " + c10::str(config_.decay) + " but no tensors to average were given");
  }
  try {
    ops::ema_params(averages_, sources_, counters_, config_.decay, config_.warmup, config_.warmup_gamma,
                    config_.warmup_power);
  } catch (const c10::Error& error) {
    throw ConfigError(std::string("the EMA's tensors do not fit the model's: ") + error.what_without_backtrace());
  }
}

void WeightAverage::update() const {
  if (!enabled()) return;
  ops::ema_update(averages_, sources_, counters_,
                  ops::EmaParams{config_.decay, config_.warmup, config_.warmup_gamma, config_.warmup_power});
}

}  // namespace gpucore
