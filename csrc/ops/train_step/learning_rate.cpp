// gpucore::learning_rate: its schedule's bytes, their checks, and its C++ entry point through the dispatcher
// (train_step.h).
#include "ops/train_step/train_step.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cstring>
#include <type_traits>

namespace gpucore::ops {

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

void learning_rate(const at::Tensor& step, const at::Tensor& lr, const at::Tensor& schedule) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gpucore::learning_rate", "")
                             .typed<void(const at::Tensor&, const at::Tensor&, const at::Tensor&)>();
  op.call(step, lr, schedule);
}

// The schema (kernels in cpu/ and cuda/; fake kernel in the Python module named here).
TORCH_LIBRARY_FRAGMENT(gpucore, m) {
  m.set_python_module("gpucore.ops");
  m.def("learning_rate(Tensor step, Tensor(a!) lr, Tensor schedule) -> ()");
}

}  // namespace gpucore::ops
