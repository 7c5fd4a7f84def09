// EXIF orientation: exif.h.
#include "data/exif.h"

#include <cstring>
#include <vector>

namespace gpucore::decoding {

int exif_orientation(const uint8_t* tiff, size_t size) {
  if (size < 8 || !((tiff[0] == 'I' && tiff[1] == 'I') || (tiff[0] == 'M' && tiff[1] == 'M'))) return 1;
  const bool little_endian = tiff[0] == 'I';
  auto number = [&](size_t at, int bytes) {
    uint32_t value = 0;
    for (int k = 0; k < bytes; ++k) {
      value |= static_cast<uint32_t>(tiff[at + k]) << 8 * (little_endian ? k : bytes - 1 - k);
    }
    return value;
  };
  if (number(2, 2) != 42) return 1;
  const uint64_t directory = number(4, 4);
  if (directory + 2 > size) return 1;
  const uint32_t entries = number(directory, 2);
  for (uint32_t i = 0; i < entries && directory + 2 + 12 * (i + 1) <= size; ++i) {
    const size_t entry = directory + 2 + 12 * i;
    if (number(entry, 2) != 0x0112) continue;
    const uint32_t value = number(entry + 8, 2);  // a SHORT, the first bytes of the value field
    return number(entry + 2, 2) == 3 && value >= 1 && value <= 8 ? static_cast<int>(value) : 1;
  }
  return 1;
}

void orient(int orientation, int64_t channels, Pixels& pixels) {
  if (orientation < 2 || orientation > 8) return;
  const bool transpose = orientation >= 5;
  const int flips = (orientation - 1) % 4;  // 1: columns, 2: both, 3: rows
  const bool flip_columns = flips == 1 || flips == 2, flip_rows = flips >= 2;
  const int64_t height = transpose ? pixels.width : pixels.height, width = transpose ? pixels.height : pixels.width;
  std::vector<uint8_t> turned(pixels.data.size());
  for (int64_t y = 0; y < height; ++y) {
    const int64_t row = flip_rows ? height - 1 - y : y;
    for (int64_t x = 0; x < width; ++x) {
      const int64_t column = flip_columns ? width - 1 - x : x;
      const int64_t source = transpose ? column * pixels.width + row : row * pixels.width + column;
      std::memcpy(&turned[(y * width + x) * channels], &pixels.data[source * channels], channels);
    }
  }
  pixels.data = std::move(turned);
  pixels.height = height;
  pixels.width = width;
}

}  // namespace gpucore::decoding
