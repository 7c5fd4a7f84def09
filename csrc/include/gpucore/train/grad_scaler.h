#pragma once
// Dynamic loss scaling with the ATen AMP ops, state kept on the device (no host sync).
// Defaults as torch.amp.GradScaler: init 2^16, growth 2.0, backoff 0.5, interval 2000.
#include <ATen/core/Tensor.h>

#include <vector>

namespace gpucore {

struct GradScalerConfig {
  bool enabled = false;
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class GradScaler {
 public:
  GradScaler(GradScalerConfig config, const at::Device& device);

  at::Tensor scale(const at::Tensor& loss) const;  // loss * scale, or loss when disabled
  // Sets found_inf to 1 if any gradient is inf/NaN and divides the gradients by the scale (when
  // enabled). Always called, so non-finite steps are caught in every precision.
  void unscale_and_check(const std::vector<at::Tensor>& grads, at::Tensor& found_inf) const;
  void update(const at::Tensor& found_inf);  // backoff on inf, growth after `interval` good steps

  bool enabled() const { return config_.enabled; }
  // In-place ATen ops are const on a Tensor handle, so const access still lets a checkpoint restore them.
  const at::Tensor& scale_tensor() const { return scale_; }
  const at::Tensor& growth_tracker() const { return growth_tracker_; }

 private:
  GradScalerConfig config_;
  at::Tensor scale_;           // float32, 0-dim
  at::Tensor inv_scale_one_;   // float32 1.0 for the disabled path
  at::Tensor growth_tracker_;  // int32, 0-dim
};

}  // namespace gpucore
