// The train-step ops' checks and their C++ entry points through the dispatcher (schemas in library.cpp).
#include "ops/train_step.h"

#include <ATen/core/dispatch/Dispatcher.h>

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

void check_next_indices_inputs(const at::Tensor& order, const at::Tensor& cursor, const at::Tensor& index) {
  TORCH_CHECK(order.scalar_type() == at::kLong && order.dim() == 1 && order.is_contiguous(),
              "next_indices: order must be a contiguous int64 vector, got ", order.scalar_type(), " ", order.sizes());
  TORCH_CHECK(cursor.scalar_type() == at::kLong && cursor.numel() == 1,
              "next_indices: cursor must be one int64 value, got ", cursor.scalar_type(), " ", cursor.sizes());
  TORCH_CHECK(index.scalar_type() == at::kLong && index.dim() == 1 && index.is_contiguous(),
              "next_indices: index must be a contiguous int64 vector, got ", index.scalar_type(), " ", index.sizes());
  TORCH_CHECK(index.numel() <= order.numel(), "next_indices: a batch of ", index.numel(), " from an order of ",
              order.numel());
  TORCH_CHECK(cursor.device() == order.device() && index.device() == order.device(),
              "next_indices: order, cursor and index must be on one device");
}

ScheduleParams schedule_params(const at::Tensor& step, const at::Tensor& lr, c10::string_view schedule, double base_lr,
                               int64_t warmup_steps, int64_t total_steps, int64_t step_size, double gamma,
                               at::IntArrayRef milestones, double min_lr, double pct_start, double div_factor,
                               double final_div_factor) {
  TORCH_CHECK(step.numel() == 1, "learning_rate: step must be one value, got ", step.sizes());
  TORCH_CHECK(lr.numel() == 1 && lr.scalar_type() == at::kFloat, "learning_rate: lr must be one float32 value, got ",
              lr.scalar_type(), " ", lr.sizes());
  TORCH_CHECK(step.device() == lr.device(), "learning_rate: step on ", step.device(), ", lr on ", lr.device());
  TORCH_CHECK(static_cast<int64_t>(milestones.size()) <= kMaxMilestones, "learning_rate: at most ", kMaxMilestones,
              " milestones, got ", milestones.size());
  ScheduleParams p{};
  p.kind = static_cast<int>(parse_schedule(std::string(schedule)));
  p.base_lr = base_lr;
  p.warmup_steps = warmup_steps;
  p.total_steps = total_steps;
  p.step_size = step_size;
  p.gamma = gamma;
  for (size_t i = 0; i < milestones.size(); ++i) p.milestones[i] = milestones[i];
  p.milestone_count = static_cast<int>(milestones.size());
  p.min_lr = min_lr;
  p.pct_start = pct_start;
  p.div_factor = div_factor;
  p.final_div_factor = final_div_factor;
  return p;
}
static_assert(static_cast<int>(ScheduleKind::kStep) == 1 && static_cast<int>(ScheduleKind::kMultiStep) == 2 &&
                  static_cast<int>(ScheduleKind::kCosine) == 3 && static_cast<int>(ScheduleKind::kOneCycle) == 4,
              "step_math.h numbers the schedules in ScheduleKind's order");

void accumulate_metrics(const at::Tensor& sums, const at::Tensor& output, const std::optional<at::Tensor>& target,
                        const at::Tensor& loss, int64_t top_k) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("gpucore::accumulate_metrics", "")
          .typed<void(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&,
                      int64_t)>();
  op.call(sums, output, target, loss, top_k);
}

void count_step(const at::Tensor& counters, const at::Tensor& found_inf) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gpucore::count_step", "")
                             .typed<void(const at::Tensor&, const at::Tensor&)>();
  op.call(counters, found_inf);
}

void learning_rate(const ScheduleConfig& c, const at::Tensor& step, const at::Tensor& lr) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("gpucore::learning_rate", "")
          .typed<void(const at::Tensor&, const at::Tensor&, c10::string_view, double, int64_t, int64_t, int64_t,
                      double, at::IntArrayRef, double, double, double, double)>();
  op.call(step, lr, to_string(c.kind), c.base_lr, c.warmup_steps, c.total_steps, c.step_size, c.gamma, c.milestones,
          c.min_lr, c.pct_start, c.div_factor, c.final_div_factor);
}

void next_indices(const at::Tensor& order, const at::Tensor& cursor, const at::Tensor& index) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gpucore::next_indices", "")
                             .typed<void(const at::Tensor&, const at::Tensor&, const at::Tensor&)>();
  op.call(order, cursor, index);
}

}  // namespace gpucore::ops
