#pragma once
// The numeric config keys the engine takes as they are, with the engine's defaults and valid ranges: what
// config.py offers and checks (_C.config_ranges, _C.config_defaults), so the two languages cannot disagree.
#include <optional>
#include <string>
#include <vector>

#include "gpucore/ranges.h"

namespace gpucore {

struct NumericSetting {
  std::string key;                      // the config key
  Range range;
  // The engine's default (EngineConfig{}); none where config.py's is the only one: cutmix_minmax (a list) and
  // crop_padding (0, off; the transforms list's RandomCrop padding).
  std::optional<double> default_value;
  bool integer = false;
};

std::vector<NumericSetting> numeric_settings();

}  // namespace gpucore
