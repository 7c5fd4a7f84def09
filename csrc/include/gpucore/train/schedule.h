#pragma once
// Learning-rate schedules as functions of the optimizer-step count held in a device tensor, so the
// rate follows only the steps actually taken (skipped fp16 steps do not advance it) and is computed
// on the device without a host sync. All counts are optimizer steps.
#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "ops/step_math.h"

namespace gpucore {

// The kinds are the op's (ops/step_math.h: its math, free of torch for nvcc, switches on them).
using ops::ScheduleKind;
std::vector<std::string> schedule_names();
ScheduleKind parse_schedule(const std::string& name);  // constant, step, multistep, cosine, onecycle
std::string to_string(ScheduleKind kind);

struct ScheduleConfig {
  // The defaults are config.py's keys' (test_engine_config compares them), but for the counts in optimizer steps,
  // which engine_config.py derives from the keys in epochs (warmup_epochs, epochs, step_size, milestones).
  ScheduleKind kind = ScheduleKind::kCosine;
  double base_lr = 1e-3;              // the peak rate for onecycle
  int64_t warmup_steps = 0;           // linear warm-up from base_lr / warmup_steps (config key warmup_epochs)
  int64_t total_steps = 1;            // cosine and onecycle (config key epochs, in steps)
  int64_t step_size = 1;              // step: optimizer steps between decays (config key step_size is in epochs)
  double gamma = 0.1;                 // step, multistep
  std::vector<int64_t> milestones;    // multistep: in optimizer steps (config key milestones: in epochs)
  double min_lr = 0.0;                // cosine floor
  double pct_start = 0.3;             // onecycle
  double div_factor = 25.0;           // onecycle: initial = base_lr / div_factor
  double final_div_factor = 1e4;      // onecycle: final = initial / final_div_factor
};

// Throws ConfigError for settings that do not fit together (warm-up longer than the run, onecycle with warm-up,
// min_lr above lr, ...); a setting out of its own range (gpucore/ranges.h) fails a TORCH_CHECK.
void validate(const ScheduleConfig& config);

// The parameters of the op gpucore::learning_rate (ops/train_step/train_step.h) as it takes them (ConfigError as
// validate): the engine packs them once and runs the op into its own lr tensor after every optimizer step.
at::Tensor pack_schedule(const ScheduleConfig& config);

// The rate at step `step` (0-dim float32, any device), as a 0-dim float32 tensor on that device.
at::Tensor learning_rate(const ScheduleConfig& config, const at::Tensor& step);

}  // namespace gpucore
