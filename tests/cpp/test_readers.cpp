// The readers on files written here.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gpucore/errors.h"
#include "gpucore/readers.h"

namespace gpucore {
namespace {

std::string write_file(const std::string& name, const std::vector<unsigned char>& bytes) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return path;
}

std::vector<unsigned char> idx_bytes() {
  // uint8, 2 dims: 2 x 3, then the values 0..5
  std::vector<unsigned char> bytes = {0, 0, 0x08, 2, 0, 0, 0, 2, 0, 0, 0, 3};
  for (unsigned char v = 0; v < 6; ++v) bytes.push_back(v);
  return bytes;
}

TEST(Readers, IdxRoundTrip) {
  const at::Tensor values = read_idx(write_file("ok.idx", idx_bytes()));
  EXPECT_EQ(values.sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(at::equal(values, at::arange(6, at::kByte).reshape({2, 3})));
}

TEST(Readers, IdxBigEndianInts) {
  const std::vector<unsigned char> bytes = {0, 0, 0x0C, 1, 0, 0, 0, 2, 0, 0, 1, 2, 0xFF, 0xFF, 0xFF, 0xFE};
  const at::Tensor values = read_idx(write_file("ints.idx", bytes));
  EXPECT_EQ(values[0].item<int32_t>(), 258);
  EXPECT_EQ(values[1].item<int32_t>(), -2);
}

TEST(Readers, IdxTruncatedNamesTheFile) {
  std::vector<unsigned char> bytes = idx_bytes();
  bytes.pop_back();
  const std::string path = write_file("short.idx", bytes);
  try {
    read_idx(path);
    FAIL() << "a truncated file was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
}

TEST(Readers, NotAnImage) {
  const std::string path = write_file("text.png", {'h', 'e', 'l', 'l', 'o'});
  EXPECT_THROW(decode_image(path, 3), ConfigError);
  EXPECT_THROW(decode_image(path, 2), ConfigError);  // 2 channels is not a thing
  const DecodedImages skipped = decode_images({path, path}, 1, 2, /*skip_errors=*/true);
  EXPECT_EQ(skipped.images.size(0), 0);
  EXPECT_EQ(skipped.skipped.size(), 2u);
}

}  // namespace
}  // namespace gpucore
