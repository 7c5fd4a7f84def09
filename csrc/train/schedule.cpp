#include "gpucore/train/schedule.h"

#include <ATen/ops/empty.h>

#include <algorithm>

#include "gpucore/choices.h"
#include "gpucore/errors.h"
#include "ops/train_step.h"

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
  auto fail = [](const std::string& message) { throw ConfigError(message); };
  if (!(c.base_lr > 0)) fail("lr must be > 0, got " + std::to_string(c.base_lr));
  if (c.warmup_steps < 0) fail("warmup must be >= 0 steps, got " + std::to_string(c.warmup_steps));
  if (c.total_steps < 1) fail("the run has no optimizer steps (total_steps " + std::to_string(c.total_steps) + ")");
  if (c.kind == ScheduleKind::kCosine && c.warmup_steps >= c.total_steps) {
    fail("warm-up (" + std::to_string(c.warmup_steps) + " steps) must be shorter than the run (" +
         std::to_string(c.total_steps) + " steps) for schedule cosine");
  }
  if (c.kind == ScheduleKind::kStep && c.step_size < 1) fail("step_size must be >= 1");
  if ((c.kind == ScheduleKind::kStep || c.kind == ScheduleKind::kMultiStep) && !(c.gamma > 0)) fail("gamma must be > 0");
  if (c.milestones.size() > static_cast<size_t>(ops::kMaxMilestones)) {
    fail("at most " + std::to_string(ops::kMaxMilestones) + " milestones, got " + std::to_string(c.milestones.size()));
  }
  for (size_t i = 1; i < c.milestones.size(); ++i) {
    if (c.milestones[i] <= c.milestones[i - 1]) fail("milestones must be strictly increasing");
  }
  if (c.kind == ScheduleKind::kOneCycle) {
    if (c.warmup_steps > 0) fail("schedule onecycle has its own warm-up (pct_start); set warmup to 0");
    if (!(c.pct_start > 0 && c.pct_start < 1)) fail("pct_start must be in (0, 1), got " + std::to_string(c.pct_start));
    if (!(c.div_factor > 0 && c.final_div_factor > 0)) fail("div_factor and final_div_factor must be > 0");
  }
  if (c.min_lr < 0 || c.min_lr > c.base_lr) fail("min_lr must be in [0, lr], got " + std::to_string(c.min_lr));
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
