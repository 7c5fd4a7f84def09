// Mixup and CutMix without Python: the draws' rows, the mix ops against values computed by hand, bad settings.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "gpucore/errors.h"
#include "gpucore/train/mixup.h"
#include "ops/augment/mixup.h"

namespace gpucore {
namespace {

// A row of the mix ops' params (ops/mix_params.h).
at::Tensor row(float self, float partner, float target_self, float target_partner, float y0, float y1, float x0,
               float x1) {
  return at::tensor({self, partner, target_self, target_partner, y0, y1, x0, x1}, at::kFloat).reshape({1, 8});
}

TEST(Mixup, InputsBlendWithTheReversedBatchInsideTheBox) {
  const at::Tensor x = at::randn({3, 2, 4, 5});
  const at::Tensor mixup = row(0.25f, 0.75f, 0.25f, 0.75f, 0, 4, 0, 5).repeat({3, 1});
  EXPECT_TRUE(at::allclose(ops::mix_inputs(x, mixup), x * 0.25 + x.flip(0) * 0.75, 0, 1e-6));
  const at::Tensor cutmix = row(0, 1, 0.7f, 0.3f, 1, 3, 2, 5).repeat({3, 1});
  at::Tensor expected = x.clone();
  expected.slice(2, 1, 3).slice(3, 2, 5).copy_(x.flip(0).slice(2, 1, 3).slice(3, 2, 5));
  EXPECT_TRUE(at::equal(ops::mix_inputs(x, cutmix), expected));
  const at::Tensor channels_last = x.contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor mixed = ops::mix_inputs(channels_last, cutmix);
  EXPECT_TRUE(mixed.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(at::equal(mixed, expected));
}

TEST(Mixup, TargetsAreSmoothedOneHotsMixedByLambda) {
  const at::Tensor labels = at::tensor({2, 0, 1}, at::kLong);
  const at::Tensor rows = row(0.4f, 0.6f, 0.4f, 0.6f, 0, 1, 0, 1).repeat({3, 1});
  const at::Tensor soft = ops::mix_targets(labels, rows, 4, 0.2);
  // off = 0.2 / 4 = 0.05, on = 0.85; sample 0 mixes class 2 with sample 2's class 1.
  const at::Tensor first = at::tensor({0.05f, 0.05f * 0.4f + 0.85f * 0.6f, 0.85f * 0.4f + 0.05f * 0.6f, 0.05f});
  EXPECT_TRUE(at::allclose(soft[0], first, 0, 1e-6));
  EXPECT_TRUE(at::allclose(soft.sum(1), at::ones({3}), 0, 1e-6));
  EXPECT_THROW(ops::mix_targets(at::tensor({0, 4, 1}, at::kLong), rows, 4, 0.0), c10::Error);
}

TEST(Mixup, CutMixLambdaIsTheShareOfTheImageOutsideTheClippedBox) {
  MixupConfig config;
  config.cutmix_alpha = 1.0;
  config.seed = 9;
  for (int64_t batch = 0; batch < 20; ++batch) {
    const at::Tensor rows = draw_mix(config, 0, batch, 4, 12, 10);
    EXPECT_TRUE(at::equal(rows, rows[0].expand_as(rows)));  // batch mode: one draw for all
    const auto r = rows[0];
    const double y0 = r[4].item<double>(), y1 = r[5].item<double>(), x0 = r[6].item<double>(), x1 = r[7].item<double>();
    EXPECT_TRUE(0 <= y0 && y0 <= y1 && y1 <= 12 && 0 <= x0 && x0 <= x1 && x1 <= 10);
    EXPECT_EQ(r[0].item<float>(), 0.0f);
    EXPECT_NEAR(r[2].item<double>(), 1.0 - (y1 - y0) * (x1 - x0) / 120.0, 1e-6);
  }
}

TEST(Mixup, DrawsDependOnSeedEpochAndBatchOnly) {
  MixupConfig config;
  config.mixup_alpha = 0.5;
  config.mode = MixMode::kElem;
  EXPECT_TRUE(at::equal(draw_mix(config, 2, 5, 16, 1, 1), draw_mix(config, 2, 5, 16, 1, 1)));
  EXPECT_FALSE(at::equal(draw_mix(config, 2, 5, 16, 1, 1), draw_mix(config, 2, 6, 16, 1, 1)));
  EXPECT_FALSE(at::equal(draw_mix(config, 2, 5, 16, 1, 1), draw_mix(config, 3, 5, 16, 1, 1)));
}

// Out of range, a setting fails the core's invariant naming its config key (config.py gives the user's message first).
TEST(Mixup, SettingsOutOfRangeFailTheirCheckNamingTheKey) {
  const auto message = [](MixupConfig config) {
    try {
      validate(config);
    } catch (const c10::Error& error) {
      return std::string(error.what_without_backtrace());
    }
    return std::string();
  };
  MixupConfig config;
  config.mixup_alpha = -1;
  EXPECT_EQ(message(config), "mixup_alpha must be >= 0, got -1");
  config = {};
  config.switch_prob = 2;
  EXPECT_EQ(message(config), "mixup_switch_prob must be in [0, 1], got 2");
  config = {};
  config.cutmix_minmax = {0.6, 0.3};
  EXPECT_EQ(message(config), "cutmix_minmax must be empty or two numbers in (0, 1], min < max, got [0.6, 0.3]");
  EXPECT_THROW(parse_mix_mode("rows"), ConfigError);
}

}  // namespace
}  // namespace gpucore
