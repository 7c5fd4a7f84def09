// The colour-op and erase launchers (ops/cuda/color_kernels.h) against the CPU kernels of their ops
// (kernels_against_cpu.h).
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "kernels_against_cpu.h"
#include "ops/augment/color.h"
#include "ops/color_math.h"
#include "ops/cuda/color_kernels.h"

namespace gpucore::ops {
namespace {

// A valid magnitude for each code (check_color_values' ranges).
at::Tensor color_magnitudes(const at::Tensor& codes, Random& random) {
  at::Tensor magnitudes = random.uniform(codes.sizes(), 0.0, 2.0, at::kDouble);
  const at::Tensor hue = random.uniform(codes.sizes(), -0.5, 0.5, at::kDouble);
  const at::Tensor bits = random.integers(codes.sizes(), 0, 9).to(at::kDouble);
  const at::Tensor threshold = random.uniform(codes.sizes(), 0.0, 255.0, at::kDouble);
  magnitudes = at::where(codes == kColorHue, hue, magnitudes);
  magnitudes = at::where(codes == kColorPosterize, bits, magnitudes);
  return at::where(codes == kColorSolarize, threshold, magnitudes);
}

TEST_F(KernelsAgainstCpu, ColorOps) {
  Random random(6);
  struct Case {
    std::vector<int64_t> shape;
    int64_t steps;
  };
  // Planes below and past a block, 1 and 3 channels, an image too small to sharpen, one pixel, no steps, no images.
  const std::vector<Case> cases = {{{3, 3, 23, 19}, 6}, {{2, 1, 17, 31}, 5}, {{2, 3, 2, 5}, 4}, {{1, 3, 1, 1}, 4},
                                   {{2, 3, 6, 6}, 0},   {{0, 3, 4, 4}, 3},   {{1, 3, 48, 40}, 3}};
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_name(c.shape) + " steps " + std::to_string(c.steps));
    const int64_t n = c.shape[0];
    // Each image runs every op once in an order of its own, then `steps` random ones.
    at::Tensor codes = at::empty({n, 0}, at::kLong);
    if (c.steps > 0) {
      std::vector<at::Tensor> orders = {at::empty({0, kColorOpCount}, at::kLong)};
      for (int64_t i = 0; i < n; ++i) orders.push_back(random.permutation(kColorOpCount).unsqueeze(0));
      codes = at::cat({at::cat(orders), random.integers({n, c.steps}, 0, kColorOpCount)}, 1);
    }
    const at::Tensor magnitudes = color_magnitudes(codes, random);
    const at::Tensor images = random.images(c.shape, at::kByte);
    const at::Tensor expected = color_ops(images, codes, magnitudes);
    const DeviceCopy out(images), scratch(at::empty_like(images)), code(codes), magnitude(magnitudes);
    cuda::launch_color_ops(out.get<uint8_t>(), scratch.get<uint8_t>(), code.get<int64_t>(), magnitude.get<double>(), n,
                           codes.size(1), c.shape[1], c.shape[2], c.shape[3], nullptr);
    expect_ran();
    expect_bitwise_equal(out.host(), expected);
  }
}

TEST_F(KernelsAgainstCpu, Erase) {
  Random random(7);
  const std::vector<std::vector<int64_t>> shapes = {{3, 3, 13, 11}, {1, 1, 1, 1}, {2, 2, 40, 30}, {0, 3, 4, 4}};
  const DtypePairs dtypes = {{at::kFloat, cuda::KernelDtype::kFloat32},
                             {at::kDouble, cuda::KernelDtype::kFloat64},
                             {at::kHalf, cuda::KernelDtype::kFloat16},
                             {at::kBFloat16, cuda::KernelDtype::kBFloat16}};
  expect_every_listed_dtype(dtypes, cuda::EraseDtypes::values);
  for (const auto& [dtype, launch_type] : dtypes) {
    for (const bool noise : {false, true}) {
      for (const auto& shape : shapes) {
        SCOPED_TRACE(shape_name(shape) + " " + c10::toString(dtype) + (noise ? " noise" : " fill"));
        const int64_t n = shape[0], channels = shape[1], h = shape[2], w = shape[3];
        at::Tensor boxes = at::empty({n, 4}, at::kLong);
        for (int64_t i = 0; i < n; ++i) {  // the first box the whole image, the others anywhere, empty ones too
          const int64_t top = i == 0 ? 0 : random.integer(0, h + 1), left = i == 0 ? 0 : random.integer(0, w + 1);
          const int64_t height = i == 0 ? h : random.integer(0, h - top + 1);
          const int64_t width = i == 0 ? w : random.integer(0, w - left + 1);
          boxes[i] = at::tensor({top, left, height, width});
        }
        const at::Tensor images = random.images(shape, dtype);
        const std::optional<at::Tensor> fill =
            noise ? std::nullopt : std::optional<at::Tensor>(random.uniform({n, channels}, -2.0, 2.0));
        const std::optional<at::Tensor> seeds =
            noise ? std::optional<at::Tensor>(random.integers({n}, 0, int64_t{1} << 40)) : std::nullopt;
        const at::Tensor expected = erase(images, boxes, fill, seeds);
        const DeviceCopy out(images), box(boxes), fill_values(fill.value_or(at::zeros({1}))),
            seed_values(seeds.value_or(at::zeros({1}, at::kLong)));
        cuda::launch_erase(out.get(), launch_type, box.get<int64_t>(), noise ? nullptr : fill_values.get<float>(),
                           noise ? seed_values.get<int64_t>() : nullptr, n, channels, h, w, nullptr);
        expect_ran();
        expect_bitwise_equal(out.host(), expected);
      }
    }
  }
}

}  // namespace
}  // namespace gpucore::ops
