// write_shifted_plane (ops/cpu/shifted_plane.h), the row runs of the CPU crop and augment kernels, against the
// pixel-by-pixel definition on random sizes, shifts far inside and far outside the image, and every flip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "ops/cpu/shifted_plane.h"

namespace {

int plain_pixel(const std::vector<int>& source, int64_t h, int64_t w, int64_t oh, int64_t ow, int64_t top,
                int64_t left, bool vertical, bool horizontal, int64_t y, int64_t x, int outside) {
  const int64_t sy = top + (vertical ? oh - 1 - y : y), sx = left + (horizontal ? ow - 1 - x : x);
  return sy >= 0 && sy < h && sx >= 0 && sx < w ? source[sy * w + sx] : outside;
}

TEST(ShiftedPlane, EqualsThePixelByPixelMapping) {
  std::mt19937 random(7);
  const auto between = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(random); };
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t h = between(1, 9), w = between(1, 9), oh = between(1, 9), ow = between(1, 9);
    const int64_t top = between(-12, 12), left = between(-12, 12);
    const bool vertical = between(0, 1) == 1, horizontal = between(0, 1) == 1;
    std::vector<int> source(h * w);
    for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<int>(i) + 1;
    std::vector<int> out(oh * ow, -1);
    gpucore::ops::write_shifted_plane(h, w, oh, ow, top, left, vertical, horizontal, 0, out.data(),
                                      [&](int64_t offset, int* row, int64_t count) {
                                        for (int64_t x = 0; x < count; ++x) {
                                          row[x] = source[horizontal ? offset - x : offset + x];
                                        }
                                      });
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t x = 0; x < ow; ++x) {
        ASSERT_EQ(out[y * ow + x], plain_pixel(source, h, w, oh, ow, top, left, vertical, horizontal, y, x, 0))
            << "trial " << trial << ": " << h << "x" << w << " -> " << oh << "x" << ow << " at (" << top << ", "
            << left << "), flips " << vertical << horizontal << ", pixel (" << y << ", " << x << ")";
      }
    }
  }
}

}  // namespace
