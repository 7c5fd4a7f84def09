#pragma once
// The valid values of the core's numeric settings, stated once for both languages. config.py checks its config
// keys against these ranges (_C.config_ranges) and gives the one message a user sees; the core and its ops check
// the same ranges as invariants (TORCH_CHECK), which a config that config.py accepted never fails.
#include <c10/util/Exception.h>

#include <limits>
#include <sstream>
#include <string>

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
  // What config.py's message says a value must be: "> 0", ">= 1", "in [0, 1)".
  std::string describe() const {
    std::ostringstream out;
    if (high == std::numeric_limits<double>::infinity()) {
      out << (low_open ? "> " : ">= ") << low;
    } else {
      out << "in " << (low_open ? '(' : '[') << low << ", " << high << (high_open ? ')' : ']');
    }
    return out.str();
  }
  // The core's invariant: TORCH_CHECK naming the setting (`what`), its range and the value.
  void check(const char* what, double value) const {
    TORCH_CHECK(contains(value), what, " must be ", describe(), ", got ", value);
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
// Eager steps before a CUDA graph's capture: cuDNN's autotuning and lazily made handles sync.
inline constexpr Range kGraphWarmupSteps = at_least(1);
}  // namespace ranges

}  // namespace gpucore
