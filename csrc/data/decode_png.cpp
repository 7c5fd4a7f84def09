// PNG decoding with libpng: decode_png.h.
#include "data/decode_png.h"

#ifdef GPUCORE_WITH_PNG
#include <png.h>
#include <zlib.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#endif
#include <cstring>

#include "data/exif.h"

namespace gpucore::decoding {

bool is_png(const std::vector<unsigned char>& bytes) {
  static const unsigned char kPng[] = {0x89, 'P', 'N', 'G'};
  return bytes.size() >= 4 && std::memcmp(bytes.data(), kPng, 4) == 0;
}

#ifdef GPUCORE_WITH_PNG
namespace {

// A PNG being read: libpng longjmps out on an error, so everything with a destructor lives here, in the caller of
// the function that calls setjmp.
struct PngRead {
  explicit PngRead(const std::vector<unsigned char>& file) : bytes(file) {}
  const std::vector<unsigned char>& bytes;
  size_t offset = 0;
  char message[256] = {};
  std::vector<uint8_t> samples;  // the rows as libpng gives them after the transforms asked for
  std::vector<png_bytep> rows;
  int64_t stored_channels = 0;   // 1 grey (or palette index), 2 grey + alpha, 3 RGB, 4 RGBA
  int sample_bytes = 1;          // 2: 16-bit samples, big-endian (masks only; images keep the high byte)
  bool image_read = false;       // every row read: what follows the image data cannot spoil it
  int orientation = 1;
  bool header_only = false;      // stop after the header: its size, interlacing and an eXIf chunk before the data
  int64_t last_row = 0;          // > 0 (non-interlaced only): read the rows above it, not the rest
  bool interlaced = false;       // header_only's answers
  bool exif_before_data = false;
};

void read_png_bytes(png_structp png, png_bytep data, size_t length) {
  auto* read = static_cast<PngRead*>(png_get_io_ptr(png));
  if (length > read->bytes.size() - read->offset) png_error(png, "the file ends early (truncated)");
  std::memcpy(data, read->bytes.data() + read->offset, length);
  read->offset += length;
}

void on_png_error(png_structp png, png_const_charp message) {
  auto* read = static_cast<PngRead*>(png_get_error_ptr(png));
  std::snprintf(read->message, sizeof(read->message), "%s", message);
  png_longjmp(png, 1);
}

// Warnings are about ancillary chunks (a bad colour profile, a CRC in a text chunk), which leave the pixels alone.
void on_png_warning(png_structp, png_const_charp) {}

// Reads the rows into `read` with libpng's transforms: palettes expanded to RGB(A) for images or kept as indices
// for masks, grey of 1, 2 or 4 bits scaled to 8 (as Pillow does), 16-bit samples cut to their high byte for images
// (torchvision's decode_image + ToDtype(uint8, scale=True)) or kept for masks. No gamma or colour-profile
// correction: Pillow and torchvision apply none.
bool read_png(PngRead& read, const DecodeOptions& options, Pixels& out) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &read, on_png_error, on_png_warning);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    out.error = "cannot allocate libpng's reader";
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    if (read.image_read) return true;
    out.error.assign("corrupt PNG: ").append(read.message);
    return false;
  }
  png_set_read_fn(png, &read, read_png_bytes);
  png_read_info(png, info);
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, colour_type = 0;
  png_get_IHDR(png, info, &width, &height, &bit_depth, &colour_type, nullptr, nullptr, nullptr);
  if (too_many_pixels(width, height, out)) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  if (read.header_only) {
    png_uint_32 exif_size = 0;
    png_bytep exif = nullptr;
    if (options.exif_orientation && png_get_eXIf_1(png, info, &exif_size, &exif) != 0) {
      read.orientation = exif_orientation(exif, exif_size);
      read.exif_before_data = true;
    }
    read.interlaced = png_get_interlace_type(png, info) != PNG_INTERLACE_NONE;
    out.height = height;
    out.width = width;
    png_destroy_read_struct(&png, &info, nullptr);
    return true;
  }
  if (colour_type == PNG_COLOR_TYPE_PALETTE) {
    if (options.mask) {
      png_set_packing(png);
    } else {
      png_set_palette_to_rgb(png);
    }
  }
  if (colour_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (bit_depth == 16 && !options.mask) png_set_strip_16(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  read.stored_channels = png_get_channels(png, info);
  read.sample_bytes = png_get_bit_depth(png, info) == 16 ? 2 : 1;
  const size_t row_bytes = png_get_rowbytes(png, info);
  const png_uint_32 rows = read.last_row > 0 ? std::min<png_uint_32>(read.last_row, height) : height;
  read.samples.resize(row_bytes * rows);
  read.rows.resize(rows);
  for (png_uint_32 y = 0; y < rows; ++y) read.rows[y] = read.samples.data() + y * row_bytes;
  if (rows == height) {
    png_read_image(png, read.rows.data());
  } else {  // the rows above last_row, and no more (the caller knows the orientation from the header)
    for (png_uint_32 y = 0; y < rows; ++y) png_read_row(png, read.rows[y], nullptr);
  }
  out.height = rows;
  out.width = width;
  read.image_read = true;
  if (options.exif_orientation && rows == height) {
    png_read_end(png, info);  // an eXIf chunk may come after the image data; Pillow reads it there too
    png_uint_32 exif_size = 0;
    png_bytep exif = nullptr;
    if (png_get_eXIf_1(png, info, &exif_size, &exif) != 0) read.orientation = exif_orientation(exif, exif_size);
  }
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

// A mask's class ids: each pixel's first sample (a palette index, a grey value); a colour pixel must be grey and a
// 16-bit value at most 255, else the file is refused.
void mask_ids(const PngRead& read, Pixels& out) {
  const int64_t pixels = out.height * out.width, stride = read.stored_channels * read.sample_bytes;
  auto sample = [&](int64_t i, int64_t channel) {
    const uint8_t* at = read.samples.data() + i * stride + channel * read.sample_bytes;
    return read.sample_bytes == 2 ? (at[0] << 8) | at[1] : at[0];
  };
  auto where = [&](int64_t i) {
    return " (row " + std::to_string(i / out.width) + ", column " + std::to_string(i % out.width) + ")";
  };
  out.data.resize(static_cast<size_t>(pixels));
  for (int64_t i = 0; i < pixels; ++i) {
    const int value = sample(i, 0);
    if (read.stored_channels >= 3 && (sample(i, 1) != value || sample(i, 2) != value)) {
      out.error = "is a colour (RGB) mask whose channels differ (" + std::to_string(value) + ", " +
                  std::to_string(sample(i, 1)) + ", " + std::to_string(sample(i, 2)) + where(i) +
                  "), so its pixels are not class ids; a segmentation mask must be a grey PNG of class ids or a "
                  "palette PNG (mode P) whose indices are the classes";
      out.data.clear();
      return;
    }
    if (value > 255) {
      out.error = "is a 16-bit mask with value " + std::to_string(value) + where(i) +
                  "; class ids must be 0 to 255 (save the mask as an 8-bit grey or palette PNG)";
      out.data.clear();
      return;
    }
    out.data[i] = static_cast<uint8_t>(value);
  }
}

// A PNG's chunks walked by their lengths, nothing decompressed: whether they reach IEND with every IDAT chunk's CRC
// right, and whether one is an eXIf chunk. Rows read partly stop inside the image data, where libpng has not yet
// checked the CRC of the chunk it reads: checked here first, so a damaged file fails as its whole decode does.
bool png_chunks_sound(const std::vector<unsigned char>& bytes, bool& has_exif) {
  has_exif = false;
  size_t offset = 8;  // after the signature
  while (offset + 12 <= bytes.size()) {
    const uint64_t length = (uint64_t{bytes[offset]} << 24) | (uint64_t{bytes[offset + 1]} << 16) |
                            (uint64_t{bytes[offset + 2]} << 8) | bytes[offset + 3];
    const unsigned char* type = bytes.data() + offset + 4;
    if (offset + 12 + length > bytes.size()) return false;  // runs off the file
    if (std::memcmp(type, "IEND", 4) == 0) return true;
    if (std::memcmp(type, "eXIf", 4) == 0) has_exif = true;
    if (std::memcmp(type, "IDAT", 4) == 0) {
      const unsigned char* stored = type + 4 + length;
      const uint32_t crc = (uint32_t{stored[0]} << 24) | (uint32_t{stored[1]} << 16) | (uint32_t{stored[2]} << 8) |
                           stored[3];
      if (crc32(0L, type, static_cast<uInt>(4 + length)) != crc) return false;
    }
    offset += 12 + length;  // length, type, data, CRC
  }
  return false;
}

}  // namespace

int decode_png(const std::vector<unsigned char>& bytes, const DecodeOptions& options, Pixels& out, int64_t last_row) {
  PngRead read(bytes);
  read.last_row = last_row;
  if (!read_png(read, options, out)) return 1;
  if (options.mask) {
    mask_ids(read, out);
  } else {
    convert_channels(read.samples.data(), read.stored_channels, options.channels, out);
  }
  return read.orientation;
}

int read_png_header(const std::vector<unsigned char>& bytes, const DecodeOptions& options, Pixels& out,
                    bool& rows_readable) {
  PngRead read(bytes);
  read.header_only = true;
  rows_readable = false;
  if (!read_png(read, options, out)) return 1;
  bool has_exif = false;
  rows_readable = !read.interlaced && png_chunks_sound(bytes, has_exif) &&
                  (read.exif_before_data || !options.exif_orientation || !has_exif);
  return read.orientation;
}
#else
int decode_png(const std::vector<unsigned char>&, const DecodeOptions&, Pixels& out, int64_t) {
  missing_library("png", out);
  return 1;
}
int read_png_header(const std::vector<unsigned char>&, const DecodeOptions&, Pixels& out, bool& rows_readable) {
  rows_readable = false;
  missing_library("png", out);
  return 1;
}
#endif

}  // namespace gpucore::decoding
