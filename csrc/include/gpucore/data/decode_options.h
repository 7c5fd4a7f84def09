#pragma once
// How an image file is decoded, and the limits every decoder checks: the part of the readers' interface (readers.h)
// that the format decoders (csrc/data/decode_png.cpp, decode_jpeg.cpp, ...) need, without torch's headers.
#include <cstdint>
#include <string>

namespace gpucore {

// How an image file's pixels are read. Images read as Pillow's Image.open(path).convert("RGB" or "L") gives them
// (16-bit samples as torchvision's decode_image + ToDtype(uint8, scale=True): the high byte; alpha dropped, not
// composited; CMYK and YCCK JPEGs as Pillow converts them), turned upright as their EXIF orientation says
// (PIL.ImageOps.exif_transpose). Masks read as class ids: a palette PNG's indices, a grey PNG's values; a JPEG, a
// colour PNG whose channels differ and 16-bit values above 255 are refused (each the file's error).
struct DecodeOptions {
  int64_t channels = 3;          // 1 (grey) or 3 (RGB); masks: 1
  bool exif_orientation = true;  // the EXIF orientation tag (JPEG APP1 Exif, PNG eXIf) applied; false: as stored
  bool mask = false;             // a segmentation mask: class ids as above, resized with nearest
};

// Why a file of `format` ("png" or "jpeg") cannot be read by a gpucore built without its library, and
// how to install it (the one text for the C++ readers and the Python check before decoding).
std::string missing_reader_message(const std::string& format);

// The most pixels an image header may claim: checked before anything is allocated, so a small file
// claiming a huge image fails as that file's error (a decompression-bomb guard like Pillow's
// MAX_IMAGE_PIXELS; the default is Pillow's error threshold, 178,956,970). 0: no limit. Process-wide.
constexpr int64_t kDefaultMaxImagePixels = 178956970;
void set_max_image_pixels(int64_t pixels);
int64_t max_image_pixels();

}  // namespace gpucore
