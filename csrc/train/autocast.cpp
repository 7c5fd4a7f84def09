#include "gpucore/train/autocast.h"

#include <ATen/autocast_mode.h>

namespace gpucore {

AutocastGuard::AutocastGuard(at::DeviceType device_type, std::optional<at::ScalarType> dtype)
    : device_type_(device_type),
      previous_enabled_(at::autocast::is_autocast_enabled(device_type)),
      previous_dtype_(at::autocast::get_autocast_dtype(device_type)) {
  at::autocast::set_autocast_enabled(device_type_, dtype.has_value());
  if (dtype) at::autocast::set_autocast_dtype(device_type_, *dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_type_, previous_enabled_);
  at::autocast::set_autocast_dtype(device_type_, previous_dtype_);
}

}  // namespace gpucore
