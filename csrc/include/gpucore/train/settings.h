#pragma once
// The numeric config keys the engine and the batch sources take as they are, with the core's defaults and valid
// ranges: what config.py offers and checks (_C.config_ranges, _C.config_defaults), so the two languages cannot disagree.
#include <optional>
#include <string>
#include <vector>

#include "gpucore/ranges.h"

namespace gpucore {

struct NumericSetting {
  std::string key;                      // the config key
  Range range;
  // The core's default (EngineConfig{}, FileBatchesConfig{}); none where config.py's is the only one: cutmix_minmax
  // (a list), crop_padding (0, off; the transforms list's RandomCrop padding), batch_size and eval_batch_size (a batch
  // source's constructor argument).
  std::optional<double> default_value;
  bool integer = false;
};

std::vector<NumericSetting> numeric_settings();

}  // namespace gpucore
