// Live checks on this machine's CPU (and on CUDA when torch has a GPU).
#include <gtest/gtest.h>

#include <ATen/Context.h>

#include "gpucore/device/probe.h"

namespace gpucore {
namespace {

TEST(Probe, CpuRunsTheProbe) {
  const ProbeResult result = probe_device("cpu");
  EXPECT_TRUE(result.ok) << result.error;
  EXPECT_EQ(result.error, "");
}

TEST(Probe, UnavailableBackendsFailWithAShortMessage) {
  if (at::hasCUDA()) GTEST_SKIP() << "this torch has CUDA";
  const ProbeResult result = probe_device("cuda:0");
  EXPECT_FALSE(result.ok);
  EXPECT_FALSE(result.error.empty());
  EXPECT_LE(result.error.size(), 400u) << result.error;
  EXPECT_EQ(result.error.find('\n'), std::string::npos) << result.error;
}

TEST(Probe, BadDeviceStringIsAFailureNotACrash) {
  const ProbeResult result = probe_device("quantum:7");
  EXPECT_FALSE(result.ok);
  EXPECT_NE(result.error.find("quantum"), std::string::npos) << result.error;
}

TEST(Probe, SmokeTestOnCpuMatchesFloat64) {
  const SmokeResult result = smoke_test("cpu");
  ASSERT_TRUE(result.ok) << result.error;
  EXPECT_LT(result.matmul_rel_error, 1e-5);  // float32 CPU: no TF32
  EXPECT_LT(result.conv_rel_error, 1e-5);
  EXPECT_GT(result.matmul_ms, 0.0);
  EXPECT_GT(result.conv_ms, 0.0);
}

TEST(Probe, SmokeTestOnCudaWhenPresent) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA in this torch/machine";
  const SmokeResult result = smoke_test("cuda:0");
  EXPECT_TRUE(result.ok) << result.error;
  EXPECT_TRUE(probe_device("cuda:0").ok);
}

TEST(Probe, GpucoreKernelsReportHowTheyWereBuilt) {
  const ProbeResult cpu = probe_gpucore_kernels("cpu");
  EXPECT_FALSE(cpu.ok);
  EXPECT_NE(cpu.error.find("not a CUDA device"), std::string::npos) << cpu.error;
  if (gpucore_cuda_arch_list().empty()) {
    const ProbeResult cuda = probe_gpucore_kernels("cuda:0");
    EXPECT_FALSE(cuda.ok);
    EXPECT_NE(cuda.error.find("built without CUDA"), std::string::npos) << cuda.error;
  } else if (at::hasCUDA()) {
    const ProbeResult cuda = probe_gpucore_kernels("cuda:0");
    EXPECT_TRUE(cuda.ok) << cuda.error;
  }
}

TEST(Probe, DriverVersionIsZeroOrPlausible) {
  const int version = cuda_driver_version();
  EXPECT_TRUE(version == 0 || (version >= 10000 && version < 100000)) << version;
  if (at::hasCUDA()) EXPECT_GT(version, 0);
}

}  // namespace
}  // namespace gpucore
