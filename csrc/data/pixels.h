#pragma once
// What every image decoder shares (internal to csrc/data): a decoded image's pixels or its error, the pixel limit
// checked on each header, a file's bytes, and Pillow's conversion between grey and RGB.
#include <cstdint>
#include <string>
#include <vector>

#include "gpucore/data/decode_options.h"

namespace gpucore::decoding {

struct Pixels {
  std::vector<uint8_t> data;
  int64_t height = 0, width = 0;
  std::string error;  // empty when decoded
  bool missing_library = false;  // the error is gpucore's build, not the file: never skipped
};

// True (with the file's error set) when the header claims more pixels than allowed (max_image_pixels).
bool too_many_pixels(uint64_t width, uint64_t height, Pixels& out);

// Without libpng/libjpeg at build time the reader is left out; a file of that format then fails with this.
void missing_library(const std::string& format, Pixels& out);

// The file's bytes; "" and `error` set when it cannot be read.
std::vector<unsigned char> read_file(const std::string& path, std::string& error);

// 8-bit pixels of `stored_channels` samples (1 grey, 2 grey + alpha, 3 RGB, 4 RGBA) into out.data as `channels` (1
// or 3), as Pillow's convert("L") and convert("RGB") do, so a PNG reads as the same photo saved as JPEG would: alpha
// dropped (not composited), grey from colour by luma, colour from grey by copying.
void convert_channels(const uint8_t* stored, int64_t stored_channels, int64_t channels, Pixels& out);

// "HxW", as the errors write a size.
std::string size_text(int64_t height, int64_t width);

// What errors call a file: "mask" or "image".
const char* file_kind(const DecodeOptions& options);

}  // namespace gpucore::decoding
