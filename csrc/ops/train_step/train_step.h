#pragma once
// The training step's bookkeeping as torch ops (namespace gpucore), one op each where ATen needed
// many, with CPU and CUDA kernels, so a step issues few ops (each costs host time, and a CUDA graph
// replays them all). All three write into tensors the engine keeps, so their addresses never change. (The batch
// cursor, next_indices, is batch_cursor.h's.) Each op's schema and checks are a file of its own here: metrics.cpp,
// step_counters.cpp, learning_rate.cpp; their kernels share cpu/train_step_cpu.cpp and cuda/train_step_*.
//
//   accumulate_metrics(Tensor(a!) sums, Tensor output, Tensor? target, Tensor loss, int top_k,
//                      int ignore_index=-100) -> ()
//       sums: float64, at least 5 slots; sums over counted elements, divided once when read, so a pass's
//       numbers do not depend on how it was batched. sums[0] += loss * w, sums[1] += w, with loss the batch's
//       mean (float32 0-dim) and w the number of elements it is the mean over: the targets that are not
//       ignore_index with integer class targets, else N (= output.size(0)); a batch with w = 0 adds nothing
//       to sums[0] (its mean is NaN). (A per-element loss weight would make w the sum of the counted
//       elements' weights.) With integer class targets (N, ...) for an output (N, C, ...), over the targets
//       that are not ignore_index: sums[2] += how many argmax over C hits (ties: the first maximum, NaN the
//       largest, as torch.argmax), sums[4] += how many there are, and with top_k > 0, sums[3] += how many are
//       among the top_k classes. Other targets outside [0, C) count, but are never hits.
//   count_step(Tensor(a!) counters, Tensor(b!) found_inf) -> ()
//       counters: float32 [steps taken, steps skipped, skipped in a row]; found_inf: float32 0-dim, 1 when
//       this optimizer step was skipped. Advances the counters as the step went, then zeroes found_inf
//       for the next step's non-finite check. Exact up to kMaxCountedSteps.
//   learning_rate(Tensor step, Tensor(a!) lr, Tensor schedule) -> ()
//       lr (float32 0-dim) = the schedule's rate at `step` (a 0-dim count), see step_math.h. schedule: the
//       ScheduleParams as pack_schedule_params made them, a CPU tensor read on the host by either kernel.
#include <ATen/core/Tensor.h>

#include "ops/step_math.h"

namespace gpucore::ops {

// float32 holds every integer up to 2^24 exactly, so count_step's counters (and the step count that
// learning_rate and ema_update read from them) are exact for this many optimizer steps; the engine
// refuses a longer run.
constexpr int64_t kMaxCountedSteps = int64_t{1} << 24;

void check_metrics_inputs(const at::Tensor& sums, const at::Tensor& output, const std::optional<at::Tensor>& target,
                          const at::Tensor& loss, int64_t top_k);
void check_count_step_inputs(const at::Tensor& counters, const at::Tensor& found_inf);
// The schedule's parameters as the learning_rate op takes them: their bytes in a CPU uint8 tensor, made once.
at::Tensor pack_schedule_params(const ScheduleParams& params);
// The kernels' parameters from the op's arguments, checked.
ScheduleParams schedule_params(const at::Tensor& step, const at::Tensor& lr, const at::Tensor& schedule);

// The ops through the dispatcher (CPU or CUDA kernel by the tensors' device).
void accumulate_metrics(const at::Tensor& sums, const at::Tensor& output, const std::optional<at::Tensor>& target,
                        const at::Tensor& loss, int64_t top_k, int64_t ignore_index);
void count_step(const at::Tensor& counters, const at::Tensor& found_inf);
void learning_rate(const at::Tensor& step, const at::Tensor& lr, const at::Tensor& schedule);

}  // namespace gpucore::ops
