#pragma once
// The valid values of the core's numeric settings, stated once for both languages. config.py checks its config
// keys against these ranges (_C.config_ranges) and gives the one message a user sees; the core and its ops check
// the same ranges as invariants (TORCH_CHECK), which a config that config.py accepted never fails.
#include <c10/util/Exception.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "gpucore/errors.h"

namespace gpucore {

struct Range {
  double low = -std::numeric_limits<double>::infinity();
  double high = std::numeric_limits<double>::infinity();
  bool low_open = false;
  bool high_open = true;

  // NaN is in no range; infinity only in one closed at that end (none is).
  constexpr bool contains(double value) const {
    return (low_open ? value > low : value >= low) && (high_open ? value < high : value <= high);
  }
  // What config.py's message says a value must be: "> 0", ">= 1", "in [0, 1)", "in [1, 2^31)".
  std::string describe() const {
    std::ostringstream out;
    if (high == std::numeric_limits<double>::infinity()) {
      out << (low_open ? "> " : ">= ") << bound(low);
    } else {
      out << "in " << (low_open ? '(' : '[') << bound(low) << ", " << bound(high) << (high_open ? ')' : ']');
    }
    return out.str();
  }
  // A bound as the message writes it: a power of two from 2^20 on as 2^k (2^31, not 2.14748e+09).
  static std::string bound(double value) {
    int exponent = 0;
    std::ostringstream out;
    if (value > 0 && std::frexp(value, &exponent) == 0.5 && exponent - 1 >= 20) {
      out << "2^" << exponent - 1;
    } else {
      out << value;
    }
    return out.str();
  }
  // The core's invariant: TORCH_CHECK naming the setting (`what`), its range and the value.
  void check(const char* what, double value) const {
    TORCH_CHECK(contains(value), what, " must be ", describe(), ", got ", value);
  }
  // A value the caller hands the core as it is (a batch source's batch_size and prefetch, which no config check
  // need have seen first): a ConfigError naming it (`what`), its range and the value.
  void require(const char* what, int64_t value) const {
    if (!contains(static_cast<double>(value))) {
      throw ConfigError(std::string(what) + " must be " + describe() + ", got " + std::to_string(value));
    }
  }
};

// A config key's valid values under its name, so that the name is written once: the core's check and
// numeric_settings() (what config.py reads) say the same key.
struct KeyRange {
  const char* key;
  Range range;

  void check(double value) const { range.check(key, value); }
  void require(int64_t value) const { range.require(key, value); }
};

constexpr Range at_least(double low) { return Range{low, std::numeric_limits<double>::infinity(), false, true}; }
constexpr Range above(double low) { return Range{low, std::numeric_limits<double>::infinity(), true, true}; }

// By config key (the engine's own setting graph_warmup_steps by its field). A 0 that turns a setting off is inside
// its range: config.py's key documents it.
namespace ranges {
inline constexpr KeyRange kAccumulateGradBatches{"accumulate_grad_batches", at_least(1)};
inline constexpr KeyRange kClipGradNorm{"clip_grad_norm", at_least(0)};
inline constexpr KeyRange kClipGradValue{"clip_grad_value", at_least(0)};
inline constexpr KeyRange kLogEveryNSteps{"log_every_n_steps", at_least(1)};
inline constexpr KeyRange kMaxNonfiniteSteps{"max_nonfinite_steps", at_least(1)};
inline constexpr KeyRange kLabelSmoothing{"label_smoothing", Range{0, 1, false, true}};
inline constexpr KeyRange kLr{"lr", above(0)};
inline constexpr KeyRange kGamma{"gamma", above(0)};
inline constexpr KeyRange kMinLr{"min_lr", at_least(0)};
inline constexpr KeyRange kPctStart{"pct_start", Range{0, 1, true, true}};
inline constexpr KeyRange kDivFactor{"div_factor", above(0)};
inline constexpr KeyRange kFinalDivFactor{"final_div_factor", above(0)};
inline constexpr KeyRange kMixupAlpha{"mixup_alpha", at_least(0)};
inline constexpr KeyRange kCutmixAlpha{"cutmix_alpha", at_least(0)};
inline constexpr KeyRange kMixupProb{"mixup_prob", Range{0, 1, false, false}};
inline constexpr KeyRange kMixupSwitchProb{"mixup_switch_prob", Range{0, 1, false, false}};
// Each of the two box sides; min < max.
inline constexpr KeyRange kCutmixMinmax{"cutmix_minmax", Range{0, 1, true, false}};
// Pixels: RandomCrop's padding, which crop_padding becomes.
inline constexpr KeyRange kCropPadding{"crop_padding", Range{0, 65536, false, true}};
inline constexpr KeyRange kEmaDecay{"ema_decay", Range{0, 1, false, true}};
inline constexpr KeyRange kEmaWarmupGamma{"ema_warmup_gamma", above(0)};
inline constexpr KeyRange kEmaWarmupPower{"ema_warmup_power", above(0)};
// Samples per batch: batch_size and eval_batch_size, which a batch source (EpochBatches) checks as its batch_size. A
// batch larger than the data serves all of it at once; beyond 2^31 it can only be a mistake.
inline constexpr KeyRange kBatchSize{"batch_size", Range{1, 2147483648.0, false, true}};
// Batches a FileBatches decodes ahead (its ring's slots).
inline constexpr KeyRange kPrefetch{"prefetch", at_least(1)};
// Eager steps before a CUDA graph's capture: cuDNN's autotuning and lazily made handles sync.
inline constexpr KeyRange kGraphWarmupSteps{"graph_warmup_steps", at_least(1)};
}  // namespace ranges

}  // namespace gpucore
