#pragma once
// PNG decoding (internal to csrc/data) with libpng, as Pillow and torchvision decode PNGs (readers.h's DecodeOptions);
// without libpng at build time every PNG fails with missing_reader_message.
#include <cstdint>
#include <vector>

#include "data/pixels.h"

namespace gpucore::decoding {

// Whether the bytes are a PNG's (its signature).
bool is_png(const std::vector<unsigned char>& bytes);

// The pixels (stored, not yet upright) of a PNG in `out`, or its error. Returns the EXIF orientation to apply (1:
// none). last_row > 0: only the rows above it (a non-interlaced PNG).
int decode_png(const std::vector<unsigned char>& bytes, const DecodeOptions& options, Pixels& out,
               int64_t last_row = 0);

// The stored size (out.height, out.width) and the orientation from an eXIf chunk before the image data; whether the
// rows can be read partly: a sound (png_chunks_sound), non-interlaced PNG whose orientation is known before its data
// (an eXIf chunk there, none at all, or orientation not asked for: one after the data would turn the image after its
// rows are read). Otherwise the whole image is read, as decode_image reads it.
int read_png_header(const std::vector<unsigned char>& bytes, const DecodeOptions& options, Pixels& out,
                    bool& rows_readable);

}  // namespace gpucore::decoding
