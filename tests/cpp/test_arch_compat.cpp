#include <gtest/gtest.h>

#include "gpucore/device/arch_compat.h"
#include "gpucore/errors.h"

namespace gpucore {
namespace {

// The arch list of PyTorch's CUDA 12.8/13.0 wheels: SASS from sm_75, no older PTX.
const std::vector<std::string> kCu130 = {"sm_75", "sm_80", "sm_86", "sm_90"};

TEST(ArchCompat, TeslaM40IsUnusableWithCu130Wheels) {
  const ArchMatch match = match_arch_list({5, 2}, kCu130);
  EXPECT_FALSE(match.usable);
  EXPECT_EQ(match.via, "");
}

TEST(ArchCompat, TeslaM40RunsSm50Sass) {
  const ArchMatch match = match_arch_list({5, 2}, {"sm_50", "sm_60", "sm_70"});
  EXPECT_TRUE(match.usable);
  EXPECT_EQ(match.via, "sm_50");
  EXPECT_FALSE(match.jit);
}

TEST(ArchCompat, Ampere86RunsSm80Sass) {
  const ArchMatch match = match_arch_list({8, 6}, {"sm_80"});
  EXPECT_TRUE(match.usable);
  EXPECT_EQ(match.via, "sm_80");
}

TEST(ArchCompat, A100CannotRunOnlySm86) {
  EXPECT_FALSE(match_arch_list({8, 0}, {"sm_86"}).usable);
}

TEST(ArchCompat, HopperRunsCompute80PtxThroughJit) {
  const ArchMatch match = match_arch_list({9, 0}, {"sm_80", "compute_80"});
  EXPECT_TRUE(match.usable);
  EXPECT_EQ(match.via, "compute_80");
  EXPECT_TRUE(match.jit);
}

TEST(ArchCompat, SassIsPreferredOverPtxAndNewestSassWins) {
  const ArchMatch match = match_arch_list({8, 9}, {"compute_75", "sm_80", "sm_86", "sm_90"});
  EXPECT_EQ(match.via, "sm_86");
  EXPECT_FALSE(match.jit);
}

TEST(ArchCompat, SassNeverCrossesMajorVersions) {
  EXPECT_FALSE(match_arch_list({9, 0}, {"sm_86", "sm_89"}).usable);
  EXPECT_FALSE(match_arch_list({7, 5}, {"sm_80"}).usable);
}

TEST(ArchCompat, PtxDoesNotRunOnOlderDevices) {
  EXPECT_FALSE(match_arch_list({7, 5}, {"compute_80"}).usable);
  EXPECT_TRUE(match_arch_list({12, 0}, {"compute_80"}).usable);
}

TEST(ArchCompat, ArchSpecificCodeRunsOnlyOnItsExactCapability) {
  EXPECT_TRUE(match_arch_list({9, 0}, {"sm_90a"}).usable);
  EXPECT_FALSE(match_arch_list({9, 1}, {"sm_90a"}).usable);
  EXPECT_FALSE(match_arch_list({10, 0}, {"compute_90a"}).usable);
}

TEST(ArchCompat, ThreeDigitArchitectures) {
  const ArchTarget target = parse_arch("sm_120");
  EXPECT_EQ(target.cc.major, 12);
  EXPECT_EQ(target.cc.minor, 0);
  EXPECT_TRUE(match_arch_list({10, 3}, {"sm_100f"}).usable);
  EXPECT_FALSE(match_arch_list({12, 0}, {"sm_100"}).usable);
}

TEST(ArchCompat, EmptyListRunsNothing) {
  EXPECT_FALSE(match_arch_list({8, 0}, {}).usable);
  EXPECT_EQ(describe_arch_list({}), "no CUDA code (CPU-only build)");
}

TEST(ArchCompat, MalformedEntriesNameThemselves) {
  for (const std::string bad : {"sm80", "sm_", "compute_8x", "gfx90a", "sm_1234"}) {
    try {
      parse_arch(bad);
      FAIL() << "parse_arch accepted " << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("'" + bad + "'"), std::string::npos) << e.what();
    }
  }
}

TEST(ArchCompat, MissingKernelMessageNamesTheOpTheGpuAndTheBuildsArchList) {
  const std::vector<std::string> build = {"sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "compute_90"};
  const std::string m40 = missing_kernel_message("gpucore::augment", "cuda:0 (Tesla M40)", {5, 2}, build);
  for (const char* part : {"gpucore::augment cannot run on cuda:0 (Tesla M40), compute capability 5.2",
                           "built for sm_75, sm_80, sm_86, sm_89, sm_90, compute_90", "TORCH_CUDA_ARCH_LIST=\"5.2\"",
                           "CUDA 12 toolkit", "gpucore doctor"}) {
    EXPECT_NE(m40.find(part), std::string::npos) << "no '" << part << "' in: " << m40;
  }
  // A GPU that CUDA 13 still compiles for (a build for sm_90 only, an A100) needs no older toolkit.
  const std::string a100 = missing_kernel_message("gpucore::crop", "cuda:1 (NVIDIA A100)", {8, 0}, {"sm_90"});
  EXPECT_NE(a100.find("built for sm_90, none of which"), std::string::npos) << a100;
  EXPECT_NE(a100.find("TORCH_CUDA_ARCH_LIST=\"8.0\""), std::string::npos) << a100;
  EXPECT_EQ(a100.find("CUDA 12"), std::string::npos) << a100;
}

TEST(ArchCompat, AdviceForOldGpuPointsAtBuildsWithOldKernels) {
  const std::string advice = torch_build_advice({5, 2}, kCu130);
  EXPECT_NE(advice.find("sm_5x"), std::string::npos) << advice;
  EXPECT_NE(advice.find("cu126"), std::string::npos) << advice;
  EXPECT_NE(advice.find("TORCH_CUDA_ARCH_LIST=\"5.2\""), std::string::npos) << advice;
}

TEST(ArchCompat, AdviceForNewGpuPointsAtNewerBuilds) {
  const std::string advice = torch_build_advice({12, 0}, {"sm_50", "sm_80", "sm_90"});
  EXPECT_NE(advice.find("newer torch"), std::string::npos) << advice;
}

TEST(ArchCompat, AdviceForCpuOnlyTorch) {
  EXPECT_NE(torch_build_advice({8, 0}, {}).find("CUDA build of torch"), std::string::npos);
}

}  // namespace
}  // namespace gpucore
