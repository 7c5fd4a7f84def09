#include "gpucore/train/settings.h"

#include "gpucore/batches/file_batches.h"
#include "gpucore/train/engine.h"

namespace gpucore {

std::vector<NumericSetting> numeric_settings() {
  const EngineConfig engine;
  const auto integer = [](const char* key, Range range, int64_t value) {
    return NumericSetting{key, range, static_cast<double>(value), true};
  };
  const auto real = [](const char* key, Range range, double value) { return NumericSetting{key, range, value, false}; };
  return {
      integer("accumulate_grad_batches", ranges::kAccumulateGradBatches, engine.accumulate_grad_batches),
      real("clip_grad_norm", ranges::kClipGradNorm, engine.clip_grad_norm),
      real("clip_grad_value", ranges::kClipGradValue, engine.clip_grad_value),
      integer("log_every_n_steps", ranges::kLogEveryNSteps, engine.log_every_n_steps),
      integer("max_nonfinite_steps", ranges::kMaxNonfiniteSteps, engine.max_nonfinite_steps),
      real("label_smoothing", ranges::kLabelSmoothing, engine.loss.label_smoothing),
      real("lr", ranges::kLr, engine.schedule.base_lr),
      real("gamma", ranges::kGamma, engine.schedule.gamma),
      real("min_lr", ranges::kMinLr, engine.schedule.min_lr),
      real("pct_start", ranges::kPctStart, engine.schedule.pct_start),
      real("div_factor", ranges::kDivFactor, engine.schedule.div_factor),
      real("final_div_factor", ranges::kFinalDivFactor, engine.schedule.final_div_factor),
      real("mixup_alpha", ranges::kMixupAlpha, engine.mixup.mixup_alpha),
      real("cutmix_alpha", ranges::kCutmixAlpha, engine.mixup.cutmix_alpha),
      real("mixup_prob", ranges::kMixupProb, engine.mixup.prob),
      real("mixup_switch_prob", ranges::kMixupSwitchProb, engine.mixup.switch_prob),
      NumericSetting{"cutmix_minmax", ranges::kCutmixMinmax, std::nullopt, false},
      NumericSetting{"crop_padding", ranges::kCropPadding, std::nullopt, true},
      NumericSetting{"batch_size", ranges::kBatchSize, std::nullopt, true},
      NumericSetting{"eval_batch_size", ranges::kBatchSize, std::nullopt, true},
      integer("prefetch", ranges::kPrefetch, FileBatchesConfig{}.prefetch),
      real("ema_decay", ranges::kEmaDecay, engine.ema.decay),
      real("ema_warmup_gamma", ranges::kEmaWarmupGamma, engine.ema.warmup_gamma),
      real("ema_warmup_power", ranges::kEmaWarmupPower, engine.ema.warmup_power),
  };
}

}  // namespace gpucore
