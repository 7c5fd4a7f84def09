#pragma once
// Readers for training data on disk. Every reader checks what it reads and names the file (and the
// offset or index) in its error, a ConfigError.
#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace gpucore {

// An IDX file (MNIST, Fashion-MNIST, EMNIST), plain or gzip-compressed (detected from the content):
// a tensor of the file's type and dimensions (uint8 N x H x W for images, N for labels).
at::Tensor read_idx(const std::string& path);

// A .npy file: little-endian bool, (u)int8/16/32/64, float16/32/64, C order.
at::Tensor read_npy(const std::string& path);

// A .npz archive (np.savez or np.savez_compressed): its arrays by name (without ".npy"), in archive order.
std::vector<std::pair<std::string, at::Tensor>> read_npz(const std::string& path);

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

// Checks what an image reader is asked for: 1 or 3 channels (masks 1); a size of two positive numbers, or 0 x 0
// (the images' own size). ConfigError otherwise.
void check_image_request(const DecodeOptions& options, int64_t height, int64_t width);

// One PNG or JPEG image (detected from its first bytes) as uint8 H x W x channels (1: grey, 3: RGB).
at::Tensor decode_image(const std::string& path, const DecodeOptions& options);

struct DecodedImages {
  at::Tensor images;                 // uint8 N x H x W x channels, in the order of the paths kept
  std::vector<int64_t> kept;         // index into the paths of each image
  std::vector<std::string> skipped;  // "path: why", when skipping is allowed
};

// Decodes `paths` on `threads` threads (the result does not depend on the count). With height and
// width > 0 every image is resized to that size (bilinear with antialiasing, like torchvision's
// Resize; nearest for masks of class ids); with 0 all images must share one size. skip_errors:
// unreadable files are left out and reported instead of raising.
DecodedImages decode_images(const std::vector<std::string>& paths, const DecodeOptions& options, int64_t threads,
                            bool skip_errors, int64_t height = 0, int64_t width = 0);

struct DecodedImageList {
  std::vector<at::Tensor> images;    // uint8 H x W x channels each, at its own size, in the order of the paths kept
  std::vector<int64_t> kept;         // index into the paths of each image
  std::vector<std::string> skipped;  // "path: why", when skipping is allowed
  int64_t downsized = 0;             // images kept resized to the bound
};

// Decodes `paths` on `threads` threads, each image at its own size; one whose shorter side is longer than
// `max_shorter_side` (> 0) is resized to that shorter side, its aspect kept (torchvision's Resize(max_shorter_side),
// as FFCV's max_resolution bounds its stored images); 0: every image at full size.
DecodedImageList decode_images_at_own_size(const std::vector<std::string>& paths, const DecodeOptions& options,
                                           int64_t threads, bool skip_errors, int64_t max_shorter_side);

// What brings images of mixed sizes to one, for the errors that find them (names the config keys).
std::string mixed_sizes_hint();

// Decodes one image into dst (height x width x channels). An image of another size is resized when
// `resize` (nearest for masks, else bilinear, as above), else refused. Returns why it failed, or "" (for reader
// threads: no exceptions).
std::string decode_image_into(const std::string& path, const DecodeOptions& options, int64_t height, int64_t width,
                              bool resize, uint8_t* dst);

// Why a file of `format` ("png" or "jpeg") cannot be read by a gpucore built without its library, and
// how to install it (the one text for the C++ readers and the Python check before decoding).
std::string missing_reader_message(const std::string& format);

// The most pixels an image header may claim: checked before anything is allocated, so a small file
// claiming a huge image fails as that file's error (a decompression-bomb guard like Pillow's
// MAX_IMAGE_PIXELS; the default is Pillow's error threshold, 178,956,970). 0: no limit. Process-wide.
constexpr int64_t kDefaultMaxImagePixels = 178956970;
void set_max_image_pixels(int64_t pixels);
int64_t max_image_pixels();

// Segmentation masks as decoded (uint8 class ids, any shape) as int64 class ids: the value is the class, except
// white (255), which is class 1 (black-and-white masks).
at::Tensor mask_classes(const at::Tensor& masks);

}  // namespace gpucore
