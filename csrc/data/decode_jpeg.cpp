// JPEG decoding with libjpeg(-turbo): decode_jpeg.h.
#include "data/decode_jpeg.h"

#include <algorithm>
#ifdef GPUCORE_WITH_JPEG
#include <jpeglib.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <tuple>

#include "data/exif.h"
#endif

namespace gpucore::decoding {

bool is_jpeg(const std::vector<unsigned char>& bytes) {
  return bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF;
}

std::pair<int64_t, int64_t> scaled_span(int64_t begin, int64_t length, int scale, int64_t full) {
  if (scale == 1) return {begin, length};
  const int64_t side = (full + scale - 1) / scale;
  const int64_t first = std::min((2 * begin + scale) / (2 * scale), side - 1);
  const int64_t end = std::clamp((2 * (begin + length) + scale) / (2 * scale), first + 1, side);
  return {first, end - first};
}

#ifdef GPUCORE_WITH_JPEG
namespace {

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

}  // namespace

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

int read_jpeg_header(const std::vector<unsigned char>& bytes, const DecodeOptions& options, Pixels& out) {
  std::vector<uint8_t> unused;
  return read_jpeg(bytes, options, nullptr, /*header_only=*/true, unused, out);
}
#else
int decode_jpeg(const std::vector<unsigned char>&, const DecodeOptions&, const StoredRegion*, Pixels& out) {
  missing_library("jpeg", out);
  return 1;
}
int read_jpeg_header(const std::vector<unsigned char>&, const DecodeOptions&, Pixels& out) {
  missing_library("jpeg", out);
  return 1;
}
#endif

}  // namespace gpucore::decoding
