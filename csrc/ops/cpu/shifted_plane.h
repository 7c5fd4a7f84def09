#pragma once
// One output plane of a shift (crop, padding) with optional flips of an H x W source plane, as branch-free runs:
// per output row, the columns whose source lies inside the image form one contiguous (or, flipped, reversed) run
// of the source row, and the rest is `outside`. The crop op copies the runs; the augment op scales them to float.
#include <algorithm>
#include <cstdint>

namespace gpucore::ops {

// Output pixel (y, x) of the oh x ow plane `to` reads source pixel (top + y, left + x), or (top + oh - 1 - y)
// with `vertical` and (left + ow - 1 - x) with `horizontal`. `run(source_offset, out, count)` writes `count`
// pixels from source index `source_offset` (row * w + column) on, reversed along the row when `horizontal`.
template <typename Out, typename Run>
void write_shifted_plane(int64_t h, int64_t w, int64_t oh, int64_t ow, int64_t top, int64_t left, bool vertical,
                         bool horizontal, Out outside, Out* to, const Run& run) {
  const int64_t first = std::clamp(horizontal ? left + ow - w : -left, int64_t{0}, ow);
  const int64_t last = std::clamp(horizontal ? left + ow : w - left, first, ow);
  const int64_t first_column = horizontal ? left + ow - 1 - first : left + first;  // the source of row[first]
  for (int64_t y = 0; y < oh; ++y) {
    const int64_t sy = top + (vertical ? oh - 1 - y : y);
    Out* row = to + y * ow;
    if (sy < 0 || sy >= h) {
      std::fill(row, row + ow, outside);
      continue;
    }
    std::fill(row, row + first, outside);
    std::fill(row + last, row + ow, outside);
    run(sy * w + first_column, row + first, last - first);
  }
}

}  // namespace gpucore::ops
