// The train-step ops' checks and their C++ entry points through the dispatcher.
#include "ops/train_step.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cstring>
#include <type_traits>

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

static_assert(std::is_trivially_copyable_v<ScheduleParams>, "ScheduleParams travels as its bytes");

at::Tensor pack_schedule_params(const ScheduleParams& params) {
  at::Tensor packed = at::empty({static_cast<int64_t>(sizeof(ScheduleParams))}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(packed.data_ptr<uint8_t>(), &params, sizeof(ScheduleParams));
  return packed;
}

ScheduleParams schedule_params(const at::Tensor& step, const at::Tensor& lr, const at::Tensor& schedule) {
  TORCH_CHECK(step.numel() == 1, "learning_rate: step must be one value, got ", step.sizes());
  TORCH_CHECK(lr.numel() == 1 && lr.scalar_type() == at::kFloat, "learning_rate: lr must be one float32 value, got ",
              lr.scalar_type(), " ", lr.sizes());
  TORCH_CHECK(step.device() == lr.device(), "learning_rate: step on ", step.device(), ", lr on ", lr.device());
  TORCH_CHECK(schedule.device().is_cpu() && schedule.scalar_type() == at::kByte && schedule.is_contiguous() &&
                  schedule.numel() == static_cast<int64_t>(sizeof(ScheduleParams)),
              "learning_rate: schedule must be the ", sizeof(ScheduleParams),
              " bytes of pack_schedule_params on the CPU, got ", schedule.scalar_type(), " ", schedule.sizes(),
              " on ", schedule.device());
  ScheduleParams params;
  std::memcpy(&params, schedule.data_ptr<uint8_t>(), sizeof(ScheduleParams));
  TORCH_CHECK(params.milestone_count >= 0 && params.milestone_count <= kMaxMilestones, "learning_rate: at most ",
              kMaxMilestones, " milestones, got ", params.milestone_count);
  return params;
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

void count_step(const at::Tensor& counters, const at::Tensor& found_inf) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gpucore::count_step", "")
                             .typed<void(const at::Tensor&, const at::Tensor&)>();
  op.call(counters, found_inf);
}

void learning_rate(const at::Tensor& step, const at::Tensor& lr, const at::Tensor& schedule) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gpucore::learning_rate", "")
                             .typed<void(const at::Tensor&, const at::Tensor&, const at::Tensor&)>();
  op.call(step, lr, schedule);
}

// The schemas (kernels in cpu/ and cuda/; fake kernels in the Python module named here).
TORCH_LIBRARY_FRAGMENT(gpucore, m) {
  m.set_python_module("gpucore.ops");
  m.def("accumulate_metrics(Tensor(a!) sums, Tensor output, Tensor? target, Tensor loss, int top_k, "
        "int ignore_index=-100) -> ()");
  m.def("count_step(Tensor(a!) counters, Tensor(b!) found_inf) -> ()");
  m.def("learning_rate(Tensor step, Tensor(a!) lr, Tensor schedule) -> ()");
}

}  // namespace gpucore::ops
