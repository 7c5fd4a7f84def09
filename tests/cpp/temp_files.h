#pragma once
// A file of `bytes` written into GoogleTest's temporary folder, for the readers' tests; its path.
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

inline std::string write_file(const std::string& name, const std::vector<unsigned char>& bytes) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return path;
}
