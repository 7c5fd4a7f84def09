// One box of an image decoded alone, and ImageFile, which reads an image by its header, then by boxes: decode_box.h,
// readers.h.
#include "data/decode_box.h"

#include <ATen/ops/empty.h>

#include <cstring>
#include <memory>

#include "data/decode_jpeg.h"
#include "data/decode_png.h"
#include "data/exif.h"
#include "data/images.h"
#include "gpucore/errors.h"

namespace gpucore {

namespace decoding {

namespace {

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

}  // namespace

ImageHeader jpeg_header(const std::vector<unsigned char>& bytes, const DecodeOptions& options, Pixels& out) {
  ImageHeader header;
  header.orientation = read_jpeg_header(bytes, options, out);
  header.height = header.transposed() ? out.width : out.height;
  header.width = header.transposed() ? out.height : out.width;
  out.height = out.width = 0;
  return header;
}

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

}  // namespace decoding

using decoding::decode_bytes;
using decoding::decode_jpeg_box;
using decoding::decode_png_box;
using decoding::file_kind;
using decoding::ImageHeader;
using decoding::is_jpeg;
using decoding::is_png;
using decoding::jpeg_header;
using decoding::Pixels;
using decoding::read_file;
using decoding::read_png_header;
using decoding::size_text;

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

}  // namespace gpucore
