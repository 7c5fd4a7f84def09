#include <ATen/ops/empty.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/StringUtil.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>

#include "gpucore/data/readers.h"
#include "gpucore/errors.h"

namespace gpucore {

namespace {

struct GzFile {
  explicit GzFile(const std::string& path) : handle(gzopen(path.c_str(), "rb")) {}
  ~GzFile() {
    if (handle != nullptr) gzclose(handle);
  }
  gzFile handle;
};

// Reads up to `size` bytes; gzread reads plain files as they are.
int64_t read_some(GzFile& file, void* buffer, int64_t size, const std::string& path) {
  int64_t total = 0;
  auto* bytes = static_cast<unsigned char*>(buffer);
  while (total < size) {
    const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(size - total, 1 << 30));
    const int got = gzread(file.handle, bytes + total, chunk);
    if (got < 0) {
      int code = 0;
      throw ConfigError("IDX file '" + path + "' is corrupt: " + gzerror(file.handle, &code));
    }
    if (got == 0) break;
    total += got;
  }
  return total;
}

}  // namespace

at::Tensor read_idx(const std::string& path) {
  GzFile file(path);
  if (file.handle == nullptr) throw ConfigError("cannot open IDX file '" + path + "'");
  std::array<unsigned char, 4> magic{};
  if (read_some(file, magic.data(), 4, path) != 4 || magic[0] != 0 || magic[1] != 0) {
    throw ConfigError("'" + path + "' is not an IDX file: its magic number does not start with two zero bytes");
  }
  at::ScalarType type;
  int64_t width;
  switch (magic[2]) {
    case 0x08: type = at::kByte; width = 1; break;
    case 0x09: type = at::kChar; width = 1; break;
    case 0x0B: type = at::kShort; width = 2; break;
    case 0x0C: type = at::kInt; width = 4; break;
    case 0x0D: type = at::kFloat; width = 4; break;
    case 0x0E: type = at::kDouble; width = 8; break;
    default:
      throw ConfigError("IDX file '" + path + "' has unknown data type code 0x" +
                        std::to_string(static_cast<int>(magic[2])) + " in its magic number");
  }
  const int dims = magic[3];
  if (dims < 1 || dims > 8) throw ConfigError("IDX file '" + path + "' declares " + std::to_string(dims) + " dimensions");
  std::vector<int64_t> shape(dims);
  for (int d = 0; d < dims; ++d) {
    std::array<unsigned char, 4> size{};
    if (read_some(file, size.data(), 4, path) != 4) throw ConfigError("IDX file '" + path + "' is truncated in its header");
    shape[d] = (int64_t{size[0]} << 24) | (int64_t{size[1]} << 16) | (int64_t{size[2]} << 8) | size[3];
  }
  // The claimed size is checked against the file before allocating, so a corrupt header cannot make gpucore
  // allocate what the file does not hold: a plain file must hold the data itself, a gzip file at most the
  // ~1032:1 that deflate can shrink data by.
  int64_t expected = width;
  for (int64_t dim : shape) {
    if (dim > 0 && expected > (int64_t{1} << 50) / dim) {
      throw ConfigError("IDX file '" + path + "' claims an impossible shape " + c10::str(c10::IntArrayRef(shape)));
    }
    expected *= dim;
  }
  std::error_code error;
  const auto file_size = static_cast<int64_t>(std::filesystem::file_size(path, error));
  if (!error) {
    const int64_t header_size = 4 + 4 * int64_t{dims};
    const bool compressed = gzdirect(file.handle) == 0;
    const int64_t can_hold = compressed ? file_size * 1032 : file_size - header_size;
    if (expected > can_hold) {
      throw ConfigError("IDX file '" + path + "' is truncated: its header claims shape " +
                        c10::str(c10::IntArrayRef(shape)) + ", " + std::to_string(expected) + " bytes of data, and " +
                        (compressed ? "a gzip file of " + std::to_string(file_size) + " bytes cannot inflate to that"
                                    : "the file holds " + std::to_string(can_hold)));
    }
  }
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(type));
  const int64_t got = read_some(file, out.data_ptr(), expected, path);
  if (got != expected) {
    throw ConfigError("IDX file '" + path + "' is truncated: its header promises " + std::to_string(expected) +
                      " bytes of data, the file holds " + std::to_string(got));
  }
  unsigned char extra = 0;
  if (read_some(file, &extra, 1, path) != 0) {
    throw ConfigError("IDX file '" + path + "' holds more data than its header describes (" + std::to_string(expected) +
                      " bytes): corrupt or not IDX");
  }
  if (width > 1) {  // IDX is big-endian
    auto* bytes = static_cast<unsigned char*>(out.data_ptr());
    for (int64_t i = 0; i < out.numel(); ++i) std::reverse(bytes + i * width, bytes + (i + 1) * width);
  }
  return out;
}

}  // namespace gpucore
