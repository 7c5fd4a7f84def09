#pragma once
// EXIF orientation (internal to csrc/data), as torchvision keeps exif.h apart from its decoders: the tag read from a
// JPEG's APP1 marker or a PNG's eXIf chunk, and the pixels turned upright as it says.
#include <cstddef>
#include <cstdint>

#include "data/pixels.h"

namespace gpucore::decoding {

// The orientation (tag 0x0112, 1 to 8) in EXIF data: a TIFF header and its first directory, as JPEG's APP1 Exif
// marker (after "Exif\0\0") and PNG's eXIf chunk hold them. 1 (as stored) when absent or malformed.
int exif_orientation(const uint8_t* tiff, size_t size);

// Pixels turned as EXIF orientation 2 to 8 asks, as PIL.ImageOps.exif_transpose does: 2 mirrored, 3 turned 180
// degrees, 4 flipped, 5 transposed, 6 turned 90 degrees clockwise, 7 transversed, 8 turned 90 degrees
// counter-clockwise. Each is an optional transpose, then flips of the result's rows and/or columns.
void orient(int orientation, int64_t channels, Pixels& pixels);

}  // namespace gpucore::decoding
