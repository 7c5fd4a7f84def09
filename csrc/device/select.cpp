#include "gpucore/device/device_select.h"

#include <algorithm>
#include <cctype>

#include "gpucore/errors.h"

namespace gpucore {

namespace {

const char* kValidPreferences = "auto, cpu, cuda, cuda:N (N a device index), mps";

std::string describe(const CudaDeviceFacts& device) {
  return "cuda:" + std::to_string(device.index) + " (" + device.name + ", compute capability " + device.cc.str() + ")";
}

std::string version_string(int cuda_version) {  // 12080 -> "12.8"
  return std::to_string(cuda_version / 1000) + "." + std::to_string((cuda_version % 1000) / 10);
}

std::string no_cuda_device_reason(const SystemFacts& facts) {
  if (facts.torch_cuda_version.empty()) {
    std::string reason = "torch " + facts.torch_version + " is a CPU-only build";
    if (facts.cuda_driver_version > 0) {
      reason += ", although an NVIDIA driver (CUDA " + version_string(facts.cuda_driver_version) + ") is installed";
    }
    return reason;
  }
  if (!facts.cuda_unavailable_reason.empty()) return facts.cuda_unavailable_reason;
  if (facts.cuda_driver_version == 0) return "no NVIDIA driver is installed";
  return "torch sees no CUDA device (is CUDA_VISIBLE_DEVICES empty?)";
}

std::string no_cuda_device_advice(const SystemFacts& facts) {
  if (facts.torch_cuda_version.empty() && facts.cuda_driver_version > 0) {
    return "Install a CUDA build of torch that your driver supports (CUDA " +
           version_string(facts.cuda_driver_version) + " or older), then rebuild gpucore against it.";
  }
  return "";
}

bool is_no_kernel_image(const std::string& error) {
  std::string lower = error;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower.find("no kernel image") != std::string::npos;
}

DeviceVerdict not_available(const std::string& device, std::string reason, std::string advice = "") {
  DeviceVerdict verdict;
  verdict.device = device;
  verdict.usable = false;
  verdict.reason = std::move(reason);
  verdict.advice = std::move(advice);
  return verdict;
}

const CudaDeviceFacts* find_cuda_device(const SystemFacts& facts, int index) {
  for (const auto& device : facts.cuda_devices) {
    if (device.index == index) return &device;
  }
  return nullptr;
}

// "cuda:3" -> 3, "cuda" -> -1; anything else is a ConfigError.
int parse_cuda_index(const std::string& preference) {
  if (preference == "cuda") return -1;
  const std::string digits = preference.substr(5);
  const bool valid = preference.rfind("cuda:", 0) == 0 && !digits.empty() && digits.size() <= 4 &&
                     std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
  if (!valid) {
    throw ConfigError("device '" + preference + "' is not valid; use one of " + kValidPreferences);
  }
  return std::stoi(digits);
}

std::string fallback_warning(const DeviceVerdict& verdict, const std::string& chosen) {
  std::string text = "device auto: skipped " + verdict.device + ": " + verdict.reason + ".";
  if (!verdict.advice.empty()) text += " " + verdict.advice;
  return text + " Using " + chosen + ".";
}

}  // namespace

DeviceVerdict assess_cuda_device(const SystemFacts& facts, const CudaDeviceFacts& device, const ProbeFn& probe) {
  DeviceVerdict verdict;
  verdict.device = "cuda:" + std::to_string(device.index);
  verdict.name = device.name;
  const ArchMatch match = match_arch_list(device.cc, facts.torch_arch_list);
  const std::string build = "torch " + facts.torch_version + " carries kernels for " + describe_arch_list(facts.torch_arch_list);
  if (!match.usable) {
    verdict.reason = describe(device) + " cannot run this torch build: " + build + ", none of which runs on " + device.cc.str();
    verdict.advice = torch_build_advice(device.cc, facts.torch_arch_list);
    return verdict;
  }
  const ProbeResult result = probe(verdict.device);
  if (!result.ok) {
    if (is_no_kernel_image(result.error)) {
      verdict.reason = describe(device) + " failed the live probe with 'no kernel image is available for execution "
                       "on the device': " + build;
      verdict.advice = torch_build_advice(device.cc, facts.torch_arch_list);
    } else {
      verdict.reason = describe(device) + " failed the live probe: " + result.error;
      verdict.advice = "Check nvidia-smi for another process holding the GPU, its compute mode, and driver errors.";
    }
    return verdict;
  }
  verdict.usable = true;
  verdict.reason = describe(device) + " runs torch's " + match.via +
                   (match.jit ? " PTX (JIT-compiled by the driver on first use, which can take minutes)" : " kernels");
  return verdict;
}

DeviceVerdict assess_mps(const SystemFacts& facts, const ProbeFn& probe) {
  if (!facts.mps_built) return not_available("mps", "torch " + facts.torch_version + " was built without MPS (Apple GPUs only)");
  if (!facts.mps_available) {
    return not_available("mps", "torch has MPS support but no MPS device is available (needs macOS 12.3+ on Apple silicon or an AMD GPU)");
  }
  const ProbeResult result = probe("mps");
  if (!result.ok) return not_available("mps", "mps failed the live probe: " + result.error);
  DeviceVerdict verdict;
  verdict.device = "mps";
  verdict.name = "Apple Metal (MPS)";
  verdict.usable = true;
  verdict.reason = "mps (Apple Metal) is available";
  return verdict;
}

DeviceVerdict assess_cpu(const SystemFacts& facts) {
  DeviceVerdict verdict;
  verdict.device = "cpu";
  verdict.name = "CPU";
  verdict.usable = true;
  verdict.reason = "cpu with " + std::to_string(facts.cpu_threads) + " threads";
  return verdict;
}

std::vector<DeviceVerdict> assess_all_devices(const SystemFacts& facts, const ProbeFn& probe) {
  std::vector<DeviceVerdict> verdicts;
  if (facts.cuda_devices.empty()) {
    verdicts.push_back(not_available("cuda", no_cuda_device_reason(facts), no_cuda_device_advice(facts)));
  }
  for (const auto& device : facts.cuda_devices) verdicts.push_back(assess_cuda_device(facts, device, probe));
  verdicts.push_back(assess_mps(facts, probe));
  verdicts.push_back(assess_cpu(facts));
  return verdicts;
}

DeviceChoice select_device(const SystemFacts& facts, const std::string& preference, bool no_cuda, bool no_mps,
                           const ProbeFn& probe) {
  DeviceChoice choice;
  auto choose = [&](const DeviceVerdict& verdict) {
    choice.device = verdict.device;
    choice.reason = verdict.reason;
    choice.verdicts.push_back(verdict);
    return choice;
  };

  if (preference == "cpu") return choose(assess_cpu(facts));

  if (preference == "mps") {
    if (no_mps) throw ConfigError("device 'mps' contradicts no_mps=True; drop one of them");
    DeviceVerdict verdict = assess_mps(facts, probe);
    if (!verdict.usable) throw DeviceUnavailableError("device 'mps' was asked for, but " + verdict.reason);
    return choose(verdict);
  }

  if (preference.rfind("cuda", 0) == 0) {
    const int index = parse_cuda_index(preference);
    if (no_cuda) throw ConfigError("device '" + preference + "' contradicts no_cuda=True; drop one of them");
    if (facts.cuda_devices.empty()) {
      std::string message = "device '" + preference + "' was asked for, but " + no_cuda_device_reason(facts);
      const std::string advice = no_cuda_device_advice(facts);
      throw DeviceUnavailableError(advice.empty() ? message : message + ". " + advice);
    }
    if (index >= 0) {
      const CudaDeviceFacts* device = find_cuda_device(facts, index);
      if (device == nullptr) {
        throw DeviceUnavailableError("device '" + preference + "' was asked for, but torch sees " +
                                     std::to_string(facts.cuda_devices.size()) + " CUDA device(s): cuda:0 to cuda:" +
                                     std::to_string(facts.cuda_devices.size() - 1));
      }
      DeviceVerdict verdict = assess_cuda_device(facts, *device, probe);
      if (!verdict.usable) {
        throw DeviceUnavailableError("device '" + preference + "' was asked for, but " + verdict.reason + ". " + verdict.advice);
      }
      return choose(verdict);
    }
    std::string reasons;
    for (const auto& device : facts.cuda_devices) {
      DeviceVerdict verdict = assess_cuda_device(facts, device, probe);
      if (verdict.usable) return choose(verdict);
      reasons += " " + verdict.reason + ". " + verdict.advice;
    }
    throw DeviceUnavailableError("device 'cuda' was asked for, but no CUDA device is usable:" + reasons);
  }

  if (preference != "auto") {
    throw ConfigError("device '" + preference + "' is not valid; use one of " + kValidPreferences);
  }

  // auto: the first usable of CUDA devices, MPS, CPU. Passing over a device that exists but
  // cannot be used deserves a warning; a machine that simply has no GPU does not.
  std::vector<DeviceVerdict> passed_over;
  auto pick = [&](const DeviceVerdict& verdict) {
    for (const auto& skipped : passed_over) {
      choice.warnings.push_back(fallback_warning(skipped, verdict.device));
      choice.verdicts.push_back(skipped);
    }
    return choose(verdict);
  };
  if (!no_cuda) {
    for (const auto& device : facts.cuda_devices) {
      DeviceVerdict verdict = assess_cuda_device(facts, device, probe);
      if (verdict.usable) return pick(verdict);
      passed_over.push_back(verdict);
    }
    if (facts.cuda_devices.empty() && !no_cuda_device_advice(facts).empty()) {
      passed_over.push_back(not_available("cuda", no_cuda_device_reason(facts), no_cuda_device_advice(facts)));
    }
  }
  if (!no_mps && facts.mps_built) {
    DeviceVerdict verdict = assess_mps(facts, probe);
    if (verdict.usable) return pick(verdict);
    if (facts.mps_available) passed_over.push_back(verdict);
  }
  return pick(assess_cpu(facts));
}

DeviceCaps device_caps(const SystemFacts& facts, const std::string& device) {
  DeviceCaps caps;
  caps.device = device;
  caps.kind = device_kind_of(device);
  switch (caps.kind) {
    case DeviceKind::kCPU:
      caps.name = "CPU";
      caps.bf16_supported = true;  // CPU autocast runs bf16 (emulated where the ISA lacks it)
      caps.cpu_bf16_isa = facts.cpu_bf16_isa;
      break;
    case DeviceKind::kMPS:
      caps.name = "Apple Metal (MPS)";
      caps.bf16_supported = facts.mps_bf16;
      break;
    case DeviceKind::kCUDA: {
      const int index = device == "cuda" ? 0 : parse_cuda_index(device);
      const CudaDeviceFacts* cuda = find_cuda_device(facts, index);
      if (cuda == nullptr) {
        throw ConfigError("device '" + device + "' is not among the " + std::to_string(facts.cuda_devices.size()) +
                          " CUDA device(s) torch sees");
      }
      caps.name = cuda->name;
      caps.cc = cuda->cc;
      caps.bf16_supported = cuda->cc.major >= 8;
      break;
    }
  }
  return caps;
}

}  // namespace gpucore
