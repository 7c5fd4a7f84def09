// The photometric transforms: color ops on hand-computed pixels, ColorJitter's draws (a permutation per sample,
// factors in range, repeatable), RandomErasing's boxes and fill, and argument errors naming the entry.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>

#include "gpucore/batches/transforms.h"
#include "gpucore/errors.h"
#include "ops/augment/color.h"
#include "ops/color_math.h"
#include "pipeline_error.h"

using gpucore::TransformPipeline;
using gpucore::TransformSpec;

namespace {

// One RGB pixel through one color op.
std::vector<int64_t> one_pixel(std::vector<uint8_t> rgb, int64_t code, double magnitude) {
  const at::Tensor image = at::tensor(std::vector<int64_t>(rgb.begin(), rgb.end())).to(at::kByte).view({1, 3, 1, 1});
  const at::Tensor out = gpucore::ops::color_ops(image, at::full({1, 1}, code, at::kLong),
                                                 at::full({1, 1}, magnitude, at::kDouble));
  const at::Tensor values = out.flatten().to(at::kLong);
  return std::vector<int64_t>(values.data_ptr<int64_t>(), values.data_ptr<int64_t>() + 3);
}

}  // namespace

TEST(ColorTransforms, ColorOpsOnHandComputedPixels) {
  using namespace gpucore::ops;
  EXPECT_EQ(one_pixel({100, 200, 0}, kColorBrightness, 2.0), (std::vector<int64_t>{200, 255, 0}));
  EXPECT_EQ(one_pixel({0xB7, 0x0F, 0xFF}, kColorPosterize, 3), (std::vector<int64_t>{0xA0, 0x00, 0xE0}));
  EXPECT_EQ(one_pixel({200, 128, 100}, kColorSolarize, 128), (std::vector<int64_t>{55, 127, 100}));
  EXPECT_EQ(one_pixel({0, 1, 255}, kColorInvert, 0), (std::vector<int64_t>{255, 254, 0}));
  // 100 * 0.2989 + 150 * 0.587 + 200 * 0.114 = 140.74, truncated.
  EXPECT_EQ(one_pixel({100, 150, 200}, kColorGrayscale, 0), (std::vector<int64_t>{140, 140, 140}));
  // Saturation 0 is the floored grayscale; hue 0.5 of pure red is cyan.
  EXPECT_EQ(one_pixel({100, 150, 200}, kColorSaturation, 0.0), (std::vector<int64_t>{140, 140, 140}));
  EXPECT_EQ(one_pixel({255, 0, 0}, kColorHue, 0.5), (std::vector<int64_t>{0, 255, 255}));
  EXPECT_EQ(one_pixel({9, 8, 7}, kColorIdentity, 3.0), (std::vector<int64_t>{9, 8, 7}));
}

TEST(ColorTransforms, ColorJitterDrawsAPermutationAndFactorsInRangeRepeatably) {
  const TransformPipeline pipeline({{"ColorJitter", {{"brightness", {0.4}}, {"contrast", {0.5, 1.5}},
                                                     {"saturation", {0.2}}, {"hue", {0.1}}}, {}}}, {}, {});
  at::Generator first = at::detail::createCPUGenerator(5), second = at::detail::createCPUGenerator(5);
  const auto params = pipeline.sample(300, 8, 8, first);
  const auto again = pipeline.sample(300, 8, 8, second);
  ASSERT_EQ(params[0].size(), 2u);
  EXPECT_TRUE(at::equal(params[0][0], again[0][0]) && at::equal(params[0][1], again[0][1]));
  const at::Tensor codes = params[0][0], factors = params[0][1];
  EXPECT_TRUE(at::equal(std::get<0>(codes.sort(1)), at::arange(1, 5).expand({300, 4})));
  const std::array<std::pair<double, double>, 4> ranges{{{0.6, 1.4}, {0.5, 1.5}, {0.8, 1.2}, {-0.1, 0.1}}};
  for (int64_t code = 1; code <= 4; ++code) {
    const at::Tensor values = factors.masked_select(codes == code);
    EXPECT_EQ(values.numel(), 300);
    EXPECT_GE(values.min().item<double>(), ranges[code - 1].first);
    EXPECT_LE(values.max().item<double>(), ranges[code - 1].second);
  }
  EXPECT_FALSE(at::equal(codes.select(1, 0), codes.select(1, 0)[0].expand({300})));  // orders vary
}

TEST(ColorTransforms, RandomErasingFillsItsBoxAfterNormalize) {
  const TransformPipeline pipeline({{"Normalize", {{"mean", {0.0}}, {"std", {1.0}}}, {}},
                                    {"RandomErasing", {{"p", {1.0}}, {"value", {-3.0}}}, {}}}, {}, {});
  at::Generator generator = at::detail::createCPUGenerator(2);
  auto params = pipeline.sample(20, 10, 12, generator);
  const at::Tensor boxes = params[0][0];
  EXPECT_TRUE((boxes.select(1, 0) + boxes.select(1, 2) <= 10).all().item<bool>());
  EXPECT_TRUE((boxes.select(1, 1) + boxes.select(1, 3) <= 12).all().item<bool>());
  const at::Tensor images = at::full({20, 1, 10, 12}, 51, at::kByte);
  at::Tensor masks;
  const at::Tensor out = pipeline.apply(images, params, at::kFloat, masks);
  for (int64_t n = 0; n < 20; ++n) {
    const auto* b = boxes[n].data_ptr<int64_t>();
    const at::Tensor inside = out[n][0].narrow(0, b[0], b[2]).narrow(1, b[1], b[3]);
    EXPECT_TRUE(at::all(inside == -3.0f).item<bool>());
    EXPECT_NEAR((out[n].sum().item<double>() - inside.sum().item<double>()) / (120 - b[2] * b[3] + 1e-9), 0.2, 1e-6);
  }
}

TEST(ColorTransforms, BadArgumentsNameTheEntry) {
  EXPECT_EQ(pipeline_error({{"RandAugment", {{"magnitude", {40}}}, {}}}),
            "transforms[0] RandAugment: argument 'magnitude' must be an integer in [0, num_magnitude_bins - 1] = "
            "[0, 30]");
  EXPECT_EQ(pipeline_error({{"RandomErasing", {}, {{"value", "noise"}}}}),
            "transforms[0] RandomErasing: argument 'value' is 'noise'; valid: random");
  EXPECT_EQ(pipeline_error({{"ColorJitter", {{"hue", {0.6}}}, {}}}),
            "transforms[0] ColorJitter: argument 'hue' values must be increasing and inside [-0.5, 0.5], got "
            "[-0.6, 0.6]");
}
