// CPU kernel of gpucore::ema_update: one pass per tensor, parallel over its elements.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cstring>

#include "ops/train_step/ema.h"

namespace gpucore::ops {
namespace {

template <typename T>
void lerp_all(const at::Tensor& average, const at::Tensor& source, double weight) {
  using Math = at::opmath_type<T>;
  T* out = average.data_ptr<T>();
  const T* in = source.data_ptr<T>();
  const Math w = static_cast<Math>(weight);
  at::parallel_for(0, average.numel(), 32768, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      out[i] = static_cast<T>(lerp_toward<Math>(static_cast<Math>(out[i]), static_cast<Math>(in[i]), w));
    }
  });
}

void ema_update_cpu(at::TensorList averages, at::TensorList sources, const at::Tensor& counters, double decay,
                    bool warmup, double warmup_gamma, double warmup_power) {
  const EmaParams params = ema_params(averages, sources, counters, decay, warmup, warmup_gamma, warmup_power);
  const float* steps = counters.data_ptr<float>();
  if (steps[2] > 0.0f) return;  // a skipped step: the average stays as it was
  const double weight = ema_weight(params, steps);
  for (size_t i = 0; i < averages.size(); ++i) {
    const at::Tensor &average = averages[i], &source = sources[i];
    if (average.numel() == 0) continue;
    if (average.is_floating_point()) {
      AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, average.scalar_type(), "ema_update_cpu",
                                      [&] { lerp_all<scalar_t>(average, source, weight); });
    } else {  // dense with equal strides: the same bytes in the same order
      std::memcpy(average.data_ptr(), source.data_ptr(), average.numel() * average.element_size());
    }
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(gpucore, CPU, m) { m.impl("ema_update", &ema_update_cpu); }

}  // namespace gpucore::ops
