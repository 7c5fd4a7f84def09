// PNG (libpng) and JPEG (libjpeg-turbo) decoding, one image or many on a few threads, resized to
// a fixed size where asked.
#include <ATen/ops/_upsample_bilinear2d_aa.h>
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

#include <algorithm>
#include <atomic>
#include <csetjmp>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

#include "gpucore/data/readers.h"
#include "gpucore/errors.h"

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
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    error = "cannot open the file";
    return {};
  }
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(file), {});
}

#ifdef GPUCORE_WITH_PNG
void decode_png(const std::vector<unsigned char>& bytes, int64_t channels, Pixels& out) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size())) {
    out.error = std::string("corrupt PNG: ") + image.message;
    return;
  }
  if (too_many_pixels(image.width, image.height, out)) {
    png_image_free(&image);
    return;
  }
  // Read as 8-bit RGBA (sRGB, not premultiplied), then convert as Pillow does, so a PNG reads as the same photo saved
  // as JPEG would: convert('RGB') drops the alpha channel (no compositing), and convert('L') weighs R, G and B by
  // ITU-R 601-2 in integers. libpng's own grey and RGB outputs composite alpha on black and convert in linear light.
  image.format = PNG_FORMAT_RGBA;
  const int64_t pixels = static_cast<int64_t>(image.width) * image.height;
  std::vector<uint8_t> rgba(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, rgba.data(), 0, nullptr)) {
    out.error = std::string("corrupt PNG: ") + image.message;
    png_image_free(&image);
    return;
  }
  out.height = image.height;
  out.width = image.width;
  png_image_free(&image);
  out.data.resize(pixels * (channels == 1 ? 1 : 3));
  for (int64_t i = 0; i < pixels; ++i) {
    const uint8_t* px = rgba.data() + 4 * i;
    if (channels == 1) {  // Pillow's L24: (R * 19595 + G * 38470 + B * 7471 + 0x8000) >> 16
      out.data[i] = static_cast<uint8_t>((px[0] * 19595u + px[1] * 38470u + px[2] * 7471u + 0x8000u) >> 16);
    } else {
      out.data[3 * i] = px[0];
      out.data[3 * i + 1] = px[1];
      out.data[3 * i + 2] = px[2];
    }
  }
}
#else
void decode_png(const std::vector<unsigned char>&, int64_t, Pixels& out) { missing_library("png", out); }
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

// No object with a destructor is created between setjmp and a possible longjmp: `out` and `bytes`
// live in the caller.
void decode_jpeg(const std::vector<unsigned char>& bytes, int64_t channels, Pixels& out) {
  jpeg_decompress_struct info;
  JpegErrors errors;
  info.err = jpeg_std_error(&errors.manager);
  errors.manager.error_exit = on_jpeg_error;
  errors.manager.emit_message = on_jpeg_message;
  if (setjmp(errors.jump)) {
    jpeg_destroy_decompress(&info);
    out.error.assign("corrupt JPEG: ").append(errors.message);
    return;
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&info, TRUE);
  if (too_many_pixels(info.image_width, info.image_height, out)) {
    jpeg_destroy_decompress(&info);
    return;
  }
  info.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&info);
  out.height = info.output_height;
  out.width = info.output_width;
  out.data.resize(static_cast<size_t>(out.height * out.width * channels));
  // Up to 16 rows per call (a plain array: nothing with a destructor after setjmp), so libjpeg writes whole row
  // groups straight into the image.
  constexpr JDIMENSION kRows = 16;
  while (info.output_scanline < info.output_height) {
    JSAMPROW rows[kRows];
    const JDIMENSION count = std::min(kRows, info.output_height - info.output_scanline);
    for (JDIMENSION k = 0; k < count; ++k) {
      rows[k] = out.data.data() + static_cast<size_t>(info.output_scanline + k) * out.width * channels;
    }
    jpeg_read_scanlines(&info, rows, count);
  }
  jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
}
#else
void decode_jpeg(const std::vector<unsigned char>&, int64_t, Pixels& out) {
  missing_library("jpeg", out);
}
#endif

Pixels decode(const std::string& path, int64_t channels) {
  Pixels out;
  const std::vector<unsigned char> bytes = read_file(path, out.error);
  if (!out.error.empty()) return out;
  static const unsigned char kPng[] = {0x89, 'P', 'N', 'G'};
  if (bytes.size() >= 4 && std::memcmp(bytes.data(), kPng, 4) == 0) {
    decode_png(bytes, channels, out);
  } else if (bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) {
    decode_jpeg(bytes, channels, out);
  } else {
    out.error = "neither PNG nor JPEG (by its first bytes)";
  }
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
  const at::Tensor resized = nearest ? at::upsample_nearest2d(planes, {height, width})
                                     : at::_upsample_bilinear2d_aa(planes, {height, width}, /*align_corners=*/false);
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
  for (auto& thread : pool) thread.join();
}

std::string size_text(int64_t height, int64_t width) { return std::to_string(height) + "x" + std::to_string(width); }

// decode_image_into, with a missing reader reported in `missing_library` instead of thrown (reader threads).
std::string decode_into(const std::string& path, int64_t channels, int64_t height, int64_t width, bool resize,
                        bool nearest, uint8_t* dst, bool& missing_library) {
  Pixels pixels = decode(path, channels);
  missing_library = pixels.missing_library;
  if (!pixels.error.empty()) return pixels.error;
  if (pixels.height == height && pixels.width == width) {
    std::memcpy(dst, pixels.data.data(), pixels.data.size());
  } else if (resize) {
    try {
      resize_into(pixels, channels, height, width, nearest, dst);
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

void check_image_request(int64_t channels, int64_t height, int64_t width) {
  if (channels != 1 && channels != 3) {
    throw ConfigError("images can be read with 1 (grey) or 3 (RGB) channels, not " + std::to_string(channels));
  }
  if ((height > 0) != (width > 0) || height < 0 || width < 0) {
    throw ConfigError("image size must be two positive numbers (height, width) or none, got " +
                      size_text(height, width));
  }
}

at::Tensor decode_image(const std::string& path, int64_t channels) {
  check_image_request(channels, 0, 0);
  Pixels pixels = decode(path, channels);
  if (pixels.missing_library) throw MissingReaderError("image '" + path + "' " + pixels.error);
  if (!pixels.error.empty()) throw ConfigError("image '" + path + "': " + pixels.error);
  at::Tensor out = at::empty({pixels.height, pixels.width, channels}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(out.data_ptr(), pixels.data.data(), pixels.data.size());
  return out;
}

std::string decode_image_into(const std::string& path, int64_t channels, int64_t height, int64_t width, bool resize,
                              bool nearest, uint8_t* dst) {
  bool missing = false;
  std::string error = decode_into(path, channels, height, width, resize, nearest, dst, missing);
  if (missing) throw MissingReaderError("image '" + path + "' " + error);
  return error;
}

namespace {

// Whether image `i` was decoded; one that was not is skipped (its "path: why" added to `skipped`) where skip_errors
// allows, else its error is thrown. A missing decoder library is gpucore's build, never the file's: always thrown.
bool decoded_or_skipped(const Pixels& pixels, const std::vector<std::string>& paths, size_t i, bool skip_errors,
                        std::vector<std::string>& skipped) {
  if (pixels.missing_library) throw MissingReaderError("image '" + paths[i] + "' " + pixels.error);
  if (pixels.error.empty()) return true;
  if (!skip_errors) throw ConfigError("image '" + paths[i] + "' (index " + std::to_string(i) + "): " + pixels.error);
  skipped.push_back(paths[i] + ": " + pixels.error);
  return false;
}

}  // namespace

DecodedImages decode_images(const std::vector<std::string>& paths, int64_t channels, int64_t threads, bool skip_errors,
                            int64_t height, int64_t width, bool nearest) {
  check_image_request(channels, height, width);
  if (threads < 1) throw ConfigError("threads must be >= 1, got " + std::to_string(threads));
  std::vector<Pixels> decoded(paths.size());
  on_threads(paths.size(), threads, [&](size_t i) {
      Pixels& pixels = decoded[i];
      try {  // an exception must not escape a thread (that would end the process): it is this file's error
        if (height == 0) {  // each image at its own size; checked to agree below
          pixels = decode(paths[i], channels);
          return;
        }
        pixels.height = height;
        pixels.width = width;
        pixels.data.resize(static_cast<size_t>(height * width * channels));
        pixels.error = decode_into(paths[i], channels, height, width, /*resize=*/true, nearest, pixels.data.data(),
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
    if (!decoded_or_skipped(pixels, paths, i, skip_errors, result.skipped)) continue;
    if (first == nullptr) first = &pixels;
    if (pixels.height != first->height || pixels.width != first->width) {
      throw ConfigError("image '" + paths[i] + "' is " + size_text(pixels.height, pixels.width) + " but '" +
                        paths[result.kept.front()] + "' is " + size_text(first->height, first->width) + "; " +
                        mixed_sizes_hint());
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

DecodedImageList decode_images_at_own_size(const std::vector<std::string>& paths, int64_t channels, int64_t threads,
                                           bool skip_errors, int64_t max_shorter_side) {
  check_image_request(channels, 0, 0);
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
      pixels = decode(paths[i], channels);
      if (!pixels.error.empty()) return;
      const int64_t shorter = std::min(pixels.height, pixels.width), longer = std::max(pixels.height, pixels.width);
      if (max_shorter_side == 0 || shorter <= max_shorter_side) {
        images[i] = at::empty({pixels.height, pixels.width, channels}, at::TensorOptions().dtype(at::kByte));
        std::memcpy(images[i].data_ptr(), pixels.data.data(), pixels.data.size());
        return;
      }
      // torchvision's _compute_resized_output_size: the shorter side to the bound, the longer in proportion
      const int64_t resized_longer = static_cast<int64_t>(static_cast<double>(max_shorter_side) * longer / shorter);
      const int64_t height = pixels.height <= pixels.width ? max_shorter_side : resized_longer;
      const int64_t width = pixels.height <= pixels.width ? resized_longer : max_shorter_side;
      images[i] = at::empty({height, width, channels}, at::TensorOptions().dtype(at::kByte));
      resize_into(pixels, channels, height, width, /*nearest=*/false, images[i].data_ptr<uint8_t>());
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
    if (!decoded_or_skipped(decoded[i], paths, i, skip_errors, result.skipped)) continue;
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

at::Tensor mask_classes(const at::Tensor& masks) {
  const at::Tensor classes = masks.to(at::kLong);
  return at::where(masks.eq(255), 1, classes);
}

}  // namespace gpucore
