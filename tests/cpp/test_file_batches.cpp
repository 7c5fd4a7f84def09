// FileBatches on PNG files written here: the same batches as TensorBatches over the decoded images,
// for any thread count and prefetch depth; unreadable files raise (naming the file) or are skipped; palette
// masks read as their indices. And the PNG reader on what only libpng writes here (interlaced files).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <png.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gpucore/batches/batches.h"
#include "gpucore/batches/file_batches.h"
#include "gpucore/data/readers.h"
#include "gpucore/errors.h"

namespace gpucore {
namespace {

// `count` RGB PNGs of 6 x 7 with seeded random pixels.
std::vector<std::string> write_pngs(const std::string& prefix, int64_t count) {
  at::manual_seed(11);
  std::vector<std::string> paths;
  for (int64_t i = 0; i < count; ++i) {
    const at::Tensor pixels = at::randint(0, 256, {6, 7, 3}, at::kByte).contiguous();
    png_image image{};
    image.version = PNG_IMAGE_VERSION;
    image.width = 7;
    image.height = 6;
    image.format = PNG_FORMAT_RGB;
    paths.push_back(::testing::TempDir() + prefix + std::to_string(i) + ".png");
    EXPECT_TRUE(png_image_write_to_file(&image, paths.back().c_str(), 0, pixels.data_ptr(), 0, nullptr));
  }
  return paths;
}

AugmentConfig crop_flip_normalise() {
  AugmentConfig augment;
  augment.enabled = true;
  TransformSpec crop{"RandomCrop", {{"size", {6, 7}}, {"padding", {2}}}, {}};
  TransformSpec flip{"RandomHorizontalFlip", {}, {}};
  augment.transforms = {crop, flip};
  augment.mean = {0.5, 0.4, 0.3};
  augment.std = {0.2, 0.3, 0.25};
  return augment;
}

std::vector<std::pair<at::Tensor, at::Tensor>> epoch_of(EpochBatches& source, int64_t epoch) {
  source.start_epoch(epoch);
  std::vector<std::pair<at::Tensor, at::Tensor>> served;
  at::Tensor inputs, targets;
  while (source.next(inputs, targets)) served.emplace_back(inputs, targets);
  return served;
}

TEST(FileBatches, SameBatchesAsInMemoryForAnyThreadCount) {
  const std::vector<std::string> paths = write_pngs("stream", 23);
  const at::Tensor labels = at::arange(23);
  const DecodedImages decoded = decode_images(paths, {3}, 1, false);
  TensorBatches in_memory(decoded.images.permute({0, 3, 1, 2}).contiguous(), labels, 5, true, false, 3, at::kCPU,
                          crop_flip_normalise());
  for (const auto& [threads, prefetch] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 2}, {8, 6}}) {
    FileBatchesConfig config;
    config.threads = threads;
    config.prefetch = prefetch;
    FileBatches streamed(paths, labels, 5, true, false, 3, at::kCPU, crop_flip_normalise(), config);
    EXPECT_EQ(streamed.total_batches(), 5);
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      const auto expected = epoch_of(in_memory, epoch), got = epoch_of(streamed, epoch);
      ASSERT_EQ(got.size(), expected.size());
      for (size_t b = 0; b < got.size(); ++b) {
        EXPECT_TRUE(at::equal(got[b].second, expected[b].second)) << "threads " << threads << " batch " << b;
        EXPECT_TRUE(at::equal(got[b].first, expected[b].first)) << "threads " << threads << " batch " << b;
      }
    }
  }
}

TEST(FileBatches, ResumesMidEpochAndStopsEarlyWithoutHanging) {
  const std::vector<std::string> paths = write_pngs("resume", 17);
  FileBatchesConfig config;
  config.prefetch = 2;
  FileBatches source(paths, at::arange(17), 4, true, true, 9, at::kCPU, AugmentConfig{}, config);
  const auto whole = epoch_of(source, 1);
  ASSERT_EQ(whole.size(), 4u);  // drop_last
  source.start_epoch(1, 2);
  at::Tensor inputs, targets;
  ASSERT_TRUE(source.next(inputs, targets));
  EXPECT_TRUE(at::equal(targets, whole[2].second));
  EXPECT_TRUE(at::equal(inputs, whole[2].first));
  source.start_epoch(2);  // abandons the rest of epoch 1 while readers are busy
  ASSERT_TRUE(source.next(inputs, targets));
}

TEST(FileBatches, UnreadableFilesRaiseNamingTheFileOrAreSkipped) {
  std::vector<std::string> paths = write_pngs("broken", 6);
  paths[3] = ::testing::TempDir() + "does_not_exist.png";
  FileBatchesConfig config;
  FileBatches raising(paths, at::arange(6), 4, false, false, 0, at::kCPU, AugmentConfig{}, config);
  at::Tensor inputs, targets;
  try {
    raising.next(inputs, targets);
    FAIL() << "a missing file was served";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("does_not_exist.png' (index 3): cannot open"), std::string::npos) << e.what();
  }
  config.skip_errors = true;
  FileBatches skipping(paths, at::arange(6), 4, false, false, 0, at::kCPU, AugmentConfig{}, config);
  ASSERT_TRUE(skipping.next(inputs, targets));
  EXPECT_TRUE(at::equal(targets, at::tensor(std::vector<int64_t>{0, 1, 2})));
  ASSERT_TRUE(skipping.next(inputs, targets));
  EXPECT_EQ(targets.size(0), 2);
  ASSERT_EQ(skipping.skipped().size(), 1u);
  EXPECT_THROW(FileBatches({}, at::arange(0), 4, false, false, 0, at::kCPU, AugmentConfig{}, config), ConfigError);
}

// A 6 x 7 PNG mask: `ids` (uint8 6 x 7) as the indices of a palette of VOC's colours for classes 0 to 2, or, with
// `colour`, the colours themselves (an RGB PNG).
std::string write_mask(const std::string& name, const at::Tensor& ids, bool colour) {
  static const uint8_t kVocColours[] = {0, 0, 0, 128, 0, 0, 0, 128, 0};
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = 7;
  image.height = 6;
  image.format = colour ? PNG_FORMAT_RGB : PNG_FORMAT_RGB_COLORMAP;
  image.colormap_entries = 3;
  const at::Tensor pixels = colour ? at::from_blob(const_cast<uint8_t*>(kVocColours), {3, 3}, at::kByte)
                                         .index_select(0, ids.flatten().to(at::kLong))
                                         .contiguous()
                                   : ids.contiguous();
  const std::string path = ::testing::TempDir() + name;
  EXPECT_TRUE(png_image_write_to_file(&image, path.c_str(), 0, pixels.data_ptr(), 0, kVocColours));
  return path;
}

TEST(FileBatches, MasksReadAsPaletteIndicesAndColourMasksAreRefused) {
  const std::vector<std::string> paths = write_pngs("segmented", 4);
  at::manual_seed(12);
  const at::Tensor ids = at::randint(0, 3, {4, 6, 7}, at::kByte);
  std::vector<std::string> masks;
  for (int64_t i = 0; i < 4; ++i) masks.push_back(write_mask("palette" + std::to_string(i) + ".png", ids[i], false));
  const at::Tensor identity = at::arange(256, at::kLong);
  FileBatches palette(paths, at::Tensor(), 4, false, false, 0, at::kCPU, AugmentConfig{}, FileBatchesConfig{}, masks,
                      {}, identity);
  at::Tensor inputs, targets;
  ASSERT_TRUE(palette.next(inputs, targets));
  EXPECT_TRUE(at::equal(targets, ids.to(at::kLong)));  // indices, not the colours' luminance (0, 38, 75)
  // The table maps each value: here class 2 read as void (255), as the data set's mask table would for its values.
  FileBatches remapped(paths, at::Tensor(), 4, false, false, 0, at::kCPU, AugmentConfig{}, FileBatchesConfig{},
                       masks, {}, identity.index_fill(0, at::tensor({2}, at::kLong), 255));
  ASSERT_TRUE(remapped.next(inputs, targets));
  EXPECT_TRUE(at::equal(targets, at::where(ids == 2, 255, ids.to(at::kLong))));
  EXPECT_THROW(FileBatches(paths, at::Tensor(), 4, false, false, 0, at::kCPU, AugmentConfig{}, FileBatchesConfig{},
                           masks),
               ConfigError);  // masks without their table

  masks[2] = write_mask("colour2.png", ids[2], true);
  FileBatches colour(paths, at::Tensor(), 4, false, false, 0, at::kCPU, AugmentConfig{}, FileBatchesConfig{}, masks,
                     {}, identity);
  try {
    colour.next(inputs, targets);
    FAIL() << "a colour mask was read as class ids";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("colour2.png' (index 2): is a colour (RGB) mask whose channels differ"),
              std::string::npos)
        << e.what();
  }
}

// An interlaced (Adam7) PNG, which neither Pillow nor OpenCV writes, reads as its pixels.
TEST(Readers, InterlacedPngReadsAsItsPixels) {
  at::manual_seed(13);
  const at::Tensor pixels = at::randint(0, 256, {11, 13, 3}, at::kByte).contiguous();
  const std::string path = ::testing::TempDir() + "interlaced.png";
  FILE* file = std::fopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_init_io(png, file);
  png_set_IHDR(png, info, 13, 11, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_ADAM7, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  std::vector<png_bytep> rows;
  for (int64_t y = 0; y < 11; ++y) rows.push_back(pixels.data_ptr<uint8_t>() + y * 13 * 3);
  png_set_rows(png, info, rows.data());
  png_write_png(png, info, PNG_TRANSFORM_IDENTITY, nullptr);
  png_destroy_write_struct(&png, &info);
  std::fclose(file);
  EXPECT_TRUE(at::equal(decode_image(path, {3}), pixels));
  EXPECT_THROW(decode_image(path, {1, true, /*mask=*/true}), ConfigError);  // colours are no class ids
}

}  // namespace
}  // namespace gpucore
