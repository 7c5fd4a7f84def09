// What every image decoder shares: pixels.h.
#include "data/pixels.h"

#include <atomic>
#include <fstream>
#include <iterator>

#include "gpucore/errors.h"

namespace gpucore {

namespace {

std::atomic<int64_t> max_pixels{kDefaultMaxImagePixels};

}  // namespace

void set_max_image_pixels(int64_t pixels) {
  if (pixels < 0) throw ConfigError("max image pixels must be >= 0 (0: no limit), got " + std::to_string(pixels));
  max_pixels = pixels;
}

int64_t max_image_pixels() { return max_pixels.load(); }

namespace decoding {

namespace {

// Pillow's convert("L") of an RGB pixel: ITU-R 601-2 luma in integers (L24 in its Convert.c).
uint8_t luma(const uint8_t* rgb) {
  return static_cast<uint8_t>((rgb[0] * 19595u + rgb[1] * 38470u + rgb[2] * 7471u + 0x8000u) >> 16);
}

}  // namespace

bool too_many_pixels(uint64_t width, uint64_t height, Pixels& out) {
  const int64_t limit = max_pixels.load();
  if (limit == 0 || width * height <= static_cast<uint64_t>(limit)) return false;
  out.error = "claims " + std::to_string(width) + "x" + std::to_string(height) + " = " + std::to_string(width * height) +
              " pixels, more than the limit of " + std::to_string(limit) +
              " (a corrupt file or a decompression bomb; raise it with gpucore.data.set_max_image_pixels)";
  return true;
}

void missing_library(const std::string& format, Pixels& out) {
  out.missing_library = true;
  out.error = missing_reader_message(format);
}

std::vector<unsigned char> read_file(const std::string& path, std::string& error) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) {
    error = "cannot open the file";
    return {};
  }
  const std::streamoff size = file.tellg();
  if (size < 0) {  // not a regular file (a pipe): read to its end
    file.clear();
    return std::vector<unsigned char>(std::istreambuf_iterator<char>(file), {});
  }
  // One read of the whole file: byte by byte through a stream iterator, reading was a tenth of decoding a camera
  // JPEG at the crop's DCT scale.
  std::vector<unsigned char> bytes(static_cast<size_t>(size));
  file.seekg(0);
  file.read(reinterpret_cast<char*>(bytes.data()), size);
  bytes.resize(static_cast<size_t>(file.gcount()));  // a file cut short meanwhile decodes as a truncated one
  return bytes;
}

void convert_channels(const uint8_t* stored, int64_t stored_channels, int64_t channels, Pixels& out) {
  const int64_t pixels = out.height * out.width;
  const bool colour = stored_channels >= 3;
  out.data.resize(static_cast<size_t>(pixels * channels));
  for (int64_t i = 0; i < pixels; ++i) {
    const uint8_t* px = stored + stored_channels * i;
    if (channels == 1) {
      out.data[i] = colour ? luma(px) : px[0];
    } else {
      for (int64_t c = 0; c < 3; ++c) out.data[3 * i + c] = px[colour ? c : 0];
    }
  }
}

std::string size_text(int64_t height, int64_t width) { return std::to_string(height) + "x" + std::to_string(width); }

const char* file_kind(const DecodeOptions& options) { return options.mask ? "mask" : "image"; }

}  // namespace decoding

}  // namespace gpucore
