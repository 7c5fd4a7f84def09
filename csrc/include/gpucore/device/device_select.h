#pragma once
// Device facts, the verdict on each device, and the choice among them.
//
// Facts are gathered by the caller (Python reads them from torch, tests inject them), so the
// decision is a pure function of facts and a probe, testable without a GPU.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gpucore/device/arch_compat.h"
#include "gpucore/device/precision.h"

namespace gpucore {

struct CudaDeviceFacts {
  int index = 0;
  std::string name;
  ComputeCapability cc;
  int64_t total_memory = 0;  // bytes
  int64_t free_memory = -1;  // bytes, -1 when unknown
  int multiprocessor_count = 0;
};

struct SystemFacts {
  std::string torch_version;              // "2.13.0+cu130"
  std::string torch_cuda_version;         // "13.0"; empty for a CPU-only torch
  std::vector<std::string> torch_arch_list;  // torch.cuda.get_arch_list()
  std::vector<CudaDeviceFacts> cuda_devices;
  std::string cuda_unavailable_reason;    // why torch sees no CUDA device, when it sees none
  int cuda_driver_version = 0;            // 13000 for 13.0; 0 when no NVIDIA driver is installed
  bool mps_built = false;
  bool mps_available = false;
  bool mps_bf16 = false;
  int cpu_threads = 1;
  std::string cpu_bf16_isa;  // what does bf16 arithmetic natively ("AMX", "AVX512-BF16"); empty: emulated
};

struct ProbeResult {
  bool ok = false;
  std::string error;  // first line of the failure, empty when ok
};

// Runs a tiny computation on a device ("cuda:0") and reports whether it worked.
using ProbeFn = std::function<ProbeResult(const std::string& device)>;

struct DeviceVerdict {
  std::string device;  // "cuda:0", "mps", "cpu"
  std::string name;
  bool usable = false;
  std::string reason;  // why usable or not, with the facts that decided it
  std::string advice;  // what to do about it; empty when usable
};

struct DeviceChoice {
  std::string device;
  std::string reason;
  std::vector<std::string> warnings;     // devices `auto` passed over, and why
  std::vector<DeviceVerdict> verdicts;   // every device looked at, in order
};

DeviceVerdict assess_cuda_device(const SystemFacts& facts, const CudaDeviceFacts& device, const ProbeFn& probe);
DeviceVerdict assess_mps(const SystemFacts& facts, const ProbeFn& probe);
DeviceVerdict assess_cpu(const SystemFacts& facts);
// Every device, in the order auto tries them: each CUDA device, MPS, CPU. Probes the usable ones.
std::vector<DeviceVerdict> assess_all_devices(const SystemFacts& facts, const ProbeFn& probe);

// preference: "auto" (CUDA, then MPS, then CPU), "cpu", "cuda" (first usable CUDA device),
// "cuda:N" or "mps". Demands throw DeviceUnavailableError when unusable; auto falls back and says
// why in `warnings`. Bad preferences and contradictions (cuda with no_cuda) throw ConfigError.
DeviceChoice select_device(const SystemFacts& facts, const std::string& preference, bool no_cuda, bool no_mps,
                           const ProbeFn& probe);

// What the precision policy needs to know about `device`, from the facts.
DeviceCaps device_caps(const SystemFacts& facts, const std::string& device);

}  // namespace gpucore
