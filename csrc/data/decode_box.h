#pragma once
// One box of an image decoded alone (internal to csrc/data; decode_box.cpp, which also holds ImageFile): the box
// mapped through the EXIF orientation to the stored pixels, a JPEG's rows and iMCU columns at a DCT scale, a PNG's
// rows down to the box's last.
#include <cstdint>
#include <vector>

#include "data/pixels.h"
#include "gpucore/data/readers.h"

namespace gpucore::decoding {

// An image's header (JPEG, or PNG read by rows): its upright size and the orientation that turns the stored
// image upright.
struct ImageHeader {
  int64_t height = 0, width = 0;  // upright
  int orientation = 1;
  bool transposed() const { return orientation >= 5; }  // EXIF 5 to 8 swap the stored height and width
};

// A JPEG's header: its upright size and orientation (`out`: the error, if any).
ImageHeader jpeg_header(const std::vector<unsigned char>& bytes, const DecodeOptions& options, Pixels& out);

// The upright box `box` of a JPEG (header `header`) decoded alone, upright: the box mapped to the stored pixels,
// decoded at the DCT scale that keeps it at least least_height x least_width (upright) with kFast, then turned
// upright.
Pixels decode_jpeg_box(const std::vector<unsigned char>& bytes, const DecodeOptions& options,
                       const ImageHeader& header, const ImageBox& box, int64_t least_height, int64_t least_width,
                       DecodeScaling scaling);

// The upright box `box` of a PNG whose rows can be read partly (read_png_header): its stored rows read down to the
// box's last one and no further, the box cut from them, turned upright.
Pixels decode_png_box(const std::vector<unsigned char>& bytes, const DecodeOptions& options,
                      const ImageHeader& header, const ImageBox& box);

}  // namespace gpucore::decoding
