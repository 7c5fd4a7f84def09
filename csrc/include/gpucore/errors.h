#pragma once
// Error types of the core. The Python bindings map them to gpucore.ConfigError (a ValueError),
// gpucore.DeviceUnavailableError and gpucore.TrainingError (RuntimeErrors).
#include <stdexcept>
#include <string>

namespace gpucore {

// A value the user gave (a config key, an argument) is not valid; the message names it and
// lists what would be valid.
class ConfigError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// A file needs a reader gpucore was built without (libpng or libjpeg missing at build time): never a
// per-file error to skip, since every file of that format would fail the same way.
class MissingReaderError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

// A device the user demanded exists in the request but cannot be used; the message says why.
class DeviceUnavailableError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Training cannot go on (too many non-finite steps in a row); the message says why and what to change.
class TrainingError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace gpucore
