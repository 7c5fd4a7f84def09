// The geometry launchers (ops/cuda/geometry_kernels.h: crop, resized_crop, affine) against the CPU kernels of
// their ops (kernels_against_cpu.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kernels_against_cpu.h"
#include "ops/cuda/geometry_kernels.h"
#include "ops/augment/geometry.h"
#include "ops/resample_math.h"

namespace gpucore::ops {
namespace {

cuda::ChannelFill channel_fill(const std::vector<double>& fill, int64_t channels) {
  cuda::ChannelFill values{};
  const std::vector<float> per_channel = fill_per_channel(fill, channels);
  std::copy(per_channel.begin(), per_channel.end(), values.value);
  return values;
}

struct GeometryCase {
  std::vector<int64_t> shape;  // N, C, H, W
  std::vector<int64_t> size;   // the output's H, W
};
// Outputs smaller and larger than the image, one pixel, no images, the most channels the kernels take.
const std::vector<GeometryCase> kGeometryCases = {{{3, 3, 17, 13}, {11, 15}}, {{1, 1, 1, 1}, {1, 1}},
                                                  {{2, 1, 9, 12}, {31, 29}},  {{0, 3, 5, 5}, {3, 3}},
                                                  {{1, cuda::kGeometryMaxChannels, 9, 9}, {20, 20}}};

TEST_F(KernelsAgainstCpu, Crop) {
  Random random(9);
  for (const at::ScalarType dtype : {at::kByte, at::kFloat}) {
    for (const GeometryCase& c : kGeometryCases) {
      SCOPED_TRACE(shape_name(c.shape) + " to " + shape_name(c.size) + " " + c10::toString(dtype));
      const int64_t n = c.shape[0], channels = c.shape[1], h = c.shape[2], w = c.shape[3];
      // Offsets reaching past every side, so the fill shows.
      const at::Tensor offsets =
          at::stack({random.integers({n}, -c.size[0], h + 1), random.integers({n}, -c.size[1], w + 1)}, 1);
      const at::Tensor flips = random.integers({n, 2}, 0, 2, at::kBool);
      std::vector<double> fill;
      for (int64_t i = 0; i < channels; ++i) fill.push_back(static_cast<double>(random.integer(0, 256)));
      const at::Tensor images = random.images(c.shape, dtype);
      const at::Tensor expected = crop(images, offsets, flips, c.size, fill);
      const DeviceCopy in(images), offset(offsets), flip(flips),
          out(at::empty({n, channels, c.size[0], c.size[1]}, dtype));
      cuda::launch_crop(in.get(), dtype == at::kByte, offset.get<int64_t>(), flip.get<bool>(), out.get(), n, channels,
                        h, w, c.size[0], c.size[1], channel_fill(fill, channels), nullptr);
      expect_ran();
      expect_bitwise_equal(out.host(), expected);
    }
  }
}

TEST_F(KernelsAgainstCpu, ResizedCrop) {
  Random random(10);
  for (const at::ScalarType dtype : {at::kByte, at::kFloat}) {
    for (const auto& [interpolation, antialias] :
         {std::pair{"nearest", false}, {"bilinear", false}, {"bilinear", true}}) {
      for (const GeometryCase& c : kGeometryCases) {
        SCOPED_TRACE(shape_name(c.shape) + " to " + shape_name(c.size) + " " + c10::toString(dtype) + " " +
                     interpolation + (antialias ? " antialias" : ""));
        const int64_t n = c.shape[0], channels = c.shape[1], h = c.shape[2], w = c.shape[3];
        at::Tensor boxes = at::empty({n, 4}, at::kLong);
        for (int64_t i = 0; i < n; ++i) {
          const int64_t top = random.integer(0, h), left = random.integer(0, w);
          boxes[i] = at::tensor({top, left, random.integer(1, h - top + 1), random.integer(1, w - left + 1)});
        }
        const at::Tensor images = random.images(c.shape, dtype);
        const at::Tensor expected = resized_crop(images, boxes, c.size, interpolation, antialias);
        const DeviceCopy in(images), box(boxes), out(at::empty({n, channels, c.size[0], c.size[1]}, dtype));
        cuda::launch_resized_crop(in.get(), dtype == at::kByte, box.get<int64_t>(), out.get(), n, channels, h, w,
                                  c.size[0], c.size[1], std::string(interpolation) == "bilinear", antialias, nullptr);
        expect_ran();
        if (std::string(interpolation) == "nearest") {
          expect_bitwise_equal(out.host(), expected);
        } else if (dtype == at::kByte) {
          expect_close(out.host(), expected, 0.0, 1.0);  // one intensity level, as against torchvision (README)
        } else {
          expect_close(out.host(), expected, 1e-5, 1e-5);
        }
      }
    }
  }
}

// Whether the CPU kernel's grid (torch's bmm) equals the CUDA kernel's, which rounds each product: on every CPU seen but
// those where MKL fuses a product into the sum.
bool grids_agree(const at::Tensor& matrices, int64_t h, int64_t w) {
  const at::Tensor grids = affine_grids(matrices.data_ptr<float>(), matrices.size(0), h, w);
  const float* m = matrices.data_ptr<float>();
  const float* g = grids.data_ptr<float>();
  for (int64_t i = 0; i < matrices.size(0); ++i, m += 6) {
    for (int64_t p = 0; p < h * w; ++p, g += 2) {
      const float bx = static_cast<float>(p % w) - (static_cast<float>(w) - 1.0f) * 0.5f;
      const float by = static_cast<float>(p / w) - (static_cast<float>(h) - 1.0f) * 0.5f;
      const float half_w = 0.5f * static_cast<float>(w), half_h = 0.5f * static_cast<float>(h);
      if (g[0] != resample::affine_grid_value(bx, by, m[0] / half_w, m[1] / half_w, m[2] / half_w) ||
          g[1] != resample::affine_grid_value(bx, by, m[3] / half_h, m[4] / half_h, m[5] / half_h)) {
        return false;
      }
    }
  }
  return true;
}

TEST_F(KernelsAgainstCpu, Affine) {
  Random random(11);
  for (const at::ScalarType dtype : {at::kByte, at::kFloat}) {
    for (const std::string interpolation : {"nearest", "bilinear"}) {
      for (const bool has_fill : {false, true}) {
        for (const GeometryCase& c : kGeometryCases) {
          SCOPED_TRACE(shape_name(c.shape) + " " + c10::toString(dtype) + " " + interpolation +
                       (has_fill ? " fill" : ""));
          const int64_t n = c.shape[0], channels = c.shape[1];
          // Rotation, scale, shear and translation as torchvision's inverse matrices: anything invertible.
          const at::Tensor angles = random.uniform({n}, -3.2, 3.2), scales = random.uniform({n}, 0.5, 1.6);
          const at::Tensor shear = random.uniform({n}, -0.3, 0.3);
          const at::Tensor matrices =
              at::stack({scales * angles.cos(), -scales * angles.sin() + shear, random.uniform({n}, -4.0, 4.0),
                         scales * angles.sin(), scales * angles.cos(), random.uniform({n}, -4.0, 4.0)},
                        1)
                  .contiguous();
          std::vector<double> fill;
          if (has_fill) {
            for (int64_t i = 0; i < channels; ++i) fill.push_back(static_cast<double>(random.integer(0, 256)));
          }
          const at::Tensor images = random.images(c.shape, dtype);
          const at::Tensor expected = affine(images, matrices, interpolation, fill);
          const DeviceCopy in(images), matrix(matrices), out(at::empty_like(images));
          cuda::launch_affine(in.get(), dtype == at::kByte, matrix.get<float>(), out.get(), n, channels, c.shape[2],
                              c.shape[3], interpolation == "bilinear", has_fill, channel_fill(fill, channels), nullptr);
          expect_ran();
          if (grids_agree(matrices, c.shape[2], c.shape[3])) {
            expect_bitwise_equal(out.host(), expected);
          } else if (interpolation == "bilinear") {
            // A grid a few bits apart moves each weight by a few ulps of the source coordinate, and the value by that
            // times the largest step between neighbours, the fill's included (measured on an H100: 1.5e-5 with fill).
            double low = images.min().item<double>(), high = images.max().item<double>();
            for (const double f : fill) low = std::min(low, f), high = std::max(high, f);
            const double coordinate_ulps = 4.0 * static_cast<double>(std::max(c.shape[2], c.shape[3])) * 0x1p-23;
            expect_close(out.host(), expected, 0.0, dtype == at::kByte ? 1.0 : 2.0 * coordinate_ulps * (high - low));
          } else {  // a nearest pick may flip where a source coordinate is a tie: a few values only
            EXPECT_LT(out.host().ne(expected).sum().item<int64_t>(), std::max<int64_t>(2, images.numel() / 100));
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace gpucore::ops
