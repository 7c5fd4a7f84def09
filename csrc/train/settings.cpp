#include "gpucore/train/settings.h"

#include "gpucore/batches/file_batches.h"
#include "gpucore/train/engine.h"

namespace gpucore {

std::vector<NumericSetting> numeric_settings() {
  const EngineConfig engine;
  const auto integer = [](const KeyRange& key, int64_t value) {
    return NumericSetting{key.key, key.range, static_cast<double>(value), true};
  };
  const auto real = [](const KeyRange& key, double value) { return NumericSetting{key.key, key.range, value, false}; };
  const auto without_default = [](const KeyRange& key, bool is_integer) {
    return NumericSetting{key.key, key.range, std::nullopt, is_integer};
  };
  return {
      integer(ranges::kAccumulateGradBatches, engine.accumulate_grad_batches),
      real(ranges::kClipGradNorm, engine.clip_grad_norm),
      real(ranges::kClipGradValue, engine.clip_grad_value),
      integer(ranges::kLogEveryNSteps, engine.log_every_n_steps),
      integer(ranges::kMaxNonfiniteSteps, engine.max_nonfinite_steps),
      real(ranges::kLabelSmoothing, engine.loss.label_smoothing),
      real(ranges::kLr, engine.schedule.base_lr),
      real(ranges::kGamma, engine.schedule.gamma),
      real(ranges::kMinLr, engine.schedule.min_lr),
      real(ranges::kPctStart, engine.schedule.pct_start),
      real(ranges::kDivFactor, engine.schedule.div_factor),
      real(ranges::kFinalDivFactor, engine.schedule.final_div_factor),
      real(ranges::kMixupAlpha, engine.mixup.mixup_alpha),
      real(ranges::kCutmixAlpha, engine.mixup.cutmix_alpha),
      real(ranges::kMixupProb, engine.mixup.prob),
      real(ranges::kMixupSwitchProb, engine.mixup.switch_prob),
      without_default(ranges::kCutmixMinmax, false),
      without_default(ranges::kCropPadding, true),
      without_default(ranges::kBatchSize, true),
      NumericSetting{"eval_batch_size", ranges::kBatchSize.range, std::nullopt, true},  // batch_size's range
      integer(ranges::kPrefetch, FileBatchesConfig{}.prefetch),
      real(ranges::kEmaDecay, engine.ema.decay),
      real(ranges::kEmaWarmupGamma, engine.ema.warmup_gamma),
      real(ranges::kEmaWarmupPower, engine.ema.warmup_power),
  };
}

}  // namespace gpucore
