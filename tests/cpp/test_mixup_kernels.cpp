// The mixup and cutmix launchers (ops/cuda/mixup_kernels.h) against the CPU kernels of their ops
// (kernels_against_cpu.h).
#include <gtest/gtest.h>

#include <vector>

#include "kernels_against_cpu.h"
#include "ops/cuda/mixup_kernels.h"
#include "ops/augment/mixup.h"

namespace gpucore::ops {
namespace {

// Rows of mix params: weights lam and 1 - lam, boxes anywhere in (or all of) an H x W image.
at::Tensor mix_params(int64_t n, int64_t h, int64_t w, Random& random) {
  at::Tensor params = at::empty({n, kMixParams});
  for (int64_t i = 0; i < n; ++i) {
    const float lam = random.uniform({}, 0.0, 1.0).item<float>();
    const float target_lam = random.uniform({}, 0.0, 1.0).item<float>();
    const int64_t y0 = random.integer(0, h + 1), x0 = random.integer(0, w + 1);
    const bool whole = i % 3 == 0;
    params[i] = at::tensor({lam, 1.0f - lam, target_lam, 1.0f - target_lam, whole ? 0.0f : static_cast<float>(y0),
                            whole ? static_cast<float>(h) : static_cast<float>(random.integer(y0, h + 1)),
                            whole ? 0.0f : static_cast<float>(x0),
                            whole ? static_cast<float>(w) : static_cast<float>(random.integer(x0, w + 1))});
  }
  return params;
}

TEST_F(KernelsAgainstCpu, MixInputs) {
  Random random(12);
  struct Case {
    std::vector<int64_t> shape;
    bool channels_last;
  };
  // N x C x H x W in both layouts, N x D and N x H x W, one sample (its own partner), none.
  const std::vector<Case> cases = {{{4, 3, 7, 9}, false}, {{3, 3, 5, 6}, true}, {{5, 37}, false},
                                   {{2, 11, 13}, false},  {{1, 2, 3, 3}, false}, {{0, 3, 4, 4}, false}};
  const DtypePairs dtypes = {{at::kFloat, cuda::KernelDtype::kFloat32},
                             {at::kDouble, cuda::KernelDtype::kFloat64},
                             {at::kHalf, cuda::KernelDtype::kFloat16},
                             {at::kBFloat16, cuda::KernelDtype::kBFloat16}};
  expect_every_listed_dtype(dtypes, cuda::MixDtypes::values);
  for (const auto& [dtype, launch_type] : dtypes) {
    for (const Case& c : cases) {
      SCOPED_TRACE(shape_name(c.shape) + " " + c10::toString(dtype) + (c.channels_last ? " channels-last" : ""));
      at::Tensor inputs = random.uniform(c.shape, -2.0, 2.0, dtype);
      if (c.channels_last) inputs = inputs.contiguous(at::MemoryFormat::ChannelsLast);
      const at::Tensor images = mix_images_view(inputs);
      const at::Tensor params = mix_params(images.size(0), images.size(2), images.size(3), random);
      const at::Tensor expected = mix_inputs(inputs, params);
      const DeviceCopy in(inputs), out(at::empty_like(inputs)), rows(params);
      const at::Tensor out_images = mix_images_view(at::empty_like(inputs));
      cuda::MixShape shape{};
      for (int d = 0; d < 4; ++d) {
        shape.size[d] = images.size(d);
        shape.in_stride[d] = images.stride(d);
        shape.out_stride[d] = out_images.stride(d);
      }
      cuda::launch_mix_inputs(in.get(), out.get(), launch_type, shape, rows.get<float>(), nullptr);
      expect_ran();
      const at::Tensor result = out.host();
      EXPECT_EQ(result.strides(), expected.strides());
      expect_bitwise_equal(result, expected);
    }
  }
}

TEST_F(KernelsAgainstCpu, MixTargets) {
  Random random(13);
  const std::vector<std::pair<int64_t, int64_t>> cases = {{5, 10}, {1, 1}, {0, 4}, {3, 1000}};  // N, classes
  for (const double smoothing : {0.0, 0.1}) {
    for (const auto& [n, classes] : cases) {
      SCOPED_TRACE(std::to_string(n) + " x " + std::to_string(classes) + " smoothing " + std::to_string(smoothing));
      const at::Tensor labels = random.integers({n}, 0, classes), params = mix_params(n, 1, 1, random);
      const at::Tensor expected = mix_targets(labels, params, classes, smoothing);
      // on and off as the CUDA op computes them (mixup_cuda.cpp).
      const auto off = static_cast<float>(smoothing / static_cast<double>(classes));
      const auto on = static_cast<float>(1.0 - smoothing + smoothing / static_cast<double>(classes));
      const DeviceCopy label(labels), rows(params), out(at::empty({n, classes}));
      cuda::launch_mix_targets(label.get<int64_t>(), rows.get<float>(), out.get<float>(), n, classes, on, off, nullptr);
      expect_ran();
      expect_bitwise_equal(out.host(), expected);
    }
  }
}

}  // namespace
}  // namespace gpucore::ops
