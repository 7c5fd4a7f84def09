#pragma once
// Readers for training data on disk. Every reader checks what it reads and names the file (and the
// offset or index) in its error, a ConfigError.
#include <ATen/core/Tensor.h>

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gpucore/data/decode_options.h"

namespace gpucore {

// An IDX file (MNIST, Fashion-MNIST, EMNIST), plain or gzip-compressed (detected from the content):
// a tensor of the file's type and dimensions (uint8 N x H x W for images, N for labels).
at::Tensor read_idx(const std::string& path);

// A .npy file: little-endian bool, (u)int8/16/32/64, float16/32/64, C order.
at::Tensor read_npy(const std::string& path);

// A .npz archive (np.savez or np.savez_compressed): its arrays by name (without ".npy"), in archive order.
std::vector<std::pair<std::string, at::Tensor>> read_npz(const std::string& path);

// Checks what an image reader is asked for: 1 or 3 channels (masks 1); a size of two positive numbers, or 0 x 0
// (the images' own size). ConfigError otherwise.
void check_image_request(const DecodeOptions& options, int64_t height, int64_t width);

// One image (its format detected from its first bytes: PNG, JPEG, or one of the other formats above) as uint8
// H x W x channels (1: grey, 3: RGB).
at::Tensor decode_image(const std::string& path, const DecodeOptions& options);

// How far a JPEG may be reduced while it is decoded. kExact: never, the pixels decode_image gives. kFast: by libjpeg's
// DCT scaling (each side 1/2, 1/4 or 1/8, the file's 8x8 blocks decoded as 4x4, 2x2 or 1x1, as Pillow's draft() does),
// the most that keeps what is asked for at least the size it will be resized to; the pixels then differ from a
// full-size decode and resize by a bounded amount (docs/guides/data.md).
enum class DecodeScaling { kExact, kFast };

// Config key data_kwargs `decode`: "exact" or "fast"; ConfigError naming the valid values otherwise.
DecodeScaling parse_decode_scaling(const std::string& name);

// A box of an image in its upright pixels (after EXIF orientation): rows [top, top + height), columns [left,
// left + width).
struct ImageBox {
  int64_t top = 0, left = 0, height = 0, width = 0;
};

// An image file read in two steps: its upright size from the header, then the pixels of one box of it. A JPEG decodes
// only the rows and iMCU columns that cover the box (libjpeg-turbo's jpeg_skip_scanlines and jpeg_crop_scanline), the
// box mapped through the EXIF orientation to the stored image's pixels first; without scaling the box's pixels are
// bit for bit those of decode_image's whole image. A PNG is read down to the box's last row and no further where its
// orientation is known before its image data, it is not interlaced and its IDAT CRCs are right; any other file is
// decoded whole once, at the first call that needs pixels.
class ImageFile {
 public:
  // Reads the file's bytes. Errors (here and below) are ConfigErrors "image 'path': why" (MissingReaderError for a
  // format gpucore was built without).
  ImageFile(std::string path, DecodeOptions options);
  ~ImageFile();
  ImageFile(const ImageFile&) = delete;
  ImageFile& operator=(const ImageFile&) = delete;
  // The upright height and width (the header alone for a JPEG).
  std::array<int64_t, 2> size();
  // The pixels of `box` (inside the image) as uint8 h x w x channels. With kFast a JPEG is decoded at the smallest
  // DCT scale at which the box keeps at least least_height x least_width pixels (the size it will be resized to),
  // and h x w is the box at that scale (its edges rounded to the scaled pixels); else h x w is the box's size.
  at::Tensor read(const ImageBox& box, int64_t least_height, int64_t least_width, DecodeScaling scaling);

 private:
  struct State;
  std::string path_;
  DecodeOptions options_;
  std::unique_ptr<State> state_;
};

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
// as FFCV's max_resolution bounds its stored images); 0: every image at full size. With DecodeScaling::kFast a JPEG
// whose shorter side is longer than the bound is decoded at the DCT scale that keeps it at least the bound, then
// resized as above.
DecodedImageList decode_images_at_own_size(const std::vector<std::string>& paths, const DecodeOptions& options,
                                           int64_t threads, bool skip_errors, int64_t max_shorter_side,
                                           DecodeScaling scaling = DecodeScaling::kExact);

// A file of a format other than PNG and JPEG (WebP, BMP, GIF, TIFF, PPM, HEIC, AVIF), as the decoder set with
// set_other_format_decoder gives it: pixels height x width x channels, upright and converted as DecodeOptions asks
// (a mask: class ids), or the file's error; missing_library: the format's reader is not installed (never skipped).
struct OtherFormatImage {
  std::vector<uint8_t> data;
  int64_t height = 0, width = 0;
  std::string error;  // empty when decoded
  bool missing_library = false;
};
using OtherFormatDecoder = std::function<OtherFormatImage(const std::vector<unsigned char>& bytes,
                                                          const DecodeOptions& options, int64_t max_pixels)>;
// A wait a thread may have to do while decoders run on other threads (joining reader threads), run so that those
// decoders can finish: the Python module runs it with the GIL released, since its decoder (Pillow) takes the GIL.
using DecoderWait = std::function<void(const std::function<void()>& wait)>;

// Sets the decoder of the other formats, process-wide: gpucore._C sets Pillow's (python/gpucore/data/
// pillow_formats.py; docs/guides/data.md says why, measured), called on the reader threads. Without one (the core
// alone) such a file's error says that only PNG and JPEG are read here.
void set_other_format_decoder(OtherFormatDecoder decoder, DecoderWait wait);
// The other format's pixels of a file's bytes (the error when no decoder is set or it fails).
OtherFormatImage decode_other_format(const std::vector<unsigned char>& bytes, const DecodeOptions& options);
// Runs `wait` as the decoder set asks (directly when none is set).
void wait_for_decoders(const std::function<void()>& wait);

// What brings images of mixed sizes to one, for the errors that find them (names the config keys).
std::string mixed_sizes_hint();

// Decodes one image into dst (height x width x channels). An image of another size is resized when
// `resize` (nearest for masks, else bilinear, as above), else refused. Returns why it failed, or "" (for reader
// threads: no exceptions).
std::string decode_image_into(const std::string& path, const DecodeOptions& options, int64_t height, int64_t width,
                              bool resize, uint8_t* dst);

// Segmentation masks as decoded (uint8 values, any shape) as int64 class ids, through `table` (256 int64 entries:
// each value's class id, on any device). The table is the data set's reading of its values, decided once for the
// whole set (gpucore.data.image_files.mask_table: 255 void or black-and-white foreground, reduce_zero_label).
at::Tensor mask_classes(const at::Tensor& masks, const at::Tensor& table);
// ConfigError unless `table` is such a table.
void check_mask_table(const at::Tensor& table);

}  // namespace gpucore
