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

constexpr Range at_least(double low) { return Range{low, std::numeric_limits<double>::infinity(), false, true}; }
constexpr Range above(double low) { return Range{low, std::numeric_limits<double>::infinity(), true, true}; }

// By config key (the engine's own settings, graph_warmup_steps, by its field). A 0 that turns a setting off is
// inside its range: config.py's key documents it.
namespace ranges {
inline constexpr Range kAccumulateGradBatches = at_least(1);
inline constexpr Range kClipGradNorm = at_least(0);
inline constexpr Range kClipGradValue = at_least(0);
inline constexpr Range kLogEveryNSteps = at_least(1);
inline constexpr Range kMaxNonfiniteSteps = at_least(1);
inline constexpr Range kLabelSmoothing{0, 1, false, true};
inline constexpr Range kLr = above(0);
inline constexpr Range kGamma = above(0);
inline constexpr Range kMinLr = at_least(0);
inline constexpr Range kPctStart{0, 1, true, true};
inline constexpr Range kDivFactor = above(0);
inline constexpr Range kFinalDivFactor = above(0);
inline constexpr Range kMixupAlpha = at_least(0);
inline constexpr Range kCutmixAlpha = at_least(0);
inline constexpr Range kMixupProb{0, 1, false, false};
inline constexpr Range kMixupSwitchProb{0, 1, false, false};
inline constexpr Range kCutmixMinmax{0, 1, true, false};  // each of the two box sides; min < max
inline constexpr Range kCropPadding{0, 65536, false, true};  // pixels: RandomCrop's padding, which crop_padding becomes
inline constexpr Range kEmaDecay{0, 1, false, true};
inline constexpr Range kEmaWarmupGamma = above(0);
inline constexpr Range kEmaWarmupPower = above(0);
// Samples per batch: batch_size and eval_batch_size, which a batch source (EpochBatches) checks as its batch_size. A
// batch larger than the data serves all of it at once; beyond 2^31 it can only be a mistake.
inline constexpr Range kBatchSize{1, 2147483648.0, false, true};
// Batches a FileBatches decodes ahead (its ring's slots).
inline constexpr Range kPrefetch = at_least(1);
// Eager steps before a CUDA graph's capture: cuDNN's autotuning and lazily made handles sync.
inline constexpr Range kGraphWarmupSteps = at_least(1);
}  // namespace ranges

}  // namespace gpucore
