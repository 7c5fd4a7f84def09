#pragma once
// The math of the train-step ops (train_step.h), one definition for their CPU and CUDA kernels alike; free
// of torch headers so nvcc compiles it.
#include <cmath>
#include <cstdint>

#include "ops/host_device.h"

namespace gpucore::ops {

constexpr int kMaxMilestones = 64;

// How many classes beat the target class in argmax's order (the first maximum wins, NaN is the largest),
// counting up to `limit`: 0 means argmax hits the target, < k that the target is among the top k.
// value(j) reads class j's output as double (exact for every floating dtype).
template <typename Value>
GPUCORE_HOST_DEVICE inline int64_t classes_beating(const Value& value, int64_t classes, int64_t target, int64_t limit) {
  const double v = value(target);
  const bool v_nan = v != v;
  int64_t count = 0;
  for (int64_t j = 0; j < classes && count < limit; ++j) {
    if (j == target) continue;
    const double u = value(j);
    const bool u_nan = u != u;
    count += j < target ? (u_nan || (!v_nan && u >= v)) : (u_nan ? !v_nan : (!v_nan && u > v));
  }
  return count;
}

// accumulate_metrics' loss slots: sums[0] += loss * weight, sums[1] += weight, where weight is what the batch's
// mean loss is the mean over; a batch of nothing counted (its mean is NaN) adds nothing to sums[0].
GPUCORE_HOST_DEVICE inline void add_loss(double* sums, float loss, double weight) {
  if (weight > 0) sums[0] += static_cast<double>(loss) * weight;
  sums[1] += weight;
}

// The learning-rate schedules as one function of the step count, computed in double and rounded to
// float32 once, as torch's schedulers compute in Python floats. The engine builds the parameters once from
// its gpucore::ScheduleConfig (train/schedule.h), which names its kind from this enum.
enum class ScheduleKind { kConstant, kStep, kMultiStep, kCosine, kOneCycle };

struct ScheduleParams {
  ScheduleKind kind;
  double base_lr;
  int64_t warmup_steps, total_steps, step_size;
  double gamma;
  int64_t milestones[kMaxMilestones];
  int milestone_count;
  double min_lr, pct_start, div_factor, final_div_factor;
};

GPUCORE_HOST_DEVICE inline double clamp_unit(double x) { return x < 0.0 ? 0.0 : (x > 1.0 ? 1.0 : x); }

// Cosine interpolation from `start` (fraction 0) to `end` (fraction 1), as torch's OneCycleLR.
GPUCORE_HOST_DEVICE inline double cosine_anneal(double start, double end, double fraction) {
  return (cos(fraction * M_PI) + 1.0) * ((start - end) / 2.0) + end;
}

// The rate at optimizer step `step` (steps taken so far).
GPUCORE_HOST_DEVICE inline double scheduled_lr(const ScheduleParams& p, double step) {
  // Decay schedules count from the end of the warm-up.
  const double after_warmup = fmax(step - static_cast<double>(p.warmup_steps), 0.0);
  double lr = p.base_lr;
  switch (p.kind) {
    case ScheduleKind::kStep:
      lr = pow(p.gamma, floor(after_warmup / static_cast<double>(p.step_size))) * p.base_lr;
      break;
    case ScheduleKind::kMultiStep: {
      int passed = 0;
      for (int i = 0; i < p.milestone_count; ++i) passed += after_warmup >= static_cast<double>(p.milestones[i]);
      lr = pow(p.gamma, static_cast<double>(passed)) * p.base_lr;
      break;
    }
    case ScheduleKind::kCosine: {
      const double span = static_cast<double>(p.total_steps - p.warmup_steps > 1 ? p.total_steps - p.warmup_steps : 1);
      lr = cosine_anneal(p.base_lr, p.min_lr, clamp_unit(after_warmup / span));
      break;
    }
    case ScheduleKind::kOneCycle: {
      const double initial = p.base_lr / p.div_factor;
      const double final_lr = initial / p.final_div_factor;
      const double peak = fmax(p.pct_start * static_cast<double>(p.total_steps) - 1.0, 1.0);
      const double end = fmax(static_cast<double>(p.total_steps) - 1.0, peak + 1.0);
      lr = step <= peak ? cosine_anneal(initial, p.base_lr, clamp_unit(step / peak))
                        : cosine_anneal(p.base_lr, final_lr, clamp_unit((step - peak) / (end - peak)));
      break;
    }
    case ScheduleKind::kConstant:
      break;
  }
  if (p.warmup_steps > 0 && p.kind != ScheduleKind::kOneCycle) lr *= fmin((step + 1.0) / static_cast<double>(p.warmup_steps), 1.0);
  return lr;
}

}  // namespace gpucore::ops
