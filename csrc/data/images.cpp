// PNG (libpng) and JPEG (libjpeg-turbo) decoding, one image or many on a few threads.
#include <ATen/ops/empty.h>
#include <jpeglib.h>
#include <png.h>

#include <atomic>
#include <csetjmp>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

#include "gpucore/errors.h"
#include "gpucore/readers.h"

namespace gpucore {

namespace {

struct Pixels {
  std::vector<uint8_t> data;
  int64_t height = 0, width = 0;
  std::string error;  // empty when decoded
};

std::vector<unsigned char> read_file(const std::string& path, std::string& error) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    error = "cannot open the file";
    return {};
  }
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(file), {});
}

void decode_png(const std::vector<unsigned char>& bytes, int64_t channels, Pixels& out) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size())) {
    out.error = std::string("corrupt PNG: ") + image.message;
    return;
  }
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;  // alpha composited on black
  out.height = image.height;
  out.width = image.width;
  out.data.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, out.data.data(), 0, nullptr)) {
    out.error = std::string("corrupt PNG: ") + image.message;
  }
  png_image_free(&image);
}

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

// No object with a destructor is created between setjmp and a possible longjmp: `out` and `bytes`
// live in the caller.
void decode_jpeg(const std::vector<unsigned char>& bytes, int64_t channels, Pixels& out) {
  jpeg_decompress_struct info;
  JpegErrors errors;
  info.err = jpeg_std_error(&errors.manager);
  errors.manager.error_exit = on_jpeg_error;
  if (setjmp(errors.jump)) {
    jpeg_destroy_decompress(&info);
    out.error.assign("corrupt JPEG: ").append(errors.message);
    return;
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&info, TRUE);
  info.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&info);
  out.height = info.output_height;
  out.width = info.output_width;
  out.data.resize(static_cast<size_t>(out.height * out.width * channels));
  while (info.output_scanline < info.output_height) {
    JSAMPROW row = out.data.data() + static_cast<size_t>(info.output_scanline) * out.width * channels;
    jpeg_read_scanlines(&info, &row, 1);
  }
  jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
}

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

void check_channels(int64_t channels) {
  if (channels != 1 && channels != 3) {
    throw ConfigError("images can be read with 1 (grey) or 3 (RGB) channels, not " + std::to_string(channels));
  }
}

}  // namespace

at::Tensor decode_image(const std::string& path, int64_t channels) {
  check_channels(channels);
  Pixels pixels = decode(path, channels);
  if (!pixels.error.empty()) throw ConfigError("image '" + path + "': " + pixels.error);
  at::Tensor out = at::empty({pixels.height, pixels.width, channels}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(out.data_ptr(), pixels.data.data(), pixels.data.size());
  return out;
}

DecodedImages decode_images(const std::vector<std::string>& paths, int64_t channels, int64_t threads, bool skip_errors) {
  check_channels(channels);
  if (threads < 1) throw ConfigError("threads must be >= 1, got " + std::to_string(threads));
  std::vector<Pixels> decoded(paths.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < paths.size(); i = next++) decoded[i] = decode(paths[i], channels);
  };
  std::vector<std::thread> pool;
  const int64_t workers = std::min<int64_t>(threads, static_cast<int64_t>(paths.size()));
  for (int64_t t = 1; t < workers; ++t) pool.emplace_back(work);
  work();
  for (auto& thread : pool) thread.join();

  DecodedImages result;
  const Pixels* first = nullptr;
  for (size_t i = 0; i < paths.size(); ++i) {
    const Pixels& pixels = decoded[i];
    if (!pixels.error.empty()) {
      if (!skip_errors) throw ConfigError("image '" + paths[i] + "' (index " + std::to_string(i) + "): " + pixels.error);
      result.skipped.push_back(paths[i] + ": " + pixels.error);
      continue;
    }
    if (first == nullptr) first = &pixels;
    if (pixels.height != first->height || pixels.width != first->width) {
      throw ConfigError("image '" + paths[i] + "' is " + std::to_string(pixels.height) + "x" +
                        std::to_string(pixels.width) + " but '" + paths[result.kept.front()] + "' is " +
                        std::to_string(first->height) + "x" + std::to_string(first->width) +
                        "; a data set needs images of one size (resize them first)");
    }
    result.kept.push_back(static_cast<int64_t>(i));
  }
  const int64_t height = first ? first->height : 0, width = first ? first->width : 0;
  result.images = at::empty({static_cast<int64_t>(result.kept.size()), height, width, channels},
                            at::TensorOptions().dtype(at::kByte));
  auto* dst = static_cast<uint8_t*>(result.images.data_ptr());
  const size_t image_bytes = static_cast<size_t>(height * width * channels);
  for (size_t k = 0; k < result.kept.size(); ++k) {
    std::memcpy(dst + k * image_bytes, decoded[result.kept[k]].data.data(), image_bytes);
  }
  return result;
}

}  // namespace gpucore
