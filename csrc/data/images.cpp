// PNG (libpng) and JPEG (libjpeg-turbo) decoding, as Pillow and torchvision decode them (readers.h), one image or
// many on a few threads, resized to a fixed size where asked; the other formats through decode_other_format.
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/upsample_nearest2d.h>
#include <ATen/ops/where.h>
#include <c10/util/ParallelGuard.h>
#ifdef GPUCORE_WITH_JPEG
#include <jpeglib.h>
#endif
#ifdef GPUCORE_WITH_PNG
#include <png.h>
#endif
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>
#include <tuple>

#include "gpucore/data/readers.h"
#include "gpucore/errors.h"
#include "ops/cpu/bilinear_resize.h"

namespace gpucore {

namespace {

struct Pixels {
  std::vector<uint8_t> data;
  int64_t height = 0, width = 0;
  std::string error;  // empty when decoded
  bool missing_library = false;  // the error is gpucore's build, not the file: never skipped
};

std::atomic<int64_t> max_pixels{kDefaultMaxImagePixels};

// True (with the file's error set) when the header claims more pixels than allowed.
bool too_many_pixels(uint64_t width, uint64_t height, Pixels& out) {
  const int64_t limit = max_pixels.load();
  if (limit == 0 || width * height <= static_cast<uint64_t>(limit)) return false;
  out.error = "claims " + std::to_string(width) + "x" + std::to_string(height) + " = " + std::to_string(width * height) +
              " pixels, more than the limit of " + std::to_string(limit) +
              " (a corrupt file or a decompression bomb; raise it with gpucore.data.set_max_image_pixels)";
  return true;
}

#if !defined(GPUCORE_WITH_PNG) || !defined(GPUCORE_WITH_JPEG)
// Without libpng/libjpeg at build time the reader is left out; a file of that format then fails with this.
void missing_library(const std::string& format, Pixels& out) {
  out.missing_library = true;
  out.error = missing_reader_message(format);
}
#endif

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

// Pillow's convert("L") of an RGB pixel: ITU-R 601-2 luma in integers (L24 in its Convert.c).
uint8_t luma(const uint8_t* rgb) {
  return static_cast<uint8_t>((rgb[0] * 19595u + rgb[1] * 38470u + rgb[2] * 7471u + 0x8000u) >> 16);
}

// 8-bit pixels of `stored_channels` samples (1 grey, 2 grey + alpha, 3 RGB, 4 RGBA) into out.data as `channels` (1
// or 3), as Pillow's convert("L") and convert("RGB") do, so a PNG reads as the same photo saved as JPEG would: alpha
// dropped (not composited), grey from colour by luma, colour from grey by copying.
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

// The orientation (tag 0x0112, 1 to 8) in EXIF data: a TIFF header and its first directory, as JPEG's APP1 Exif
// marker (after "Exif\0\0") and PNG's eXIf chunk hold them. 1 (as stored) when absent or malformed.
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

// Pixels turned as EXIF orientation 2 to 8 asks, as PIL.ImageOps.exif_transpose does: 2 mirrored, 3 turned 180
// degrees, 4 flipped, 5 transposed, 6 turned 90 degrees clockwise, 7 transversed, 8 turned 90 degrees
// counter-clockwise. Each is an optional transpose, then flips of the result's rows and/or columns.
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

#ifdef GPUCORE_WITH_PNG
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

// Returns the EXIF orientation to apply (1: none). last_row > 0: only the rows above it (a non-interlaced PNG).
int decode_png(const std::vector<unsigned char>& bytes, const DecodeOptions& options, Pixels& out,
               int64_t last_row = 0) {
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

// The stored size (out.height, out.width) and the orientation from an eXIf chunk before the image data; whether the
// rows can be read partly: a sound (png_chunks_sound), non-interlaced PNG whose orientation is known before its data
// (an eXIf chunk there, none at all, or orientation not asked for: one after the data would turn the image after its
// rows are read). Otherwise the whole image is read, as decode_image reads it.
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
int decode_png(const std::vector<unsigned char>&, const DecodeOptions&, Pixels& out, int64_t = 0) {
  missing_library("png", out);
  return 1;
}
int read_png_header(const std::vector<unsigned char>&, const DecodeOptions&, Pixels& out, bool& rows_readable) {
  rows_readable = false;
  missing_library("png", out);
  return 1;
}
#endif

#ifdef GPUCORE_WITH_JPEG
struct JpegErrors {
  jpeg_error_mgr manager;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void on_jpeg_error(j_common_ptr info) {
  auto* errors = reinterpret_cast<JpegErrors*>(info->err);
  (*info->err->format_message)(info, errors->message);
  std::longjmp(errors->jump, 1);
}

// libjpeg's warnings (level -1) report corrupt or truncated data, which it would fill in with grey:
// the file is refused instead, as Pillow does, and on_error decides.
void on_jpeg_message(j_common_ptr info, int level) {
  if (level < 0) on_jpeg_error(info);
}

// The orientation in the first APP1 Exif marker (the one Pillow reads), 1 without one.
int jpeg_orientation(j_decompress_ptr info) {
  static const unsigned char kExif[] = {'E', 'x', 'i', 'f', 0, 0};
  for (jpeg_saved_marker_ptr marker = info->marker_list; marker != nullptr; marker = marker->next) {
    if (marker->marker == JPEG_APP0 + 1 && marker->data_length >= 6 && std::memcmp(marker->data, kExif, 6) == 0) {
      return exif_orientation(marker->data + 6, marker->data_length - 6);
    }
  }
  return 1;
}

// Pillow's RGB of a CMYK JPEG's sample: it reads the samples inverted (JpegImagePlugin's rawmode "CMYK;I", Adobe's
// convention, which Photoshop and libjpeg's own writer follow), then converts as its Convert.c cmyk2rgb does,
// 255 - K - C (255 - K) / 255 in its integer rounding. `ink` and `black` are the samples as stored.
uint8_t cmyk_to_rgb(uint8_t ink, uint8_t black) {
  const int cyan = 255 - ink, not_black = black;  // Pillow's C and 255 - K
  const int product = cyan * not_black + 128;
  return static_cast<uint8_t>(std::clamp(not_black - (((product >> 8) + product) >> 8), 0, 255));
}

// What read_jpeg decodes of the stored (not yet oriented) image: the box rows [top, top + height), columns [left,
// left + width) in its full-size pixels, at 1/scale of each side (libjpeg's DCT scaling: 1, 2, 4 or 8).
struct StoredRegion {
  int64_t top = 0, left = 0, height = 0, width = 0;
  int scale = 1;
};

// The part [begin, begin + length) of a side of `full` pixels at 1/scale, where libjpeg's scaled side is
// ceil(full / scale) pixels: its edges rounded to the nearest scaled pixel, at least one pixel long.
std::pair<int64_t, int64_t> scaled_span(int64_t begin, int64_t length, int scale, int64_t full) {
  if (scale == 1) return {begin, length};
  const int64_t side = (full + scale - 1) / scale;
  const int64_t first = std::min((2 * begin + scale) / (2 * scale), side - 1);
  const int64_t end = std::clamp((2 * (begin + length) + scale) / (2 * scale), first + 1, side);
  return {first, end - first};
}

// No object with a destructor is created between setjmp and a possible longjmp: `out`, `cmyk` and `bytes` live
// in the caller. Returns the EXIF orientation to apply (1: none). `header_only`: out.height and out.width are the
// stored image's, nothing is decoded. `region` (or null: all of it): only its rows and the iMCU columns that cover
// it are decoded (jpeg_skip_scanlines, jpeg_crop_scanline), and out holds exactly its pixels at its scale.
int read_jpeg(const std::vector<unsigned char>& bytes, const DecodeOptions& options, const StoredRegion* region,
              bool header_only, std::vector<uint8_t>& cmyk, Pixels& out) {
  jpeg_decompress_struct info;
  JpegErrors errors;
  info.err = jpeg_std_error(&errors.manager);
  errors.manager.error_exit = on_jpeg_error;
  errors.manager.emit_message = on_jpeg_message;
  if (setjmp(errors.jump)) {
    jpeg_destroy_decompress(&info);
    out.error.assign("corrupt JPEG: ").append(errors.message);
    return 1;
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, bytes.data(), static_cast<unsigned long>(bytes.size()));
  if (options.exif_orientation) jpeg_save_markers(&info, JPEG_APP0 + 1, 0xFFFF);
  jpeg_read_header(&info, TRUE);
  if (too_many_pixels(info.image_width, info.image_height, out)) {
    jpeg_destroy_decompress(&info);
    return 1;
  }
  const int orientation = options.exif_orientation ? jpeg_orientation(&info) : 1;
  if (header_only) {
    out.height = info.image_height;
    out.width = info.image_width;
    jpeg_destroy_decompress(&info);
    return orientation;
  }
  // Four components (CMYK, or YCCK, which libjpeg turns into CMYK) are read as CMYK and converted below.
  const bool four = info.jpeg_color_space == JCS_CMYK || info.jpeg_color_space == JCS_YCCK;
  info.out_color_space = four ? JCS_CMYK : options.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  if (region != nullptr) {
    info.scale_num = 1;
    info.scale_denom = static_cast<unsigned int>(region->scale);
  }
  jpeg_start_decompress(&info);
  JDIMENSION top = 0, rows = info.output_height, left = 0, columns = info.output_width, skipped_columns = 0;
  if (region != nullptr) {
    std::tie(top, rows) = scaled_span(region->top, region->height, region->scale, info.image_height);
    std::tie(left, columns) = scaled_span(region->left, region->width, region->scale, info.image_width);
    if (columns < info.output_width) {
      // One more pixel each side where there is one, so that no pixel kept sits at the edge of the columns decoded
      // (upsampled chroma there would lack its neighbour); libjpeg widens this to whole iMCU columns.
      JDIMENSION first = left > 0 ? left - 1 : 0;
      JDIMENSION width = std::min<JDIMENSION>(left + columns + 1, info.output_width) - first;
      jpeg_crop_scanline(&info, &first, &width);
      skipped_columns = left - first;
    }
    if (top > 0) jpeg_skip_scanlines(&info, top);
  }
  out.height = rows;
  out.width = columns;
  const int64_t stored_channels = info.output_components;
  const size_t stride = static_cast<size_t>(info.output_width) * stored_channels;  // the columns decoded
  std::vector<uint8_t>& target = four ? cmyk : out.data;
  target.resize(static_cast<size_t>(rows) * stride);
  // Up to 16 rows per call (a plain array: nothing with a destructor after setjmp), so libjpeg writes whole row
  // groups straight into the image.
  constexpr JDIMENSION kRows = 16;
  while (info.output_scanline < top + rows) {
    JSAMPROW scanlines[kRows];
    const JDIMENSION count = std::min(kRows, top + rows - info.output_scanline);
    for (JDIMENSION k = 0; k < count; ++k) {
      scanlines[k] = target.data() + static_cast<size_t>(info.output_scanline - top + k) * stride;
    }
    jpeg_read_scanlines(&info, scanlines, count);
  }
  const size_t row_bytes = static_cast<size_t>(columns) * stored_channels;
  if (row_bytes != stride) {  // the box's columns, moved to the front of each row (never past where they are read)
    for (JDIMENSION y = 0; y < rows; ++y) {
      std::memmove(target.data() + y * row_bytes, target.data() + y * stride + skipped_columns * stored_channels,
                   row_bytes);
    }
    target.resize(static_cast<size_t>(rows) * row_bytes);
  }
  // A region that ends above the last row leaves the rest unread: libjpeg's finish would refuse that; destroying
  // the decompressor ends it.
  if (info.output_scanline == info.output_height) jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
  return orientation;
}

int decode_jpeg(const std::vector<unsigned char>& bytes, const DecodeOptions& options, const StoredRegion* region,
                Pixels& out) {
  std::vector<uint8_t> cmyk;
  const int orientation = read_jpeg(bytes, options, region, /*header_only=*/false, cmyk, out);
  if (out.error.empty() && !cmyk.empty()) {
    for (size_t i = 0; i < cmyk.size(); i += 4) {  // each pixel's C, M, Y, K becomes R, G, B and a dropped 4th
      for (size_t c = 0; c < 3; ++c) cmyk[i + c] = cmyk_to_rgb(cmyk[i + c], cmyk[i + 3]);
    }
    convert_channels(cmyk.data(), 4, options.channels, out);
  }
  return orientation;
}

// The stored size (out.height, out.width) and the EXIF orientation to apply, from the header alone.
int read_jpeg_header(const std::vector<unsigned char>& bytes, const DecodeOptions& options, Pixels& out) {
  std::vector<uint8_t> unused;
  return read_jpeg(bytes, options, nullptr, /*header_only=*/true, unused, out);
}
#else
struct StoredRegion {
  int64_t top = 0, left = 0, height = 0, width = 0;
  int scale = 1;
};
std::pair<int64_t, int64_t> scaled_span(int64_t begin, int64_t length, int, int64_t) { return {begin, length}; }
int decode_jpeg(const std::vector<unsigned char>&, const DecodeOptions&, const StoredRegion*, Pixels& out) {
  missing_library("jpeg", out);
  return 1;
}
int read_jpeg_header(const std::vector<unsigned char>&, const DecodeOptions&, Pixels& out) {
  missing_library("jpeg", out);
  return 1;
}
#endif

bool is_png(const std::vector<unsigned char>& bytes) {
  static const unsigned char kPng[] = {0x89, 'P', 'N', 'G'};
  return bytes.size() >= 4 && std::memcmp(bytes.data(), kPng, 4) == 0;
}

bool is_jpeg(const std::vector<unsigned char>& bytes) {
  return bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF;
}

// A whole image file's pixels, upright.
Pixels decode_bytes(const std::vector<unsigned char>& bytes, const DecodeOptions& options) {
  Pixels out;
  int orientation = 1;
  if (is_png(bytes)) {
    orientation = decode_png(bytes, options, out);
  } else if (is_jpeg(bytes)) {
    if (options.mask) {
      out.error = "is a JPEG, which a segmentation mask cannot be: its lossy compression invents class ids along "
                  "the edges between classes; save the masks as PNG (grey class ids or a palette)";
      return out;
    }
    orientation = decode_jpeg(bytes, options, nullptr, out);
  } else {  // upright already (the other formats' decoder turns them)
    OtherFormatImage other = decode_other_format(bytes, options);
    out.data = std::move(other.data);
    out.height = other.height;
    out.width = other.width;
    out.error = std::move(other.error);
    out.missing_library = other.missing_library;
  }
  if (out.error.empty()) orient(orientation, options.channels, out);
  return out;
}

Pixels decode(const std::string& path, const DecodeOptions& options) {
  Pixels out;
  const std::vector<unsigned char> bytes = read_file(path, out.error);
  if (!out.error.empty()) return out;
  return decode_bytes(bytes, options);
}

// An image's header (JPEG, or PNG read by rows): its upright size and the orientation that turns the stored
// image upright.
struct ImageHeader {
  int64_t height = 0, width = 0;  // upright
  int orientation = 1;
  bool transposed() const { return orientation >= 5; }  // EXIF 5 to 8 swap the stored height and width
};

ImageHeader jpeg_header(const std::vector<unsigned char>& bytes, const DecodeOptions& options, Pixels& out) {
  ImageHeader header;
  header.orientation = read_jpeg_header(bytes, options, out);
  header.height = header.transposed() ? out.width : out.height;
  header.width = header.transposed() ? out.height : out.width;
  out.height = out.width = 0;
  return header;
}

// The largest DCT scale (1/8, 1/4, 1/2, else 1) at which a side of `length` stored pixels keeps at least `least`.
// Checked on the spans read_jpeg decodes, so the rounding of their edges is counted.
int dct_scale(const StoredRegion& box, int64_t image_height, int64_t image_width, int64_t least_height,
              int64_t least_width) {
  for (const int scale : {8, 4, 2}) {
    if (scaled_span(box.top, box.height, scale, image_height).second >= least_height &&
        scaled_span(box.left, box.width, scale, image_width).second >= least_width) {
      return scale;
    }
  }
  return 1;
}

// The upright box `box` of an image (header `header`) in its stored pixels: orient()'s flips and transpose, backwards.
StoredRegion stored_region(const ImageHeader& header, const ImageBox& box) {
  const int flips = (header.orientation - 1) % 4;  // as orient(): 1 columns, 2 both, 3 rows
  const bool flip_columns = header.orientation >= 2 && (flips == 1 || flips == 2);
  const bool flip_rows = header.orientation >= 2 && flips >= 2;
  // The box in orient()'s source rows and columns (upright, before its flips), then in the stored image's.
  const int64_t row = flip_rows ? header.height - box.top - box.height : box.top;
  const int64_t column = flip_columns ? header.width - box.left - box.width : box.left;
  const bool transposed = header.transposed();
  StoredRegion region;
  region.top = transposed ? column : row;
  region.left = transposed ? row : column;
  region.height = transposed ? box.width : box.height;
  region.width = transposed ? box.height : box.width;
  return region;
}

// The upright box `box` of a JPEG (header `header`) decoded alone, upright: the box mapped to the stored pixels,
// decoded at the DCT scale that keeps it at least least_height x least_width (upright) with kFast, then turned
// upright.
Pixels decode_jpeg_box(const std::vector<unsigned char>& bytes, const DecodeOptions& options,
                       const ImageHeader& header, const ImageBox& box, int64_t least_height, int64_t least_width,
                       DecodeScaling scaling) {
  StoredRegion region = stored_region(header, box);
  const bool transposed = header.transposed();
  const int64_t stored_height = transposed ? header.width : header.height;
  const int64_t stored_width = transposed ? header.height : header.width;
  if (scaling == DecodeScaling::kFast) {
    region.scale = dct_scale(region, stored_height, stored_width, transposed ? least_width : least_height,
                             transposed ? least_height : least_width);
  }
  Pixels out;
  decode_jpeg(bytes, options, &region, out);
  if (out.error.empty()) orient(header.orientation, options.channels, out);
  return out;
}

// The upright box `box` of a PNG whose rows can be read partly (read_png_header): its stored rows read down to the
// box's last one and no further, the box cut from them, turned upright.
Pixels decode_png_box(const std::vector<unsigned char>& bytes, const DecodeOptions& options,
                      const ImageHeader& header, const ImageBox& box) {
  const StoredRegion region = stored_region(header, box);
  Pixels rows;
  decode_png(bytes, options, rows, region.top + region.height);
  if (!rows.error.empty()) return rows;
  const int64_t channels = options.channels;
  Pixels out;
  out.height = region.height;
  out.width = region.width;
  out.data.resize(static_cast<size_t>(out.height * out.width * channels));
  const size_t row_bytes = static_cast<size_t>(out.width * channels);
  for (int64_t y = 0; y < out.height; ++y) {
    std::memcpy(out.data.data() + y * row_bytes,
                rows.data.data() + ((region.top + y) * rows.width + region.left) * channels, row_bytes);
  }
  orient(header.orientation, channels, out);
  return out;
}

// Pixels resized into dst (height x width x channels) with torch's kernels: bilinear with antialiasing
// (torchvision's Resize on uint8 tensors), rounded to uint8; or nearest, for masks of class ids.
void resize_into(const Pixels& pixels, int64_t channels, int64_t height, int64_t width, bool nearest, uint8_t* dst) {
  // Called from reader threads: torch's kernel runs serially here instead of starting a thread team
  // per reader thread.
  c10::ParallelGuard serial(true);
  const auto bytes = at::TensorOptions().dtype(at::kByte);
  const at::Tensor source = at::from_blob(const_cast<uint8_t*>(pixels.data.data()),
                                          {pixels.height, pixels.width, channels}, bytes);
  const at::Tensor planes = source.permute({2, 0, 1}).unsqueeze(0);
  at::Tensor resized = at::empty({1, channels, height, width}, bytes);
  if (nearest) {
    at::upsample_nearest2d_out(resized, planes, {height, width});
  } else {
    ops::bilinear_resize_into(planes, resized, /*antialias=*/true);  // torchvision's Resize, rounded as it rounds
  }
  at::from_blob(dst, {height, width, channels}, bytes).copy_(resized[0].permute({1, 2, 0}));
}

// work(i) for i in [0, count) on `threads` threads (this one among them); work must not throw.
template <typename Work>
void on_threads(size_t count, int64_t threads, Work work) {
  std::atomic<size_t> next{0};
  auto loop = [&] {
    for (size_t i = next++; i < count; i = next++) work(i);
  };
  std::vector<std::thread> pool;
  const int64_t workers = std::min<int64_t>(threads, static_cast<int64_t>(count));
  for (int64_t t = 1; t < workers; ++t) pool.emplace_back(loop);
  loop();
  wait_for_decoders([&] {
    for (auto& thread : pool) thread.join();
  });
}

std::string size_text(int64_t height, int64_t width) { return std::to_string(height) + "x" + std::to_string(width); }

// What errors call a file: "mask" or "image".
const char* file_kind(const DecodeOptions& options) { return options.mask ? "mask" : "image"; }

// decode_image_into, with a missing reader reported in `missing_library` instead of thrown (reader threads).
std::string decode_into(const std::string& path, const DecodeOptions& options, int64_t height, int64_t width,
                        bool resize, uint8_t* dst, bool& missing_library) {
  Pixels pixels = decode(path, options);
  missing_library = pixels.missing_library;
  if (!pixels.error.empty()) return pixels.error;
  if (pixels.height == height && pixels.width == width) {
    std::memcpy(dst, pixels.data.data(), pixels.data.size());
  } else if (resize) {
    try {
      resize_into(pixels, options.channels, height, width, /*nearest=*/options.mask, dst);
    } catch (const std::exception& e) {
      return std::string("cannot resize: ") + e.what();
    }
  } else {
    return "is " + size_text(pixels.height, pixels.width) + " but the data set's images are " +
           size_text(height, width) + "; " + mixed_sizes_hint();
  }
  return {};
}

}  // namespace

void check_image_request(const DecodeOptions& options, int64_t height, int64_t width) {
  if (options.channels != 1 && options.channels != 3) {
    throw ConfigError("images can be read with 1 (grey) or 3 (RGB) channels, not " + std::to_string(options.channels));
  }
  if (options.mask && options.channels != 1) {
    throw ConfigError("masks are read with 1 channel (a class id per pixel), not " + std::to_string(options.channels));
  }
  if ((height > 0) != (width > 0) || height < 0 || width < 0) {
    throw ConfigError("image size must be two positive numbers (height, width) or none, got " +
                      size_text(height, width));
  }
}

at::Tensor decode_image(const std::string& path, const DecodeOptions& options) {
  check_image_request(options, 0, 0);
  Pixels pixels = decode(path, options);
  const std::string named = std::string(file_kind(options)) + " '" + path + "'";
  if (pixels.missing_library) throw MissingReaderError(named + " " + pixels.error);
  if (!pixels.error.empty()) throw ConfigError(named + ": " + pixels.error);
  at::Tensor out = at::empty({pixels.height, pixels.width, options.channels}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(out.data_ptr(), pixels.data.data(), pixels.data.size());
  return out;
}

std::string decode_image_into(const std::string& path, const DecodeOptions& options, int64_t height, int64_t width,
                              bool resize, uint8_t* dst) {
  bool missing = false;
  std::string error = decode_into(path, options, height, width, resize, dst, missing);
  if (missing) throw MissingReaderError(std::string(file_kind(options)) + " '" + path + "' " + error);
  return error;
}

DecodeScaling parse_decode_scaling(const std::string& name) {
  if (name == "exact") return DecodeScaling::kExact;
  if (name == "fast") return DecodeScaling::kFast;
  throw ConfigError("decode must be 'fast' (JPEGs decoded at the DCT scale that keeps what is used at least its "
                    "output size) or 'exact' (at full size, the pixels of a full decode), got '" + name + "'");
}

struct ImageFile::State {
  std::vector<unsigned char> bytes;
  bool jpeg = false;        // read by boxes (the DCT scale too)
  bool png_rows = false;    // a PNG read by boxes, down to the box's last row (read_png_header); else decoded whole
  ImageHeader header;       // a JPEG's or such a PNG's, once read
  bool header_read = false;
  Pixels whole;             // anything else (or what fails as neither), decoded once, upright
  bool whole_read = false;
};

ImageFile::ImageFile(std::string path, DecodeOptions options)
    : path_(std::move(path)), options_(options), state_(std::make_unique<State>()) {
  check_image_request(options_, 0, 0);
  std::string error;
  state_->bytes = read_file(path_, error);
  if (!error.empty()) throw ConfigError(std::string(file_kind(options_)) + " '" + path_ + "': " + error);
  state_->jpeg = is_jpeg(state_->bytes) && !options_.mask;  // a JPEG mask is refused by decode_bytes
}

ImageFile::~ImageFile() = default;

namespace {

// Throws the error of pixels that failed, naming the file, as decode_image does.
void throw_if_failed(const Pixels& pixels, const std::string& path, const DecodeOptions& options) {
  const std::string named = std::string(file_kind(options)) + " '" + path + "'";
  if (pixels.missing_library) throw MissingReaderError(named + " " + pixels.error);
  if (!pixels.error.empty()) throw ConfigError(named + ": " + pixels.error);
}

at::Tensor as_tensor(const Pixels& pixels, int64_t channels) {
  at::Tensor out = at::empty({pixels.height, pixels.width, channels}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(out.data_ptr(), pixels.data.data(), pixels.data.size());
  return out;
}

}  // namespace

std::array<int64_t, 2> ImageFile::size() {
  State& state = *state_;
  if (state.jpeg) {
    if (!state.header_read) {
      Pixels failed;
      state.header = jpeg_header(state.bytes, options_, failed);
      throw_if_failed(failed, path_, options_);
      state.header_read = true;
    }
    return {state.header.height, state.header.width};
  }
  if (!state.header_read && is_png(state.bytes) && !options_.mask) {
    Pixels stored;
    bool rows_readable = false;
    state.header.orientation = read_png_header(state.bytes, options_, stored, rows_readable);
    throw_if_failed(stored, path_, options_);
    state.header.height = state.header.transposed() ? stored.width : stored.height;
    state.header.width = state.header.transposed() ? stored.height : stored.width;
    state.png_rows = rows_readable;
  }
  state.header_read = true;
  if (state.png_rows) return {state.header.height, state.header.width};
  if (!state.whole_read) {
    state.whole = decode_bytes(state.bytes, options_);
    throw_if_failed(state.whole, path_, options_);
    state.whole_read = true;
  }
  return {state.whole.height, state.whole.width};
}

at::Tensor ImageFile::read(const ImageBox& box, int64_t least_height, int64_t least_width, DecodeScaling scaling) {
  const auto [height, width] = size();
  if (box.top < 0 || box.left < 0 || box.height < 1 || box.width < 1 || box.top + box.height > height ||
      box.left + box.width > width) {
    throw ConfigError(std::string(file_kind(options_)) + " '" + path_ + "': the box (top " + std::to_string(box.top) +
                      ", left " + std::to_string(box.left) + ", " + size_text(box.height, box.width) +
                      ") is not inside the image (" + size_text(height, width) + ")");
  }
  if (state_->png_rows) {
    const Pixels pixels = decode_png_box(state_->bytes, options_, state_->header, box);
    throw_if_failed(pixels, path_, options_);
    return as_tensor(pixels, options_.channels);
  }
  if (!state_->jpeg) {
    const Pixels& whole = state_->whole;
    const int64_t channels = options_.channels;
    at::Tensor out = at::empty({box.height, box.width, channels}, at::TensorOptions().dtype(at::kByte));
    const size_t row_bytes = static_cast<size_t>(box.width * channels);
    for (int64_t y = 0; y < box.height; ++y) {
      std::memcpy(out.data_ptr<uint8_t>() + y * row_bytes,
                  whole.data.data() + ((box.top + y) * whole.width + box.left) * channels, row_bytes);
    }
    return out;
  }
  const Pixels pixels = decode_jpeg_box(state_->bytes, options_, state_->header, box, least_height, least_width,
                                        scaling);
  throw_if_failed(pixels, path_, options_);
  return as_tensor(pixels, options_.channels);
}

namespace {

// Whether image `i` was decoded; one that was not is skipped (its "path: why" added to `skipped`) where skip_errors
// allows, else its error is thrown. A missing decoder library is gpucore's build, never the file's: always thrown.
bool decoded_or_skipped(const Pixels& pixels, const DecodeOptions& options, const std::vector<std::string>& paths,
                        size_t i, bool skip_errors, std::vector<std::string>& skipped) {
  const std::string named = std::string(file_kind(options)) + " '" + paths[i] + "'";
  if (pixels.missing_library) throw MissingReaderError(named + " " + pixels.error);
  if (pixels.error.empty()) return true;
  if (!skip_errors) {
    throw ConfigError(named + " (index " + std::to_string(i) + "): " + pixels.error +
                      " (on_error: skip leaves unreadable files out)");
  }
  skipped.push_back(paths[i] + ": " + pixels.error);
  return false;
}

}  // namespace

DecodedImages decode_images(const std::vector<std::string>& paths, const DecodeOptions& options, int64_t threads,
                            bool skip_errors, int64_t height, int64_t width) {
  check_image_request(options, height, width);
  const int64_t channels = options.channels;
  if (threads < 1) throw ConfigError("threads must be >= 1, got " + std::to_string(threads));
  std::vector<Pixels> decoded(paths.size());
  on_threads(paths.size(), threads, [&](size_t i) {
      Pixels& pixels = decoded[i];
      try {  // an exception must not escape a thread (that would end the process): it is this file's error
        if (height == 0) {  // each image at its own size; checked to agree below
          pixels = decode(paths[i], options);
          return;
        }
        pixels.height = height;
        pixels.width = width;
        pixels.data.resize(static_cast<size_t>(height * width * channels));
        pixels.error = decode_into(paths[i], options, height, width, /*resize=*/true, pixels.data.data(),
                                   pixels.missing_library);
      } catch (const std::exception& e) {
        pixels.data.clear();
        pixels.error = std::string("cannot be decoded: ") + e.what();
      }
  });

  DecodedImages result;
  const Pixels* first = nullptr;
  for (size_t i = 0; i < paths.size(); ++i) {
    const Pixels& pixels = decoded[i];
    if (!decoded_or_skipped(pixels, options, paths, i, skip_errors, result.skipped)) continue;
    if (first == nullptr) first = &pixels;
    if (pixels.height != first->height || pixels.width != first->width) {
      throw ConfigError(std::string(file_kind(options)) + " '" + paths[i] + "' is " +
                        size_text(pixels.height, pixels.width) + " but '" + paths[result.kept.front()] + "' is " +
                        size_text(first->height, first->width) + "; " + mixed_sizes_hint());
    }
    result.kept.push_back(static_cast<int64_t>(i));
  }
  const int64_t out_height = first ? first->height : height, out_width = first ? first->width : width;
  result.images = at::empty({static_cast<int64_t>(result.kept.size()), out_height, out_width, channels},
                            at::TensorOptions().dtype(at::kByte));
  auto* dst = static_cast<uint8_t*>(result.images.data_ptr());
  const size_t image_bytes = static_cast<size_t>(out_height * out_width * channels);
  for (size_t k = 0; k < result.kept.size(); ++k) {
    std::memcpy(dst + k * image_bytes, decoded[result.kept[k]].data.data(), image_bytes);
  }
  return result;
}

DecodedImageList decode_images_at_own_size(const std::vector<std::string>& paths, const DecodeOptions& options,
                                           int64_t threads, bool skip_errors, int64_t max_shorter_side,
                                           DecodeScaling scaling) {
  check_image_request(options, 0, 0);
  const int64_t channels = options.channels;
  if (threads < 1) throw ConfigError("threads must be >= 1, got " + std::to_string(threads));
  if (max_shorter_side < 0) {
    throw ConfigError("max_resolution must be >= 0 (0: images at full size), got " + std::to_string(max_shorter_side));
  }
  std::vector<Pixels> decoded(paths.size());
  std::vector<at::Tensor> images(paths.size());
  std::atomic<int64_t> downsized{0};
  on_threads(paths.size(), threads, [&](size_t i) {
    Pixels& pixels = decoded[i];
    try {  // an exception must not escape a thread (that would end the process): it is this file's error
      // torchvision's _compute_resized_output_size: the shorter side to the bound, the longer in proportion
      const auto bounded = [&](int64_t h, int64_t w) {
        const int64_t shorter = std::min(h, w), longer = std::max(h, w);
        const int64_t resized_longer = static_cast<int64_t>(static_cast<double>(max_shorter_side) * longer / shorter);
        return h <= w ? std::array<int64_t, 2>{max_shorter_side, resized_longer}
                      : std::array<int64_t, 2>{resized_longer, max_shorter_side};
      };
      std::vector<unsigned char> bytes = read_file(paths[i], pixels.error);
      if (!pixels.error.empty()) return;
      int64_t full_height = 0, full_width = 0;  // the image's upright size at full scale
      if (scaling == DecodeScaling::kFast && max_shorter_side > 0 && is_jpeg(bytes) && !options.mask) {
        // A JPEG larger than the bound: decoded at the DCT scale that keeps it at least the bound.
        const ImageHeader header = jpeg_header(bytes, options, pixels);
        if (!pixels.error.empty()) return;
        if (std::min(header.height, header.width) > max_shorter_side) {
          const auto [least_height, least_width] = bounded(header.height, header.width);
          pixels = decode_jpeg_box(bytes, options, header, {0, 0, header.height, header.width}, least_height,
                                   least_width, scaling);
          full_height = header.height, full_width = header.width;
        }
      }
      if (full_height == 0 && pixels.error.empty()) {
        pixels = decode_bytes(bytes, options);
        full_height = pixels.height, full_width = pixels.width;
      }
      if (!pixels.error.empty()) return;
      if (max_shorter_side == 0 || std::min(full_height, full_width) <= max_shorter_side) {
        images[i] = at::empty({pixels.height, pixels.width, channels}, at::TensorOptions().dtype(at::kByte));
        std::memcpy(images[i].data_ptr(), pixels.data.data(), pixels.data.size());
        return;
      }
      const auto [height, width] = bounded(full_height, full_width);
      images[i] = at::empty({height, width, channels}, at::TensorOptions().dtype(at::kByte));
      resize_into(pixels, channels, height, width, /*nearest=*/options.mask, images[i].data_ptr<uint8_t>());
      ++downsized;
    } catch (const std::exception& e) {
      images[i] = at::Tensor();
      pixels.error = std::string("cannot be decoded: ") + e.what();
    }
    pixels.data = {};  // the image is kept in images[i]
  });
  DecodedImageList result;
  result.downsized = downsized.load();
  for (size_t i = 0; i < paths.size(); ++i) {
    if (!decoded_or_skipped(decoded[i], options, paths, i, skip_errors, result.skipped)) continue;
    result.images.push_back(std::move(images[i]));
    result.kept.push_back(static_cast<int64_t>(i));
  }
  return result;
}

std::string mixed_sizes_hint() {
  return "a data set needs images of one size: give them one with config key data_kwargs: {size: [H, W]} (the "
         "readers' size argument: every image resized to it; for segmentation pairs "
         "gpucore.data.read_segmentation(images, masks, size=(H, W)), which resizes the masks alike), or, for a "
         "folder of classes, start config key transforms with RandomResizedCrop: {size: S} (training) or Resize: "
         "{size: S} + CenterCrop: {size: S}, which crop each image at its own size (segmentation pairs are not "
         "cropped at their own sizes)";
}

std::string missing_reader_message(const std::string& format) {
  if (format != "png" && format != "jpeg") throw ConfigError("image format must be png or jpeg, got '" + format + "'");
  const std::string name = format == "png" ? "PNG" : "JPEG", library = "lib" + format;
  return "is a " + name + " file, but gpucore was built without " + library + ", so it has no " + name +
         " reader. Install " + library +
         "'s headers (Debian/Ubuntu: apt-get install libpng-dev libjpeg-dev; macOS: brew install libpng jpeg-turbo; "
         "conda: conda install libpng libjpeg-turbo), then reinstall gpucore (pip install --force-reinstall "
         "--no-deps --no-cache-dir <gpucore source>)";
}

void set_max_image_pixels(int64_t pixels) {
  if (pixels < 0) throw ConfigError("max image pixels must be >= 0 (0: no limit), got " + std::to_string(pixels));
  max_pixels = pixels;
}

int64_t max_image_pixels() { return max_pixels.load(); }

void check_mask_table(const at::Tensor& table) {
  if (!table.defined() || table.dim() != 1 || table.size(0) != 256 || table.scalar_type() != at::kLong) {
    throw ConfigError("a mask table must be 256 int64 class ids (one per uint8 mask value), got " +
                      (table.defined() ? c10::str(table.scalar_type(), table.sizes()) : std::string("none")));
  }
}

at::Tensor mask_classes(const at::Tensor& masks, const at::Tensor& table) {
  if (masks.scalar_type() != at::kByte) throw ConfigError("masks must be uint8, got " + c10::str(masks.scalar_type()));
  check_mask_table(table);
  return table.to(masks.device()).index_select(0, masks.reshape(-1).to(at::kLong)).view(masks.sizes());
}

}  // namespace gpucore
