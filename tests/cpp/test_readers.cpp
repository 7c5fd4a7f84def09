// The readers on files written here.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gpucore/data/readers.h"
#include "gpucore/errors.h"
#include "temp_files.h"

namespace gpucore {
namespace {

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
  EXPECT_THROW(decode_image(path, {3}), ConfigError);
  EXPECT_THROW(decode_image(path, {2}), ConfigError);  // 2 channels is not a thing
  const DecodedImages skipped = decode_images({path, path}, {1}, 2, /*skip_errors=*/true);
  EXPECT_EQ(skipped.images.size(0), 0);
  EXPECT_EQ(skipped.skipped.size(), 2u);
}

void put16(std::vector<unsigned char>& out, uint32_t v) {
  for (int i = 0; i < 2; ++i) out.push_back(static_cast<unsigned char>(v >> (8 * i)));
}
void put32(std::vector<unsigned char>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<unsigned char>(v >> (8 * i)));
}

// A .npz archive with stored (uncompressed) members, as np.savez writes it.
std::vector<unsigned char> stored_zip(const std::vector<std::pair<std::string, std::vector<unsigned char>>>& members) {
  std::vector<unsigned char> out, directory;
  for (const auto& [name, data] : members) {
    const uint32_t crc = crc32(0L, data.data(), static_cast<uInt>(data.size()));
    const uint32_t offset = static_cast<uint32_t>(out.size());
    put32(out, 0x04034b50);
    for (uint32_t v : {20u, 0u, 0u, 0u, 0u}) put16(out, v);  // version, flags, method 0, time, date
    put32(out, crc);
    put32(out, static_cast<uint32_t>(data.size()));
    put32(out, static_cast<uint32_t>(data.size()));
    put16(out, static_cast<uint32_t>(name.size()));
    put16(out, 0);
    out.insert(out.end(), name.begin(), name.end());
    out.insert(out.end(), data.begin(), data.end());
    put32(directory, 0x02014b50);
    for (uint32_t v : {20u, 20u, 0u, 0u, 0u, 0u}) put16(directory, v);  // versions, flags, method, time, date
    put32(directory, crc);
    put32(directory, static_cast<uint32_t>(data.size()));
    put32(directory, static_cast<uint32_t>(data.size()));
    put16(directory, static_cast<uint32_t>(name.size()));
    for (uint32_t v : {0u, 0u, 0u, 0u}) put16(directory, v);  // extra, comment, disk, internal attributes
    put32(directory, 0);                                       // external attributes
    put32(directory, offset);
    directory.insert(directory.end(), name.begin(), name.end());
  }
  const uint32_t directory_offset = static_cast<uint32_t>(out.size());
  out.insert(out.end(), directory.begin(), directory.end());
  put32(out, 0x06054b50);
  put16(out, 0);
  put16(out, 0);
  put16(out, static_cast<uint32_t>(members.size()));
  put16(out, static_cast<uint32_t>(members.size()));
  put32(out, static_cast<uint32_t>(directory.size()));
  put32(out, directory_offset);
  put16(out, 0);
  return out;
}

std::vector<unsigned char> npy_bytes(const std::string& header_dict, const std::vector<unsigned char>& data) {
  std::string header = header_dict;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::vector<unsigned char> out = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  put16(out, static_cast<uint32_t>(header.size()));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

TEST(Readers, NpzStoredMembersAndCorruption) {
  const std::vector<unsigned char> bytes = {1, 2, 3, 4, 5, 6};
  const auto x = npy_bytes("{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }", bytes);
  const auto y = npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }", {7, 0, 0, 0});
  const auto arrays = read_npz(write_file("ok.npz", stored_zip({{"x.npy", x}, {"y.npy", y}})));
  ASSERT_EQ(arrays.size(), 2u);
  EXPECT_EQ(arrays[0].first, "x");
  EXPECT_TRUE(at::equal(arrays[0].second, at::arange(1, 7, at::kByte).reshape({2, 3})));
  EXPECT_EQ(arrays[1].second.item<int32_t>(), 7);
  std::vector<unsigned char> zip = stored_zip({{"x.npy", x}});
  zip[30 + 5 + x.size() - 1] ^= 0xFF;  // the last data byte: the CRC no longer matches
  const std::string bad = write_file("crc.npz", zip);
  try {
    read_npz(bad);
    FAIL() << "a corrupt member was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(bad + ":x.npy' is corrupt (CRC mismatch)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_npz(write_file("plain.npz", x)), ConfigError);  // a .npy, not a zip
}

}  // namespace
}  // namespace gpucore
