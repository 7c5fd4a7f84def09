#include "ops/train_step/ema.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "gpucore/ranges.h"

namespace gpucore::ops {

EmaParams ema_params(at::TensorList averages, at::TensorList sources, const at::Tensor& counters, double decay,
                     bool warmup, double warmup_gamma, double warmup_power) {
  TORCH_CHECK(counters.scalar_type() == at::kFloat && counters.dim() == 1 && counters.size(0) == 3 &&
                  counters.is_contiguous(),
              "ema_update: counters must be a contiguous float32 vector of 3, got ", counters.scalar_type(), " ",
              counters.sizes());
  TORCH_CHECK(averages.size() == sources.size(), "ema_update: ", averages.size(), " averages for ", sources.size(),
              " sources");
  ranges::kEmaDecay.range.check("ema_update: decay", decay);
  ranges::kEmaWarmupGamma.range.check("ema_update: warmup_gamma", warmup_gamma);
  ranges::kEmaWarmupPower.range.check("ema_update: warmup_power", warmup_power);
  for (size_t i = 0; i < averages.size(); ++i) {
    const at::Tensor &average = averages[i], &source = sources[i];
    TORCH_CHECK(average.scalar_type() == source.scalar_type() && !average.is_complex(), "ema_update: average ", i,
                " is ", average.scalar_type(), ", its source ", source.scalar_type(), " (one real dtype each)");
    TORCH_CHECK(average.sizes() == source.sizes() && average.strides() == source.strides(), "ema_update: average ", i,
                " has shape ", average.sizes(), " and strides ", average.strides(), ", its source ", source.sizes(),
                " and ", source.strides());
    TORCH_CHECK(average.is_non_overlapping_and_dense(), "ema_update: average ", i, " must be dense");
    TORCH_CHECK(average.device() == counters.device() && source.device() == counters.device(), "ema_update: pair ", i,
                " on ", average.device(), " and ", source.device(), ", counters on ", counters.device());
  }
  return EmaParams{decay, warmup, warmup_gamma, warmup_power};
}

void ema_update(at::TensorList averages, at::TensorList sources, const at::Tensor& counters, const EmaParams& params) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("gpucore::ema_update", "")
          .typed<void(at::TensorList, at::TensorList, const at::Tensor&, double, bool, double, double)>();
  op.call(averages, sources, counters, params.decay, params.warmup, params.warmup_gamma, params.warmup_power);
}

// The schemas (kernels in cpu/ and cuda/; fake kernels in the Python module named here).
TORCH_LIBRARY_FRAGMENT(gpucore, m) {
  m.set_python_module("gpucore.ops");
  m.def("ema_update(Tensor(a!)[] averages, Tensor[] sources, Tensor counters, float decay, bool warmup, "
        "float warmup_gamma, float warmup_power) -> ()");
}

}  // namespace gpucore::ops
