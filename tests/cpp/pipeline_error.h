#pragma once
// What building a transform pipeline from `specs` throws as a ConfigError ("" when it builds): the registry's
// messages, which the transform tests compare word for word.
#include <string>
#include <vector>

#include "gpucore/batches/transforms.h"
#include "gpucore/errors.h"

inline std::string pipeline_error(const std::vector<gpucore::TransformSpec>& specs) {
  try {
    gpucore::TransformPipeline pipeline(specs, {}, {});
  } catch (const gpucore::ConfigError& error) {
    return error.what();
  }
  return "";
}
