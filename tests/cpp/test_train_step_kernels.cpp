// The training step's launchers (ops/cuda/train_step_kernels.h) against the CPU kernels of their ops
// (kernels_against_cpu.h).
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "gpucore/train/schedule.h"
#include "kernels_against_cpu.h"
#include "ops/cuda/train_step_kernels.h"
#include "ops/train_step/train_step.h"

namespace gpucore::ops {
namespace {

TEST_F(KernelsAgainstCpu, AccumulateMetrics) {
  Random random(14);
  struct Case {
    std::vector<int64_t> output_shape;  // N, C, spatial...
    bool with_targets;
  };
  // Classification, segmentation (N x C x H x W), rows past a block, one sample, none, loss and count only.
  const std::vector<Case> cases = {{{37, 5}, true}, {{3, 4, 7, 9}, true}, {{300, 3}, true},
                                   {{1, 1}, true},  {{0, 6}, true},       {{9, 5}, false}};
  const DtypePairs dtypes = {{at::kFloat, cuda::KernelDtype::kFloat32},
                             {at::kDouble, cuda::KernelDtype::kFloat64},
                             {at::kHalf, cuda::KernelDtype::kFloat16},
                             {at::kBFloat16, cuda::KernelDtype::kBFloat16}};
  expect_every_listed_dtype(dtypes, cuda::MetricsOutputDtypes::values);
  for (const auto& [dtype, launch_type] : dtypes) {
    for (const int64_t top_k : {0, 1, 3}) {
      for (const Case& c : cases) {
        SCOPED_TRACE(shape_name(c.output_shape) + " " + c10::toString(dtype) + " top " + std::to_string(top_k) +
                     (c.with_targets ? "" : " no targets"));
        const int64_t n = c.output_shape[0], classes = c.output_shape[1];
        // Few distinct values, so ties are common, and some NaN (the largest, as torch.argmax).
        at::Tensor output = random.integers(c.output_shape, 0, 4).to(dtype);
        output = at::where(random.uniform(c.output_shape, 0.0, 1.0) < 0.05, at::full({}, NAN, dtype), output);
        std::vector<int64_t> target_shape = {n};
        target_shape.insert(target_shape.end(), c.output_shape.begin() + 2, c.output_shape.end());
        // Some outside [0, C): counted, no hit; some ignore_index (-1 here): not counted.
        const at::Tensor targets = random.integers(target_shape, -2, classes + 1);
        const int64_t ignore_index = -1;
        const std::optional<at::Tensor> target = c.with_targets ? std::optional<at::Tensor>(targets) : std::nullopt;
        const at::Tensor loss = random.uniform({}, 0.0, 3.0);
        const at::Tensor sums = random.integers({5}, 0, 100).to(at::kDouble);
        const DeviceCopy device_sums(sums), device_loss(loss), out(output.contiguous()), label(targets),
            counted(at::zeros({1}, at::kLong));
        accumulate_metrics(sums, output, target, loss, top_k, ignore_index);
        const int64_t spatial = c.with_targets && n > 0 ? targets.numel() / n : 0;
        cuda::launch_accumulate_metrics(device_sums.get<double>(), device_loss.get<float>(), out.get(), launch_type,
                                        c.with_targets ? label.get<int64_t>() : nullptr, n,
                                        c.with_targets ? classes : 0, spatial, top_k, ignore_index,
                                        c.with_targets ? counted.get<unsigned long long>() : nullptr, nullptr);
        expect_ran();
        expect_bitwise_equal(device_sums.host(), sums);
        expect_bitwise_equal(counted.host(), at::zeros({1}, at::kLong));  // left at zero for the next batch
      }
    }
  }
}

TEST_F(KernelsAgainstCpu, CountStep) {
  for (const float found_inf : {0.0f, 1.0f}) {
    SCOPED_TRACE(found_inf);
    const at::Tensor counters = at::tensor({12.0f, 3.0f, 2.0f}), found = at::full({}, found_inf);
    const DeviceCopy device_counters(counters), device_found(found);
    count_step(counters, found);
    cuda::launch_count_step(device_counters.get<float>(), device_found.get<float>(), nullptr);
    expect_ran();
    expect_bitwise_equal(device_counters.host(), counters);
    expect_bitwise_equal(device_found.host(), found);
  }
}

TEST_F(KernelsAgainstCpu, LearningRate) {
  std::vector<ScheduleConfig> configs(5);
  configs[0] = {ScheduleKind::kConstant, 0.1, 10, 100};
  configs[1] = {ScheduleKind::kStep, 0.1, 5, 100, 30, 0.5};
  configs[2] = {ScheduleKind::kMultiStep, 0.1, 0, 100, 1, 0.2, {10, 40, 70}};
  configs[3] = {ScheduleKind::kCosine, 0.1, 8, 100, 1, 0.1, {}, 1e-4};
  configs[4] = {ScheduleKind::kOneCycle, 0.1, 0, 100};
  for (const ScheduleConfig& config : configs) {
    for (const float step : {0.0f, 1.0f, 7.0f, 8.0f, 10.0f, 29.0f, 30.0f, 55.0f, 99.0f, 150.0f}) {
      SCOPED_TRACE(to_string(config.kind) + " step " + std::to_string(step));
      const at::Tensor count = at::full({}, step), lr = at::zeros({});
      const at::Tensor schedule = pack_schedule(config);
      const ScheduleParams params = schedule_params(count, lr, schedule);
      const DeviceCopy device_count(count), device_lr(lr);
      learning_rate(count, lr, schedule);
      cuda::launch_learning_rate(device_count.get<float>(), device_lr.get<float>(), params, nullptr);
      expect_ran();
      expect_bitwise_equal(device_lr.host(), lr);
    }
  }
}

}  // namespace
}  // namespace gpucore::ops
