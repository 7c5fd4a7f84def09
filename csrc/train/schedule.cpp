#include "gpucore/train/schedule.h"

#include <ATen/ops/empty.h>

#include <algorithm>

#include "gpucore/choices.h"
#include "gpucore/errors.h"
#include "gpucore/ranges.h"
#include "ops/train_step/train_step.h"

namespace gpucore {

namespace {

const Choices<ScheduleKind> kSchedules = {{"constant", ScheduleKind::kConstant}, {"step", ScheduleKind::kStep},
                                          {"multistep", ScheduleKind::kMultiStep}, {"cosine", ScheduleKind::kCosine},
                                          {"onecycle", ScheduleKind::kOneCycle}};

}  // namespace

ScheduleKind parse_schedule(const std::string& name) { return parse_choice("schedule", name, kSchedules); }
std::string to_string(ScheduleKind kind) { return choice_name(kind, kSchedules); }
std::vector<std::string> schedule_names() { return choice_names(kSchedules); }

void validate(const ScheduleConfig& c) {
  // The ranges config.py checks first (gpucore/ranges.h), and the step counts it derives from epochs.
  ranges::kLr.check(c.base_lr);
  ranges::kGamma.check(c.gamma);
  ranges::kMinLr.check(c.min_lr);
  ranges::kPctStart.check(c.pct_start);
  ranges::kDivFactor.check(c.div_factor);
  ranges::kFinalDivFactor.check(c.final_div_factor);
  TORCH_CHECK(c.warmup_steps >= 0, "warmup_steps must be >= 0, got ", c.warmup_steps);
  TORCH_CHECK(c.total_steps >= 1, "total_steps must be >= 1, got ", c.total_steps);
  TORCH_CHECK(c.kind != ScheduleKind::kStep || c.step_size >= 1, "step_size must be >= 1 step, got ", c.step_size);
  // What no single config key says: the keys' relations.
  auto fail = [](const std::string& message) { throw ConfigError(message); };
  if (c.kind == ScheduleKind::kCosine && c.warmup_steps >= c.total_steps) {
    fail("warm-up (" + std::to_string(c.warmup_steps) + " steps) must be shorter than the run (" +
         std::to_string(c.total_steps) + " steps) for schedule cosine");
  }
  if (c.milestones.size() > static_cast<size_t>(ops::kMaxMilestones)) {
    fail("at most " + std::to_string(ops::kMaxMilestones) + " milestones, got " + std::to_string(c.milestones.size()));
  }
  for (size_t i = 1; i < c.milestones.size(); ++i) {
    if (c.milestones[i] <= c.milestones[i - 1]) fail("milestones must be strictly increasing");
  }
  if (c.kind == ScheduleKind::kOneCycle && c.warmup_steps > 0) {
    fail("schedule onecycle has its own warm-up (pct_start); set warmup to 0");
  }
  if (c.min_lr > c.base_lr) {
    fail("min_lr must be at most lr (" + c10::str(c.base_lr) + "), got " + c10::str(c.min_lr));
  }
}

at::Tensor pack_schedule(const ScheduleConfig& c) {
  validate(c);
  ops::ScheduleParams params{};
  params.kind = c.kind;
  params.base_lr = c.base_lr;
  params.warmup_steps = c.warmup_steps;
  params.total_steps = c.total_steps;
  params.step_size = c.step_size;
  params.gamma = c.gamma;
  std::copy(c.milestones.begin(), c.milestones.end(), params.milestones);
  params.milestone_count = static_cast<int>(c.milestones.size());
  params.min_lr = c.min_lr;
  params.pct_start = c.pct_start;
  params.div_factor = c.div_factor;
  params.final_div_factor = c.final_div_factor;
  return ops::pack_schedule_params(params);
}

at::Tensor learning_rate(const ScheduleConfig& c, const at::Tensor& step) {
  at::Tensor lr = at::empty({}, step.options().dtype(at::kFloat));
  ops::learning_rate(step, lr, pack_schedule(c));
  return lr;
}

}  // namespace gpucore
