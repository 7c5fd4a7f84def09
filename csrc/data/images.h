#pragma once
// The whole-file decode every reader starts from (internal to csrc/data; images.cpp): the format told by the first
// bytes, PNG and JPEG here, the other formats through decode_other_format.
#include <vector>

#include "data/pixels.h"

namespace gpucore::decoding {

// A whole image file's pixels, upright.
Pixels decode_bytes(const std::vector<unsigned char>& bytes, const DecodeOptions& options);

}  // namespace gpucore::decoding
