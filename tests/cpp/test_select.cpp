#include <gtest/gtest.h>

#include <map>

#include "gpucore/device/device_select.h"
#include "gpucore/errors.h"

namespace gpucore {
namespace {

CudaDeviceFacts gpu(int index, const std::string& name, int major, int minor) {
  CudaDeviceFacts device;
  device.index = index;
  device.name = name;
  device.cc = {major, minor};
  device.total_memory = int64_t{40} << 30;
  device.multiprocessor_count = 108;
  return device;
}

SystemFacts cuda_machine(std::vector<CudaDeviceFacts> devices, std::vector<std::string> arch_list = {"sm_75", "sm_80", "sm_86", "sm_90"}) {
  SystemFacts facts;
  facts.torch_version = "2.13.0+cu130";
  facts.torch_cuda_version = "13.0";
  facts.torch_arch_list = std::move(arch_list);
  facts.cuda_devices = std::move(devices);
  facts.cuda_driver_version = 13000;
  facts.cpu_threads = 16;
  return facts;
}

SystemFacts cpu_machine() {
  SystemFacts facts;
  facts.torch_version = "2.13.0+cpu";
  facts.cpu_threads = 2;
  return facts;
}

// A probe that records what it was asked and fails for the devices given.
struct FakeProbe {
  std::map<std::string, std::string> failures;
  std::vector<std::string> asked;
  ProbeFn fn() {
    return [this](const std::string& device) {
      asked.push_back(device);
      const auto it = failures.find(device);
      return it == failures.end() ? ProbeResult{true, ""} : ProbeResult{false, it->second};
    };
  }
};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(SelectDevice, AutoPicksAUsableGpu) {
  FakeProbe probe;
  const DeviceChoice choice = select_device(cuda_machine({gpu(0, "NVIDIA A100-PCIE-40GB", 8, 0)}), "auto", false, false, probe.fn());
  EXPECT_EQ(choice.device, "cuda:0");
  EXPECT_TRUE(contains(choice.reason, "A100")) << choice.reason;
  EXPECT_TRUE(contains(choice.reason, "sm_80")) << choice.reason;
  EXPECT_TRUE(choice.warnings.empty());
  EXPECT_EQ(probe.asked, std::vector<std::string>{"cuda:0"});
}

TEST(SelectDevice, AutoFallsBackFromTeslaM40WithAWarningThatSaysWhy) {
  FakeProbe probe;
  const DeviceChoice choice = select_device(cuda_machine({gpu(0, "Tesla M40", 5, 2)}), "auto", false, false, probe.fn());
  EXPECT_EQ(choice.device, "cpu");
  ASSERT_EQ(choice.warnings.size(), 1u);
  const std::string& warning = choice.warnings[0];
  for (const char* part : {"Tesla M40", "5.2", "sm_75", "2.13.0+cu130", "cu126", "Using cpu"}) {
    EXPECT_TRUE(contains(warning, part)) << part << " missing from: " << warning;
  }
  EXPECT_TRUE(probe.asked.empty()) << "an unusable device must not be probed";
}

TEST(SelectDevice, AutoSkipsAnUnusableGpuForAUsableOne) {
  FakeProbe probe;
  const DeviceChoice choice =
      select_device(cuda_machine({gpu(0, "Tesla M40", 5, 2), gpu(1, "NVIDIA A100", 8, 0)}), "auto", false, false, probe.fn());
  EXPECT_EQ(choice.device, "cuda:1");
  ASSERT_EQ(choice.warnings.size(), 1u);
  EXPECT_TRUE(contains(choice.warnings[0], "cuda:0")) << choice.warnings[0];
}

TEST(SelectDevice, NoKernelImageFromTheLiveProbeBecomesAClearMessage) {
  FakeProbe probe;
  probe.failures["cuda:0"] = "CUDA error: no kernel image is available for execution on the device";
  // The arch list claims sm_80 (e.g. a build whose list lies or a driver too old for the SASS).
  const SystemFacts facts = cuda_machine({gpu(0, "NVIDIA A100", 8, 0)});
  try {
    select_device(facts, "cuda:0", false, false, probe.fn());
    FAIL() << "demanded device accepted";
  } catch (const DeviceUnavailableError& e) {
    const std::string message = e.what();
    for (const char* part : {"cuda:0", "NVIDIA A100", "8.0", "no kernel image", "sm_75, sm_80, sm_86, sm_90", "Install a torch build"}) {
      EXPECT_TRUE(contains(message, part)) << part << " missing from: " << message;
    }
  }
  const DeviceChoice fallback = select_device(facts, "auto", false, false, probe.fn());
  EXPECT_EQ(fallback.device, "cpu");
  EXPECT_EQ(fallback.warnings.size(), 1u);
}

TEST(SelectDevice, OtherProbeFailuresAreReportedAsTheyAre) {
  FakeProbe probe;
  probe.failures["cuda:0"] = "CUDA error: all CUDA-capable devices are busy or unavailable";
  const DeviceChoice choice = select_device(cuda_machine({gpu(0, "NVIDIA A100", 8, 0)}), "auto", false, false, probe.fn());
  EXPECT_EQ(choice.device, "cpu");
  ASSERT_EQ(choice.warnings.size(), 1u);
  EXPECT_TRUE(contains(choice.warnings[0], "busy or unavailable")) << choice.warnings[0];
}

TEST(SelectDevice, DemandedTeslaM40RaisesWithTheReason) {
  FakeProbe probe;
  try {
    select_device(cuda_machine({gpu(0, "Tesla M40", 5, 2)}), "cuda", false, false, probe.fn());
    FAIL();
  } catch (const DeviceUnavailableError& e) {
    EXPECT_TRUE(contains(e.what(), "Tesla M40")) << e.what();
    EXPECT_TRUE(contains(e.what(), "5.2")) << e.what();
  }
}

TEST(SelectDevice, DemandedIndexOutOfRange) {
  FakeProbe probe;
  try {
    select_device(cuda_machine({gpu(0, "A100", 8, 0)}), "cuda:3", false, false, probe.fn());
    FAIL();
  } catch (const DeviceUnavailableError& e) {
    EXPECT_TRUE(contains(e.what(), "cuda:3")) << e.what();
    EXPECT_TRUE(contains(e.what(), "1 CUDA device")) << e.what();
  }
}

TEST(SelectDevice, CpuOnlyTorchWithADriverInstalledWarnsAndAdvises) {
  SystemFacts facts = cpu_machine();
  facts.cuda_driver_version = 12080;
  FakeProbe probe;
  const DeviceChoice choice = select_device(facts, "auto", false, false, probe.fn());
  EXPECT_EQ(choice.device, "cpu");
  ASSERT_EQ(choice.warnings.size(), 1u);
  EXPECT_TRUE(contains(choice.warnings[0], "CPU-only build")) << choice.warnings[0];
  EXPECT_TRUE(contains(choice.warnings[0], "CUDA 12.8")) << choice.warnings[0];
  try {
    select_device(facts, "cuda", false, false, probe.fn());
    FAIL();
  } catch (const DeviceUnavailableError& e) {
    EXPECT_TRUE(contains(e.what(), "Install a CUDA build of torch")) << e.what();
  }
}

TEST(SelectDevice, PlainCpuMachineChoosesCpuSilently) {
  FakeProbe probe;
  const DeviceChoice choice = select_device(cpu_machine(), "auto", false, false, probe.fn());
  EXPECT_EQ(choice.device, "cpu");
  EXPECT_TRUE(choice.warnings.empty());
  EXPECT_TRUE(contains(choice.reason, "2 threads"));
}

TEST(SelectDevice, NoCudaAndNoMpsAreHonoured) {
  FakeProbe probe;
  SystemFacts facts = cuda_machine({gpu(0, "A100", 8, 0)});
  facts.mps_built = facts.mps_available = true;
  EXPECT_EQ(select_device(facts, "auto", true, false, probe.fn()).device, "mps");
  EXPECT_EQ(select_device(facts, "auto", true, true, probe.fn()).device, "cpu");
  EXPECT_EQ(select_device(facts, "auto", false, true, probe.fn()).device, "cuda:0");
  EXPECT_THROW(select_device(facts, "cuda", true, false, probe.fn()), ConfigError);
  EXPECT_THROW(select_device(facts, "mps", false, true, probe.fn()), ConfigError);
}

TEST(SelectDevice, MpsDemandAndFallback) {
  FakeProbe probe;
  SystemFacts facts = cpu_machine();
  facts.mps_built = true;
  try {
    select_device(facts, "mps", false, false, probe.fn());
    FAIL();
  } catch (const DeviceUnavailableError& e) {
    EXPECT_TRUE(contains(e.what(), "no MPS device is available")) << e.what();
  }
  facts.mps_available = true;
  probe.failures["mps"] = "MPS backend out of memory";
  const DeviceChoice choice = select_device(facts, "auto", false, false, probe.fn());
  EXPECT_EQ(choice.device, "cpu");
  ASSERT_EQ(choice.warnings.size(), 1u);
  EXPECT_TRUE(contains(choice.warnings[0], "MPS backend out of memory"));
}

TEST(SelectDevice, BadPreferencesNameThemselvesAndTheValidForms) {
  FakeProbe probe;
  for (const std::string bad : {"gpu", "cuda:x", "cuda:", "cuda0", "tpu", ""}) {
    try {
      select_device(cpu_machine(), bad, false, false, probe.fn());
      FAIL() << "accepted '" << bad << "'";
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.what(), "'" + bad + "'")) << e.what();
      EXPECT_TRUE(contains(e.what(), "cuda:N")) << e.what();
    }
  }
}

TEST(SelectDevice, AssessAllListsEveryDevice) {
  FakeProbe probe;
  const auto verdicts = assess_all_devices(cuda_machine({gpu(0, "Tesla M40", 5, 2), gpu(1, "A100", 8, 0)}), probe.fn());
  ASSERT_EQ(verdicts.size(), 4u);
  EXPECT_EQ(verdicts[0].device, "cuda:0");
  EXPECT_FALSE(verdicts[0].usable);
  EXPECT_FALSE(verdicts[0].advice.empty());
  EXPECT_TRUE(verdicts[1].usable);
  EXPECT_EQ(verdicts[2].device, "mps");
  EXPECT_FALSE(verdicts[2].usable);
  EXPECT_EQ(verdicts[3].device, "cpu");
  EXPECT_TRUE(verdicts[3].usable);
}

TEST(SelectDevice, DeviceCapsFromFacts) {
  const SystemFacts facts = cuda_machine({gpu(0, "Tesla V100", 7, 0), gpu(1, "A100", 8, 0)});
  const DeviceCaps v100 = device_caps(facts, "cuda:0");
  EXPECT_EQ(v100.kind, DeviceKind::kCUDA);
  EXPECT_FALSE(v100.bf16_supported);
  EXPECT_TRUE(device_caps(facts, "cuda:1").bf16_supported);
  EXPECT_EQ(device_caps(facts, "cpu").kind, DeviceKind::kCPU);
  EXPECT_THROW(device_caps(facts, "cuda:2"), ConfigError);
}

}  // namespace
}  // namespace gpucore
