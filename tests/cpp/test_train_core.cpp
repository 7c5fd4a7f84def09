// The training core without Python: schedules, loss scaling, the fused optimizer's skip, batches, metrics.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include <map>
#include <string>
#include <vector>

#include "gpucore/batches/batches.h"
#include "gpucore/errors.h"
#include "gpucore/train/engine.h"
#include "gpucore/train/grad_scaler.h"
#include "gpucore/train/losses.h"
#include "gpucore/train/metrics.h"
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
  config.kind = ScheduleKind::kConstant;
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

TEST(Schedule, SettingsOutOfRangeFailTheirCheckAndSettingsThatDoNotFitTogetherAreConfigErrors) {
  ScheduleConfig config;
  config.kind = ScheduleKind::kConstant;
  config.base_lr = 0;
  EXPECT_THROW(validate(config), c10::Error);  // config.py's range of lr
  config.base_lr = 0.1;
  config.min_lr = 0.2;
  EXPECT_THROW(validate(config), ConfigError);
  config.min_lr = 0.0;
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

TEST(TensorBatches, SamplingWeightsDrawTheOrderAsMultinomialFromTheShufflesGeneratorAndResumeMidEpoch) {
  const at::Tensor x = at::arange(12).to(at::kFloat).unsqueeze(1);
  const at::Tensor y = at::arange(12);
  const at::Tensor weights = at::rand({12}, at::kDouble) + 0.1;
  TensorBatches whole(x, y, 5, true, false, 3, at::kCPU);
  whole.set_sampling_weights(weights);
  whole.start_epoch(2);
  std::vector<at::Tensor> served;
  at::Tensor inputs, targets;
  while (whole.next(inputs, targets)) served.push_back(targets.clone());
  const at::Tensor expected =
      at::multinomial(weights, 12, /*replacement=*/true, at::detail::createCPUGenerator(3 * 1000003ULL + 2));
  EXPECT_TRUE(at::equal(at::cat(served), expected));
  TensorBatches resumed(x, y, 5, true, false, 3, at::kCPU);  // from batch 1 on: the same samples
  resumed.set_sampling_weights(weights);
  resumed.start_epoch(2, 1);
  ASSERT_TRUE(resumed.next(inputs, targets));
  EXPECT_TRUE(at::equal(targets, served[1]));
}

TEST(TensorBatches, SamplingWeightsMustBeOneFiniteNonNegativeFloat64PerSample) {
  TensorBatches batches(at::zeros({4, 1}), at::arange(4), 2, true, false, 0, at::kCPU);
  EXPECT_THROW(batches.set_sampling_weights(at::ones({3}, at::kDouble)), ConfigError);
  EXPECT_THROW(batches.set_sampling_weights(at::ones({4}, at::kFloat)), ConfigError);
  EXPECT_THROW(batches.set_sampling_weights(at::tensor({1.0, -1.0, 1.0, 1.0}, at::kDouble)), ConfigError);
  EXPECT_THROW(batches.set_sampling_weights(at::tensor({1.0, NAN, 1.0, 1.0}, at::kDouble)), ConfigError);
  EXPECT_THROW(batches.set_sampling_weights(at::zeros({4}, at::kDouble)), ConfigError);
}

TEST(Losses, CrossEntropyWeighsClassesAsTorchsWeight) {
  const at::Tensor output = at::randn({9, 4});
  const at::Tensor target = at::randint(0, 4, {9});
  LossConfig config;
  config.class_weights = at::rand({4}) + 0.1;
  const at::Tensor per_sample = at::cross_entropy_loss(output, target, {}, at::Reduction::None);
  const at::Tensor w = config.class_weights.index_select(0, target);
  EXPECT_NEAR(compute_loss(config, output, target).item<double>(), ((w * per_sample).sum() / w.sum()).item<double>(),
              1e-6);
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
    config.schedule.kind = ScheduleKind::kConstant;
    config.schedule.base_lr = 0.5;
    Engine engine({{{w}, 0.0}}, config);
    TensorBatches batches(x, y, batch, false, false, 0, at::kCPU);
    engine.train_epoch(batches, [&](const at::Tensor& inputs, bool) { return at::matmul(inputs, w.t()); }, {}, {});
    return w.detach();
  };
  EXPECT_LE((run(16, 4) - run(64, 1)).abs().max().item<float>(), 1e-6);
}


// ---- metrics ------------------------------------------------------------------------------------------------

LossConfig loss_of(LossKind kind, int64_t heads = 0) {
  LossConfig loss;
  loss.kind = kind;
  loss.heads = heads;
  return loss;
}

// The names of a read.
std::vector<std::string> names_of(const std::map<std::string, double>& metrics) {
  std::vector<std::string> names;
  for (const auto& [name, value] : metrics) names.push_back(name);
  return names;
}

std::vector<std::string> sorted(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  return names;
}

double share_of(const at::Tensor& hits) { return hits.to(at::kDouble).mean().item<double>(); }

// Two batches of 6 and 3 samples (the loss a weighted mean of theirs) through a tracker; read() against the
// reported names and against each value computed here from the outputs.
struct TrackedRun {
  std::map<std::string, double> metrics;
  at::Tensor output, target;  // both batches, concatenated
};

TrackedRun track(const LossConfig& loss, int64_t top_k, const at::Tensor& output, const at::Tensor& target) {
  MetricTracker tracker(loss, top_k, at::kCPU);
  EXPECT_TRUE(tracker.read().empty()) << "nothing counted yet";
  tracker.update(output.slice(0, 0, 6), target.slice(0, 0, 6), at::scalar_tensor(0.5, at::kFloat));
  tracker.update(output.slice(0, 6), target.slice(0, 6), at::scalar_tensor(1.25, at::kFloat));
  const std::map<std::string, double> metrics = tracker.read();
  EXPECT_DOUBLE_EQ(metrics.at("loss"), (0.5 * 6 + 1.25 * 3) / 9);
  tracker.reset();
  EXPECT_TRUE(tracker.read().empty()) << "after reset";
  return {metrics, output, target};
}

TEST(MetricTracker, ReadReportsExactlyTheReportedNamesWithTheirValues) {
  at::manual_seed(3);
  for (const int64_t top_k : {0, 1, 3}) {
    SCOPED_TRACE("cross_entropy top " + std::to_string(top_k));
    const LossConfig loss = loss_of(LossKind::kCrossEntropy);
    const TrackedRun run = track(loss, top_k, at::randn({9, 5}), at::randint(0, 5, {9}));
    // A training tracker (no per-class counts): the training split's names.
    EXPECT_EQ(names_of(run.metrics), sorted(reported_metrics(loss, top_k, /*training=*/true)));
    EXPECT_DOUBLE_EQ(run.metrics.at("accuracy"), share_of(run.output.argmax(1) == run.target));
    if (top_k > 0) {
      const at::Tensor in_top_k = (std::get<1>(run.output.topk(top_k)) == run.target.unsqueeze(1)).any(1);
      EXPECT_DOUBLE_EQ(run.metrics.at("top" + std::to_string(top_k) + "_accuracy"), share_of(in_top_k));
    }
  }
  {
    SCOPED_TRACE("ctc");
    const LossConfig loss = loss_of(LossKind::kCTC);
    // Greedy paths over 5 steps (repeats collapse, blank 0 dropped) and targets padded with -1: 6 of 9 right.
    const std::vector<std::vector<int64_t>> paths = {{1, 1, 0, 2, 2}, {3, 0, 3, 0, 0}, {0, 0, 0, 0, 0},
                                                     {1, 2, 3, 3, 3}, {2, 0, 0, 0, 1}, {4, 4, 4, 4, 4},
                                                     {1, 1, 0, 2, 2}, {3, 0, 3, 0, 0}, {2, 2, 2, 2, 2}};
    const at::Tensor target = at::tensor({1, 2, -1, 3, 3, -1, 1, -1, -1, 1, 2, 3, 2, 1, -1, 4, -1, -1,
                                          1, 2, -1, 3, -1, -1, 2, 2, -1}, at::kLong).reshape({9, 3});
    at::Tensor output = at::zeros({9, 5, 5});
    for (int64_t i = 0; i < 9; ++i) {
      for (int64_t t = 0; t < 5; ++t) output[i][t][paths[i][t]] = 1.0;
    }
    const TrackedRun run = track(loss, 0, output, target);
    EXPECT_EQ(names_of(run.metrics), sorted(reported_metrics(loss, 0, /*training=*/true)));
    EXPECT_DOUBLE_EQ(run.metrics.at("seq_accuracy"), 6.0 / 9);  // wrong: samples 2 (empty), 7 ([3, 3]), 8 ([2])
  }
  {
    SCOPED_TRACE("multilabel_soft_margin, 3 heads of 4 classes");
    const LossConfig loss = loss_of(LossKind::kMultiLabelSoftMargin, 3);
    const TrackedRun run = track(loss, 0, at::randn({9, 12}), at::randint(0, 4, {9, 3}));
    EXPECT_EQ(names_of(run.metrics), sorted(reported_metrics(loss, 0, /*training=*/true)));
    const at::Tensor hits = run.output.reshape({9, 3, 4}).argmax(-1) == run.target;
    EXPECT_DOUBLE_EQ(run.metrics.at("char_accuracy"), share_of(hits));
    EXPECT_DOUBLE_EQ(run.metrics.at("seq_accuracy"), share_of(hits.all(1)));
  }
  for (const LossKind kind : {LossKind::kBCEWithLogits, LossKind::kDiceBCE}) {
    SCOPED_TRACE(to_string(kind));
    const LossConfig loss = loss_of(kind);
    const TrackedRun run = track(loss, 3, at::randn({9, 1, 4, 4}), (at::rand({9, 1, 4, 4}) > 0.5).to(at::kFloat));
    std::vector<std::string> expected = reported_metrics(loss, 3, /*training=*/true);
    // per-pixel outputs: no sets of labels per sample (std::remove: torch 2.11 builds gpucore as C++17)
    expected.erase(std::remove(expected.begin(), expected.end(), "subset_accuracy"), expected.end());
    EXPECT_EQ(names_of(run.metrics), sorted(expected));
    const at::Tensor predicted = run.output > 0, truth = run.target > 0.5;
    const double inter = (predicted & truth).sum().item<double>();
    EXPECT_DOUBLE_EQ(run.metrics.at("accuracy"), share_of(predicted == truth));
    EXPECT_DOUBLE_EQ(run.metrics.at("iou"), inter / (predicted | truth).sum().item<double>());
    EXPECT_DOUBLE_EQ(run.metrics.at("dice"), 2 * inter / (predicted.sum() + truth.sum()).item<double>());
  }
}

// What reported_metrics lists is what read() may report: a metric the batches gave nothing to count is left out.
TEST(MetricTracker, ReadLeavesOutWhatTheBatchesCouldNotCount) {
  at::manual_seed(4);
  // Top-5 of 5 classes: not computed.
  EXPECT_EQ(names_of(track(loss_of(LossKind::kCrossEntropy), 5, at::randn({9, 5}), at::randint(0, 5, {9})).metrics),
            (std::vector<std::string>{"accuracy", "loss"}));
  // Soft labels: no accuracy.
  EXPECT_EQ(names_of(track(loss_of(LossKind::kCrossEntropy), 3, at::randn({9, 5}), at::rand({9, 5})).metrics),
            (std::vector<std::string>{"loss"}));
  // Multi-label without heads: the label metrics, as listed for training (the macro F1 needs an evaluation).
  const LossConfig no_heads = loss_of(LossKind::kMultiLabelSoftMargin);
  EXPECT_EQ(names_of(track(no_heads, 0, at::randn({9, 6}), (at::rand({9, 6}) > 0.5).to(at::kFloat)).metrics),
            sorted(reported_metrics(no_heads, 0, /*training=*/true)));
  // Nothing predicted and nothing true: IoU and Dice of an empty mask are 1.
  const TrackedRun empty = track(loss_of(LossKind::kDiceBCE), 0, -at::rand({9, 1, 4, 4}) - 1, at::zeros({9, 1, 4, 4}));
  EXPECT_EQ(empty.metrics.at("iou"), 1.0);
  EXPECT_EQ(empty.metrics.at("dice"), 1.0);
  EXPECT_EQ(empty.metrics.at("accuracy"), 1.0);
}

// The alignment's edits by hand: "1 2 3 4" read as "1 5 3" is a substitution (2 -> 5) and a deletion (4); "2 2" read
// as "2 2 2 9" two insertions; the backtrace from the end prefers a substitution to a deletion and an insertion.
TEST(WordEdits, ListTheEditsOfAMinimalAlignment) {
  const auto kinds = [](const std::vector<WordEdit>& edits) {
    std::string out;
    for (const WordEdit& edit : edits) out += edit.kind;
    return out;
  };
  const std::vector<WordEdit> edits = word_edits({1, 2, 3, 4}, {1, 5, 3});
  ASSERT_EQ(kinds(edits), "sd");
  EXPECT_EQ(edits[0].reference, 1);
  EXPECT_EQ(edits[0].hypothesis, 1);
  EXPECT_EQ(edits[1].reference, 3);
  EXPECT_EQ(edits[1].hypothesis, -1);
  EXPECT_EQ(kinds(word_edits({2, 2}, {2, 2, 2, 9})), "ii");
  EXPECT_EQ(kinds(word_edits({7, 8}, {8, 9})), "ss");
  EXPECT_EQ(kinds(word_edits({}, {3})), "i");
  EXPECT_EQ(kinds(word_edits({3}, {})), "d");
  EXPECT_TRUE(word_edits({4, 5, 6}, {4, 5, 6}).empty());
}

}  // namespace
}  // namespace gpucore
