// The training core without Python: schedules, loss scaling, the fused optimizer's skip, batches.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "gpucore/batches/batches.h"
#include "gpucore/errors.h"
#include "gpucore/train/engine.h"
#include "gpucore/train/grad_scaler.h"
#include "gpucore/train/optimizer.h"
#include "gpucore/train/schedule.h"
#include "gpucore/train/step_graph.h"

namespace gpucore {
namespace {

double lr_at(const ScheduleConfig& config, double step) {
  return learning_rate(config, at::scalar_tensor(step, at::kFloat)).item<double>();
}

TEST(StepGraph, ABuildOrDeviceWithoutCudaCapturesNothingAndSaysWhy) {
  at::Tensor target = at::zeros({3});
  StepGraph graph;
  bool ran = false;
  const std::string reason = graph.capture([&] {
    ran = true;
    target.add_(1);
  });
  if (!at::hasCUDA()) {  // a CPU-only build, or no GPU: the step is neither run nor recorded
    EXPECT_FALSE(reason.empty());
    EXPECT_FALSE(ran);
  }
  if (!reason.empty()) {
    EXPECT_FALSE(graph.captured());
    EXPECT_THROW(graph.replay(), std::logic_error);
    EXPECT_TRUE(target.eq(0).all().item<bool>());  // a failed capture leaves the state as it was
  }
}

TEST(Schedule, WarmupRisesLinearlyToTheBaseRate) {
  ScheduleConfig config;
  config.base_lr = 0.4;
  config.warmup_steps = 4;
  config.total_steps = 100;
  EXPECT_NEAR(lr_at(config, 0), 0.1, 1e-7);
  EXPECT_NEAR(lr_at(config, 3), 0.4, 1e-7);
  EXPECT_NEAR(lr_at(config, 50), 0.4, 1e-7);
}

TEST(Schedule, CosineStartsAfterWarmupAndEndsAtMinLr) {
  ScheduleConfig config;
  config.kind = ScheduleKind::kCosine;
  config.base_lr = 1.0;
  config.min_lr = 0.1;
  config.warmup_steps = 10;
  config.total_steps = 110;
  EXPECT_NEAR(lr_at(config, 10), 1.0, 1e-6);
  EXPECT_NEAR(lr_at(config, 60), 0.55, 1e-6);  // half way: the mean of 1.0 and 0.1
  EXPECT_NEAR(lr_at(config, 110), 0.1, 1e-6);
}

TEST(Schedule, StepDecay) {
  ScheduleConfig config;
  config.kind = ScheduleKind::kStep;
  config.base_lr = 1.0;
  config.step_size = 5;
  config.gamma = 0.5;
  EXPECT_NEAR(lr_at(config, 4), 1.0, 1e-7);
  EXPECT_NEAR(lr_at(config, 5), 0.5, 1e-7);
  EXPECT_NEAR(lr_at(config, 12), 0.25, 1e-7);
}

TEST(Schedule, InvalidSettingsAreConfigErrors) {
  ScheduleConfig config;
  config.base_lr = 0;
  EXPECT_THROW(validate(config), ConfigError);
  config.base_lr = 0.1;
  config.kind = ScheduleKind::kOneCycle;
  config.warmup_steps = 3;
  EXPECT_THROW(validate(config), ConfigError);
  EXPECT_EQ(parse_schedule("cosine"), ScheduleKind::kCosine);
  EXPECT_THROW(parse_schedule("linear"), ConfigError);
}

TEST(GradScaler, BacksOffOnInfAndGrowsAfterTheInterval) {
  GradScalerConfig config;
  config.enabled = true;
  config.growth_interval = 2;
  GradScaler scaler(config, at::kCPU);
  at::Tensor found_inf = at::zeros({}, at::kFloat);
  std::vector<at::Tensor> grads = {at::tensor({65536.0f, std::numeric_limits<float>::infinity()})};
  scaler.unscale_and_check(grads, found_inf);
  EXPECT_EQ(found_inf.item<float>(), 1.0f);
  EXPECT_EQ(grads[0][0].item<float>(), 1.0f);  // divided by the scale 2^16
  scaler.update(found_inf);
  EXPECT_EQ(scaler.scale_tensor().item<float>(), 32768.0f);
  found_inf.zero_();
  scaler.update(found_inf);
  scaler.update(found_inf);
  EXPECT_EQ(scaler.scale_tensor().item<float>(), 65536.0f);
}

TEST(GradScaler, DisabledStillDetectsNonFiniteGradients) {
  GradScaler scaler(GradScalerConfig{}, at::kCPU);
  at::Tensor found_inf = at::zeros({}, at::kFloat);
  std::vector<at::Tensor> grads = {at::tensor({1.0f, std::nanf("")})};
  scaler.unscale_and_check(grads, found_inf);
  EXPECT_EQ(found_inf.item<float>(), 1.0f);
  EXPECT_TRUE(at::equal(scaler.scale(at::ones({})), at::ones({})));
}

TEST(FusedOptimizer, SkipsTheStepWhenFoundInfIsSet) {
  for (const auto kind : {OptimizerKind::kSGD, OptimizerKind::kAdam, OptimizerKind::kAdamW}) {
    at::Tensor param = at::ones({3}).requires_grad_(true);
    param.mutable_grad() = at::full({3}, 0.5);
    OptimizerConfig config;
    config.kind = kind;
    FusedOptimizer optimizer({{{param}, 0.01}}, config);
    const at::Tensor lr = at::scalar_tensor(0.1, at::kFloat);
    optimizer.step(lr, at::ones({}, at::kFloat));
    EXPECT_TRUE(at::equal(param, at::ones({3})));
    optimizer.step(lr, at::zeros({}, at::kFloat));
    EXPECT_LT(param[0].item<float>(), 1.0f);
    for (const auto& [name, tensor] : optimizer.state()) {
      if (name.find("step") != std::string::npos) EXPECT_EQ(tensor.item<float>(), 1.0f) << name;
    }
  }
}

TEST(FusedOptimizer, EachGroupStepsWithTheLrTimesItsScale) {
  // Two groups with the same parameter and gradient; the second's rate is a quarter of the first's.
  // SGD without momentum or decay: param - lr * scale * grad, exactly (the numbers are powers of two).
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::kSGD;
  sgd.momentum = 0.0;
  at::Tensor head = at::ones({4}).requires_grad_(true), backbone = at::ones({4}).requires_grad_(true);
  head.mutable_grad() = at::full({4}, 0.5);
  backbone.mutable_grad() = at::full({4}, 0.5);
  FusedOptimizer optimizer({{{head}, 0.0, 1.0}, {{backbone}, 0.0, 0.25}}, sgd);
  optimizer.step(at::scalar_tensor(0.5, at::kFloat), at::zeros({}, at::kFloat));
  EXPECT_TRUE(at::equal(head, at::full({4}, 1.0 - 0.5 * 0.5)));
  EXPECT_TRUE(at::equal(backbone, at::full({4}, 1.0 - 0.5 * 0.25 * 0.5)));

  // AdamW, first step: m_hat = g, v_hat = g^2, so p <- p * (1 - lr s wd) - lr s g / (|g| + eps).
  OptimizerConfig adamw;
  at::Tensor a = at::full({3}, 2.0).requires_grad_(true), b = at::full({3}, 2.0).requires_grad_(true);
  a.mutable_grad() = at::tensor({0.5f, -1.0f, 2.0f});
  b.mutable_grad() = a.grad().clone();
  FusedOptimizer adam({{{a}, 0.1, 1.0}, {{b}, 0.1, 0.1}}, adamw);
  adam.step(at::scalar_tensor(0.01, at::kFloat), at::zeros({}, at::kFloat));
  for (const auto& [param, scale] : {std::pair{a, 1.0}, std::pair{b, 0.1}}) {
    const double lr = 0.01 * scale;
    const at::Tensor g = at::tensor({0.5, -1.0, 2.0}, at::kDouble);
    const at::Tensor expected = 2.0 * (1 - lr * 0.1) - lr * g / (g.abs() + 1e-8);
    EXPECT_LE((param.to(at::kDouble) - expected).abs().max().item<double>(), 1e-6) << "lr_scale " << scale;
  }
}

TEST(FusedOptimizer, LrScaleMustBePositive) {
  at::Tensor param = at::ones({2}).requires_grad_(true);
  EXPECT_THROW(FusedOptimizer({{{param}, 0.0, 0.0}}, OptimizerConfig{}), ConfigError);
  EXPECT_THROW(FusedOptimizer({{{param}, 0.0, std::nan("")}}, OptimizerConfig{}), ConfigError);
}

TEST(FusedOptimizer, StateRoundTripAndMismatchErrors) {
  at::Tensor param = at::ones({2, 2}).requires_grad_(true);
  FusedOptimizer optimizer({{{param}, 0.0}}, OptimizerConfig{});
  auto state = optimizer.state();
  ASSERT_EQ(state.size(), 3u);
  state[0].second = state[0].second.clone().fill_(7);
  optimizer.load_state(state);
  EXPECT_EQ(optimizer.state()[0].second[0][0].item<float>(), 7.0f);
  state[0].second = at::zeros({3});
  EXPECT_THROW(optimizer.load_state(state), ConfigError);
  EXPECT_THROW(optimizer.load_state({}), ConfigError);
}

TEST(TensorBatches, ServesEverySampleOnceAndHonoursDropLast) {
  const at::Tensor x = at::arange(10).to(at::kFloat).unsqueeze(1);
  const at::Tensor y = at::arange(10);
  TensorBatches keep(x, y, 4, true, false, 1, at::kCPU);
  TensorBatches drop(x, y, 4, true, true, 1, at::kCPU);
  EXPECT_EQ(keep.remaining(), 3);
  EXPECT_EQ(drop.remaining(), 2);
  at::Tensor inputs, targets;
  std::vector<int64_t> seen;
  while (keep.next(inputs, targets)) {
    EXPECT_TRUE(at::equal(inputs.squeeze(1).to(at::kLong), targets));
    for (int64_t i = 0; i < targets.size(0); ++i) seen.push_back(targets[i].item<int64_t>());
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, std::vector<int64_t>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(Engine, AccumulationEqualsOneBigBatchWithoutPython) {
  at::manual_seed(0);
  const at::Tensor x = at::randn({64, 5}), y = at::randint(0, 3, {64});
  const at::Tensor w0 = at::randn({3, 5}) * 0.1;
  auto run = [&](int64_t batch, int64_t accumulate) {
    at::Tensor w = w0.clone().requires_grad_(true);
    EngineConfig config;
    config.accumulate_grad_batches = accumulate;
    config.optimizer.kind = OptimizerKind::kSGD;
    config.optimizer.momentum = 0.0;
    config.schedule.base_lr = 0.5;
    Engine engine({{{w}, 0.0}}, config);
    TensorBatches batches(x, y, batch, false, false, 0, at::kCPU);
    engine.train_epoch(batches, [&](const at::Tensor& inputs, bool) { return at::matmul(inputs, w.t()); }, {}, {});
    return w.detach();
  };
  EXPECT_LE((run(16, 4) - run(64, 1)).abs().max().item<float>(), 1e-6);
}

}  // namespace
}  // namespace gpucore
