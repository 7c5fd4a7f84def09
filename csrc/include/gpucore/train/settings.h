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
  std::optional<double> default_value;  // the engine's default (EngineConfig{}); none for cutmix_minmax, a list
  bool integer = false;
};

std::vector<NumericSetting> numeric_settings();

}  // namespace gpucore
