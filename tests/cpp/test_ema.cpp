// The weight average without Python: timm's decay by hand, the update after taken steps only, config errors.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>

#include "gpucore/errors.h"
#include "gpucore/train/ema.h"
#include "ops/ema_math.h"

namespace gpucore {
namespace {

TEST(EmaDecay, FirstUpdateCopiesThenWarmupRisesToTheDecay) {
  const ops::EmaParams plain{0.99, false, 1.0, 2.0 / 3.0};
  EXPECT_EQ(ops::ema_decay(plain, 1), 0.0);
  EXPECT_EQ(ops::ema_decay(plain, 2), 0.99);
  const ops::EmaParams warm{0.99, true, 1.0, 2.0 / 3.0};
  EXPECT_DOUBLE_EQ(ops::ema_decay(warm, 2), 1.0 - std::pow(2.0, -2.0 / 3.0));   // about 0.37
  EXPECT_DOUBLE_EQ(ops::ema_decay(warm, 9), 1.0 - std::pow(9.0, -2.0 / 3.0));   // 1 - 1/9^(2/3)
  EXPECT_EQ(ops::ema_decay(warm, 1e7), 0.99);                                    // capped at the decay
  const ops::EmaParams slow{0.999, true, 10.0, 0.75};
  EXPECT_DOUBLE_EQ(ops::ema_decay(slow, 21), 1.0 - std::pow(3.0, -0.75));       // 1 + 20 / 10 = 3
}

TEST(WeightAverage, MovesAfterTakenStepsAndHoldsOnSkippedOnes) {
  at::Tensor average = at::zeros({4}), source = at::full({4}, 2.0);
  at::Tensor count = at::zeros({}, at::kLong), source_count = at::full({}, 7, at::kLong);
  const at::Tensor counters = at::tensor({1.0f, 0.0f, 0.0f});
  const WeightAverage ema(EmaConfig{0.75, false, 1.0, 2.0 / 3.0}, {average, count}, {source, source_count}, counters);
  ema.update();  // update 1: a copy
  EXPECT_TRUE(at::equal(average, source));
  EXPECT_EQ(count.item<int64_t>(), 7);
  source.fill_(6.0);
  counters.copy_(at::tensor({1.0f, 1.0f, 1.0f}));  // the next step skipped
  ema.update();
  EXPECT_TRUE(at::allclose(average, at::full({4}, 2.0)));
  counters.copy_(at::tensor({2.0f, 1.0f, 0.0f}));  // then taken: 2 + (6 - 2) / 4
  ema.update();
  EXPECT_TRUE(at::allclose(average, at::full({4}, 3.0)));
}

// Out of range, a setting fails the core's invariant (config.py gives the user's message first); tensors that do not
// fit the settings are the caller's error.
TEST(WeightAverage, SettingsOutOfRangeFailTheirCheckAndMisfitTensorsAreConfigErrors) {
  const at::Tensor counters = at::zeros({3});
  const at::Tensor x = at::zeros({2});
  EXPECT_THROW(validate(EmaConfig{1.0, false, 1.0, 0.5}), c10::Error);
  EXPECT_THROW(validate(EmaConfig{0.5, true, 0.0, 0.5}), c10::Error);
  EXPECT_THROW(validate(EmaConfig{0.5, true, 1.0, NAN}), c10::Error);
  try {
    validate(EmaConfig{-0.1, false, 1.0, 0.5});
    FAIL() << "no error";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what_without_backtrace()).find("ema_decay must be in [0, 1), got -0.1"),
              std::string::npos);
  }
  EXPECT_THROW(WeightAverage(EmaConfig{0.5, false, 1.0, 0.5}, {}, {}, counters), ConfigError);       // nothing to average
  EXPECT_THROW(WeightAverage(EmaConfig{0.0, false, 1.0, 0.5}, {x}, {x.clone()}, counters), ConfigError);  // off
  EXPECT_THROW(WeightAverage(EmaConfig{0.5, false, 1.0, 0.5}, {x}, {at::zeros({3})}, counters), ConfigError);
  EXPECT_THROW(WeightAverage(EmaConfig{0.5, false, 1.0, 0.5}, {x}, {at::zeros({2}, at::kDouble)}, counters),
               ConfigError);
}

}  // namespace
}  // namespace gpucore
