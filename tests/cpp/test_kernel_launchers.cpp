// Every launcher that a csrc/ops/cuda/*_kernels.h header declares is called by one of the kernel tests
// (GPUCORE_KERNEL_TEST_SOURCES, from CMakeLists.txt), so a new kernel cannot go untested.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace gpucore::ops {
namespace {

std::set<std::string> matches(const std::string& path, const std::regex& pattern) {
  std::ifstream file(path);
  EXPECT_TRUE(file.good()) << "cannot read " << path;
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::set<std::string> names;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), pattern); it != std::sregex_iterator(); ++it) {
    names.insert((*it)[1]);
  }
  return names;
}

// The kernel tests' sources: GPUCORE_KERNEL_TEST_SOURCES, their paths separated by commas.
std::vector<std::string> kernel_test_sources() {
  std::vector<std::string> paths;
  std::istringstream list(GPUCORE_KERNEL_TEST_SOURCES);
  for (std::string path; std::getline(list, path, ',');) {
    if (!path.empty()) paths.push_back(path);
  }
  return paths;
}

// A launcher declared in a csrc/ops/cuda/*_kernels.h header that no kernel test calls fails here, so a new kernel
// cannot go untested.
TEST(KernelLaunchers, EveryDeclaredLauncherHasATest) {
  std::set<std::string> declared;
  for (const auto& entry : std::filesystem::directory_iterator(GPUCORE_KERNEL_HEADERS_DIR)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 10 && name.substr(name.size() - 10) == "_kernels.h") {
      declared.merge(matches(entry.path().string(), std::regex(R"(\bvoid\s+(launch_\w+)\s*\()")));
    }
  }
  std::set<std::string> tested;
  const std::vector<std::string> sources = kernel_test_sources();
  EXPECT_GE(sources.size(), 8u) << "fewer kernel test sources than op families: " << GPUCORE_KERNEL_TEST_SOURCES;
  for (const std::string& source : sources) tested.merge(matches(source, std::regex(R"(\bcuda::(launch_\w+)\()")));
  EXPECT_GE(declared.size(), 17u) << "fewer launchers than the headers declared: the pattern no longer reads them";
  for (const std::string& launcher : declared) EXPECT_TRUE(tested.count(launcher) > 0) << launcher << " has no test";
}

}  // namespace
}  // namespace gpucore::ops
