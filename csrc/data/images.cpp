// The readers' entry points (readers.h) on the format decoders (decode_png.cpp, decode_jpeg.cpp; exif.cpp; the
// other formats through decode_other_format): one image file decoded whole and upright (decode_bytes), one image or
// many on a few threads, resized to a fixed size where asked; segmentation masks' values as class ids.
#include "data/images.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/upsample_nearest2d.h>
#include <c10/util/ParallelGuard.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "data/decode_box.h"
#include "data/decode_jpeg.h"
#include "data/decode_png.h"
#include "data/exif.h"
#include "gpucore/data/readers.h"
#include "gpucore/errors.h"
#include "ops/cpu/bilinear_resize.h"

namespace gpucore {

namespace decoding {

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

}  // namespace decoding

using decoding::decode_bytes;
using decoding::decode_jpeg_box;
using decoding::file_kind;
using decoding::ImageHeader;
using decoding::is_jpeg;
using decoding::jpeg_header;
using decoding::Pixels;
using decoding::read_file;
using decoding::size_text;

namespace {

Pixels decode(const std::string& path, const DecodeOptions& options) {
  Pixels out;
  const std::vector<unsigned char> bytes = read_file(path, out.error);
  if (!out.error.empty()) return out;
  return decode_bytes(bytes, options);
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
