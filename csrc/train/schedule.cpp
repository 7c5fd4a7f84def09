#include "gpucore/train/schedule.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/cos.h>
#include <ATen/ops/floor.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>

#include <cmath>

#include "gpucore/choices.h"
#include "gpucore/errors.h"

namespace gpucore {

namespace {

const Choices<ScheduleKind> kSchedules = {{"constant", ScheduleKind::kConstant}, {"step", ScheduleKind::kStep},
                                          {"multistep", ScheduleKind::kMultiStep}, {"cosine", ScheduleKind::kCosine},
                                          {"onecycle", ScheduleKind::kOneCycle}};

}  // namespace

ScheduleKind parse_schedule(const std::string& name) { return parse_choice("schedule", name, kSchedules); }
std::string to_string(ScheduleKind kind) { return choice_name(kind, kSchedules); }

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

namespace {

// Cosine interpolation from `start` (fraction 0) to `end` (fraction 1), as torch's OneCycleLR.
at::Tensor cosine_anneal(double start, double end, const at::Tensor& fraction) {
  return (at::cos(fraction * M_PI) + 1.0) * ((start - end) / 2.0) + end;
}

}  // namespace

at::Tensor learning_rate(const ScheduleConfig& c, const at::Tensor& step) {
  const at::Tensor s = step.to(at::kFloat);
  // Decay schedules count from the end of the warm-up.
  const at::Tensor after_warmup = (s - static_cast<double>(c.warmup_steps)).clamp_min(0.0);
  at::Tensor lr;
  switch (c.kind) {
    case ScheduleKind::kConstant:
      lr = at::full_like(s, c.base_lr);
      break;
    case ScheduleKind::kStep:
      lr = at::pow(c.gamma, at::floor(after_warmup / static_cast<double>(c.step_size))) * c.base_lr;
      break;
    case ScheduleKind::kMultiStep: {
      at::Tensor passed = at::zeros_like(s);
      for (const int64_t milestone : c.milestones) passed = passed + (after_warmup >= static_cast<double>(milestone)).to(at::kFloat);
      lr = at::pow(c.gamma, passed) * c.base_lr;
      break;
    }
    case ScheduleKind::kCosine: {
      const double span = static_cast<double>(std::max<int64_t>(c.total_steps - c.warmup_steps, 1));
      lr = cosine_anneal(c.base_lr, c.min_lr, (after_warmup / span).clamp(0.0, 1.0));
      break;
    }
    case ScheduleKind::kOneCycle: {
      const double initial = c.base_lr / c.div_factor;
      const double final_lr = initial / c.final_div_factor;
      const double peak = std::max(c.pct_start * static_cast<double>(c.total_steps) - 1.0, 1.0);
      const double end = std::max(static_cast<double>(c.total_steps) - 1.0, peak + 1.0);
      const at::Tensor rising = cosine_anneal(initial, c.base_lr, (s / peak).clamp(0.0, 1.0));
      const at::Tensor falling = cosine_anneal(c.base_lr, final_lr, ((s - peak) / (end - peak)).clamp(0.0, 1.0));
      lr = at::where(s <= peak, rising, falling);
      break;
    }
  }
  if (c.warmup_steps > 0 && c.kind != ScheduleKind::kOneCycle) {
    lr = lr * ((s + 1.0) / static_cast<double>(c.warmup_steps)).clamp_max(1.0);
  }
  return lr;
}

}  // namespace gpucore
