// The augment launcher (ops/cuda/augment_kernels.h) against the CPU kernel of its op (kernels_against_cpu.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kernels_against_cpu.h"
#include "ops/augment/augment.h"
#include "ops/cuda/augment_kernels.h"

namespace gpucore::ops {
namespace {

TEST_F(KernelsAgainstCpu, Augment) {
  Random random(1);
  const std::vector<std::vector<int64_t>> shapes = {{3, 3, 17, 13}, {1, 1, 1, 1}, {0, 3, 8, 8}, {2, 8, 9, 7}};
  const DtypePairs out_types = {{at::kFloat, cuda::KernelDtype::kFloat32},
                                {at::kHalf, cuda::KernelDtype::kFloat16},
                                {at::kBFloat16, cuda::KernelDtype::kBFloat16}};
  expect_every_listed_dtype(out_types, cuda::AugmentOutDtypes::values);
  for (const at::ScalarType in_type : {at::kByte, at::kFloat}) {
    for (const auto& [out_type, launch_type] : out_types) {
      for (const auto& shape : shapes) {
        SCOPED_TRACE(shape_name(shape) + " " + c10::toString(in_type) + " to " + c10::toString(out_type));
        // Crop corners up to a third of the image (at least a pixel: a 1 x 1 image shifted out entirely) away.
        const int64_t n = shape[0], channels = shape[1], reach = shape[2] / 3 + 1;
        const at::Tensor images = random.images(shape, in_type);
        const at::Tensor offsets = random.integers({n, 2}, -reach, reach + 1);
        const at::Tensor flips = random.integers({n}, 0, 2, at::kBool);
        std::vector<double> mean(channels), std(channels);
        for (int64_t c = 0; c < channels; ++c) mean[c] = 0.1 * c + 0.2, std[c] = 0.05 * c + 0.25;
        const at::Tensor expected = augment(images, offsets, flips, mean, std, out_type);
        std::vector<float> scale, shift;
        augment_affine(images, mean, std, scale, shift);
        cuda::ChannelAffine affine{};
        std::copy(scale.begin(), scale.end(), affine.scale);
        std::copy(shift.begin(), shift.end(), affine.shift);
        const DeviceCopy in(images), offset(offsets), flip(flips), out(at::empty(shape, out_type));
        cuda::launch_augment(in.get(), in_type == at::kByte, offset.get<int64_t>(), flip.get<bool>(), out.get(),
                             launch_type, n, channels, shape[2], shape[3], affine, nullptr);
        expect_ran();
        expect_bitwise_equal(out.host(), expected);
      }
    }
  }
}

}  // namespace
}  // namespace gpucore::ops
