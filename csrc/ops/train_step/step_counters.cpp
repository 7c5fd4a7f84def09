// gpucore::count_step: its checks and its C++ entry point through the dispatcher (train_step.h).
#include "ops/train_step/train_step.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

namespace gpucore::ops {

void check_count_step_inputs(const at::Tensor& counters, const at::Tensor& found_inf) {
  TORCH_CHECK(counters.scalar_type() == at::kFloat && counters.dim() == 1 && counters.size(0) == 3 &&
                  counters.is_contiguous(),
              "count_step: counters must be a contiguous float32 vector of 3, got ", counters.scalar_type(), " ",
              counters.sizes());
  TORCH_CHECK(found_inf.scalar_type() == at::kFloat && found_inf.numel() == 1,
              "count_step: found_inf must be one float32 value, got ", found_inf.scalar_type(), " ", found_inf.sizes());
  TORCH_CHECK(found_inf.device() == counters.device(), "count_step: counters on ", counters.device(),
              ", found_inf on ", found_inf.device());
}

void count_step(const at::Tensor& counters, const at::Tensor& found_inf) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gpucore::count_step", "")
                             .typed<void(const at::Tensor&, const at::Tensor&)>();
  op.call(counters, found_inf);
}

// The schema (kernels in cpu/ and cuda/; fake kernel in the Python module named here).
TORCH_LIBRARY_FRAGMENT(gpucore, m) {
  m.set_python_module("gpucore.ops");
  m.def("count_step(Tensor(a!) counters, Tensor(b!) found_inf) -> ()");
}

}  // namespace gpucore::ops
