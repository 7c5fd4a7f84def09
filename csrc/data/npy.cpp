#include <ATen/ops/empty.h>

#include <cstring>
#include <fstream>
#include <regex>

#include "gpucore/errors.h"
#include "gpucore/readers.h"

namespace gpucore {

at::Tensor read_npy(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw ConfigError("cannot open .npy file '" + path + "'");
  char magic[8] = {};
  file.read(magic, 8);
  if (!file || std::memcmp(magic, "\x93NUMPY", 6) != 0) {
    throw ConfigError("'" + path + "' is not a .npy file (no \\x93NUMPY magic)");
  }
  uint32_t header_size = 0;
  unsigned char size_bytes[4] = {};
  const int size_width = magic[6] == 1 ? 2 : 4;
  file.read(reinterpret_cast<char*>(size_bytes), size_width);
  for (int i = size_width - 1; i >= 0; --i) header_size = (header_size << 8) | size_bytes[i];
  std::string header(header_size, '\0');
  file.read(header.data(), header_size);
  if (!file) throw ConfigError(".npy file '" + path + "' is truncated in its header");

  std::smatch match;
  if (!std::regex_search(header, match, std::regex("'descr':\\s*'([<>|=])([a-z])(\\d+)'"))) {
    throw ConfigError(".npy file '" + path + "' has no readable dtype in its header: " + header);
  }
  const std::string order = match[1], kind = match[2];
  const int width = std::stoi(match[3]);
  if (order == ">" && width > 1) throw ConfigError(".npy file '" + path + "' is big-endian; save it little-endian");
  at::ScalarType type;
  const std::string code = kind + std::to_string(width);
  if (code == "b1") type = at::kBool;
  else if (code == "u1") type = at::kByte;
  else if (code == "i1") type = at::kChar;
  else if (code == "i2") type = at::kShort;
  else if (code == "i4") type = at::kInt;
  else if (code == "i8") type = at::kLong;
  else if (code == "f2") type = at::kHalf;
  else if (code == "f4") type = at::kFloat;
  else if (code == "f8") type = at::kDouble;
  else throw ConfigError(".npy file '" + path + "' holds dtype " + code + ", which gpucore does not read");
  if (std::regex_search(header, std::regex("'fortran_order':\\s*True"))) {
    throw ConfigError(".npy file '" + path + "' is in Fortran order; save it with np.ascontiguousarray");
  }
  if (!std::regex_search(header, match, std::regex("'shape':\\s*\\(([^)]*)\\)"))) {
    throw ConfigError(".npy file '" + path + "' has no shape in its header");
  }
  std::vector<int64_t> shape;
  const std::string dims = match[1];
  const std::regex number("\\d+");
  for (std::sregex_iterator it(dims.begin(), dims.end(), number), end; it != end; ++it) {
    shape.push_back(std::stoll(it->str()));
  }
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(type));
  const int64_t expected = out.numel() * width;
  file.read(static_cast<char*>(out.data_ptr()), expected);
  if (file.gcount() != expected) {
    throw ConfigError(".npy file '" + path + "' is truncated: shape " + c10::str(out.sizes()) + " needs " +
                      std::to_string(expected) + " bytes of data, the file holds " + std::to_string(file.gcount()));
  }
  return out;
}

}  // namespace gpucore
