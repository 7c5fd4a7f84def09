#pragma once
// JPEG decoding (internal to csrc/data) with libjpeg(-turbo), as Pillow and torchvision decode JPEGs (readers.h's
// DecodeOptions), whole or one region at a DCT scale; without libjpeg at build time every JPEG fails with
// missing_reader_message.
#include <cstdint>
#include <utility>
#include <vector>

#include "data/pixels.h"

namespace gpucore::decoding {

// Whether the bytes are a JPEG's (its SOI marker).
bool is_jpeg(const std::vector<unsigned char>& bytes);

// What read_jpeg decodes of the stored (not yet oriented) image: the box rows [top, top + height), columns [left,
// left + width) in its full-size pixels, at 1/scale of each side (libjpeg's DCT scaling: 1, 2, 4 or 8).
struct StoredRegion {
  int64_t top = 0, left = 0, height = 0, width = 0;
  int scale = 1;
};

// The part [begin, begin + length) of a side of `full` pixels at 1/scale, where libjpeg's scaled side is
// ceil(full / scale) pixels: its edges rounded to the nearest scaled pixel, at least one pixel long.
std::pair<int64_t, int64_t> scaled_span(int64_t begin, int64_t length, int scale, int64_t full);

// The pixels (stored, not yet upright) of a JPEG in `out`, or its error: all of it, or `region` (null: all). Returns
// the EXIF orientation to apply (1: none).
int decode_jpeg(const std::vector<unsigned char>& bytes, const DecodeOptions& options, const StoredRegion* region,
                Pixels& out);

// The stored size (out.height, out.width) and the EXIF orientation to apply, from the header alone.
int read_jpeg_header(const std::vector<unsigned char>& bytes, const DecodeOptions& options, Pixels& out);

}  // namespace gpucore::decoding
