// gpucore::accumulate_metrics: its checks and its C++ entry point through the dispatcher (train_step.h).
#include "ops/train_step/train_step.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

namespace gpucore::ops {

void check_metrics_inputs(const at::Tensor& sums, const at::Tensor& output, const std::optional<at::Tensor>& target,
                          const at::Tensor& loss, int64_t top_k) {
  TORCH_CHECK(sums.scalar_type() == at::kDouble && sums.dim() == 1 && sums.size(0) >= 5 && sums.is_contiguous(),
              "accumulate_metrics: sums must be a contiguous float64 vector of at least 5 slots, got ",
              sums.scalar_type(), " ", sums.sizes());
  TORCH_CHECK(output.dim() >= 1 && output.is_floating_point(),
              "accumulate_metrics: output must be a floating-point (N, ...) tensor, got ", output.scalar_type(), " ",
              output.sizes());
  TORCH_CHECK(loss.numel() == 1 && loss.scalar_type() == at::kFloat,
              "accumulate_metrics: loss must be one float32 value, got ", loss.scalar_type(), " ", loss.sizes());
  TORCH_CHECK(top_k >= 0, "accumulate_metrics: top_k must be >= 0, got ", top_k);
  TORCH_CHECK(output.device() == sums.device() && loss.device() == sums.device(),
              "accumulate_metrics: sums, output and loss must be on one device");
  if (!target) return;
  TORCH_CHECK(!target->is_floating_point() && !target->is_complex(),
              "accumulate_metrics: target must hold integer class indices, got ", target->scalar_type());
  TORCH_CHECK(output.dim() >= 2 && target->dim() == output.dim() - 1 && target->size(0) == output.size(0) &&
                  target->sizes().slice(1) == output.sizes().slice(2),
              "accumulate_metrics: an output of (N, C, ...) needs targets of (N, ...), got output ", output.sizes(),
              " and target ", target->sizes());
  TORCH_CHECK(target->device() == sums.device(), "accumulate_metrics: target on ", target->device(), ", sums on ",
              sums.device());
}

void accumulate_metrics(const at::Tensor& sums, const at::Tensor& output, const std::optional<at::Tensor>& target,
                        const at::Tensor& loss, int64_t top_k, int64_t ignore_index) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("gpucore::accumulate_metrics", "")
          .typed<void(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&,
                      int64_t, int64_t)>();
  op.call(sums, output, target, loss, top_k, ignore_index);
}

// The schema (kernels in cpu/ and cuda/; fake kernel in the Python module named here).
TORCH_LIBRARY_FRAGMENT(gpucore, m) {
  m.set_python_module("gpucore.ops");
  m.def("accumulate_metrics(Tensor(a!) sums, Tensor output, Tensor? target, Tensor loss, int top_k, "
        "int ignore_index=-100) -> ()");
}

}  // namespace gpucore::ops
