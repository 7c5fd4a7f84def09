#pragma once
// RAII autocast for the C++ training step. ATen has no guard of its own; this mirrors what
// Python's torch.autocast does on enter and exit: save the thread-local state, set it, count the
// nesting, and clear the cast cache when the outermost region ends.
// ATen/autocast_mode.h, which declares those functions, includes every ATen operator (ATen/ATen.h): only autocast.cpp
// reads it, so that the step's sources do not parse it too.
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <optional>

namespace gpucore {

class AutocastGuard {
 public:
  // dtype nullopt: autocast off for the region (the previous state is still restored).
  AutocastGuard(at::DeviceType device_type, std::optional<at::ScalarType> dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  at::DeviceType device_type_;
  bool previous_enabled_;
  at::ScalarType previous_dtype_;
};

}  // namespace gpucore
