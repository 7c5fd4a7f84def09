#include "gpucore/train/grad_scaler.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/_amp_foreach_non_finite_check_and_unscale.h>
#include <ATen/ops/_amp_update_scale.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>

namespace gpucore {

GradScaler::GradScaler(GradScalerConfig config, const at::Device& device) : config_(config) {
  const auto options = at::TensorOptions().device(device);
  scale_ = at::full({}, config_.init_scale, options.dtype(at::kFloat));
  inv_scale_one_ = at::ones({}, options.dtype(at::kFloat));
  growth_tracker_ = at::zeros({}, options.dtype(at::kInt));
}

at::Tensor GradScaler::scale(const at::Tensor& loss) const {
  return config_.enabled ? loss * scale_ : loss;
}

void GradScaler::unscale_and_check(const std::vector<at::Tensor>& grads, at::Tensor& found_inf) const {
  const at::Tensor inv_scale = config_.enabled ? scale_.reciprocal() : inv_scale_one_;
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale);
}

void GradScaler::update(const at::Tensor& found_inf) {
  if (!config_.enabled) return;
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf, config_.growth_factor, config_.backoff_factor,
                         config_.growth_interval);
}

}  // namespace gpucore
