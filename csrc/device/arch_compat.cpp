#include "gpucore/device/arch_compat.h"

#include <algorithm>
#include <cctype>
#include <sstream>
#include <tuple>

#include "gpucore/errors.h"

namespace gpucore {

std::string ComputeCapability::str() const {
  return std::to_string(major) + "." + std::to_string(minor);
}

namespace {

bool operator<(const ComputeCapability& a, const ComputeCapability& b) {
  return std::tie(a.major, a.minor) < std::tie(b.major, b.minor);
}

std::string arch_number(const ComputeCapability& cc) {
  return std::to_string(cc.major) + std::to_string(cc.minor);
}

}  // namespace

ArchTarget parse_arch(const std::string& name) {
  ArchTarget target;
  target.name = name;
  std::string digits;
  if (name.rfind("sm_", 0) == 0) {
    target.kind = CodeKind::kSass;
    digits = name.substr(3);
  } else if (name.rfind("compute_", 0) == 0) {
    target.kind = CodeKind::kPtx;
    digits = name.substr(8);
  } else {
    throw ConfigError("CUDA arch list entry '" + name + "' is not of the form sm_XY or compute_XY (e.g. sm_86, compute_90)");
  }
  if (!digits.empty() && (digits.back() == 'a' || digits.back() == 'f')) {
    target.arch_specific = digits.back() == 'a';
    digits.pop_back();
  }
  const bool all_digits = !digits.empty() && std::all_of(digits.begin(), digits.end(), [](unsigned char c) {
    return std::isdigit(c) != 0;
  });
  if (!all_digits || digits.size() < 2 || digits.size() > 3) {
    throw ConfigError("CUDA arch list entry '" + name + "' is not of the form sm_XY or compute_XY (e.g. sm_86, compute_90)");
  }
  const int number = std::stoi(digits);  // 86 -> 8.6, 120 -> 12.0: the minor is always one digit
  target.cc = {number / 10, number % 10};
  return target;
}

bool runs_on(const ArchTarget& target, const ComputeCapability& cc) {
  if (target.arch_specific) {
    return cc.major == target.cc.major && cc.minor == target.cc.minor;
  }
  if (target.kind == CodeKind::kSass) {
    return cc.major == target.cc.major && cc.minor >= target.cc.minor;
  }
  return !(cc < target.cc);  // PTX: JIT for any newer device
}

ArchMatch match_arch_list(const ComputeCapability& cc, const std::vector<std::string>& arch_list) {
  ArchMatch best;
  ComputeCapability best_cc;
  for (const auto& name : arch_list) {
    const ArchTarget target = parse_arch(name);
    if (!runs_on(target, cc)) continue;
    const bool jit = target.kind == CodeKind::kPtx;
    const bool better = !best.usable || (best.jit && !jit) || (best.jit == jit && best_cc < target.cc);
    if (better) {
      best = {true, name, jit};
      best_cc = target.cc;
    }
  }
  return best;
}

std::string describe_arch_list(const std::vector<std::string>& arch_list) {
  if (arch_list.empty()) return "no CUDA code (CPU-only build)";
  std::ostringstream out;
  for (size_t i = 0; i < arch_list.size(); ++i) out << (i ? ", " : "") << arch_list[i];
  return out.str();
}

std::string missing_kernel_message(const std::string& op, const std::string& device, const ComputeCapability& cc,
                                   const std::vector<std::string>& arch_list) {
  std::string message = op + " cannot run on " + device + ", compute capability " + cc.str() +
                        ": gpucore's CUDA kernels were built for " + describe_arch_list(arch_list) +
                        ", none of which runs on it. Rebuild gpucore for this GPU (TORCH_CUDA_ARCH_LIST=\"" +
                        cc.str() + "\" pip install --force-reinstall --no-deps --no-cache-dir <gpucore source>";
  // CUDA 13 compiles for compute capability 7.5 and newer only.
  if (cc.major * 10 + cc.minor < 75) message += ", with a CUDA 12 toolkit: CUDA 13 no longer compiles for it";
  return message + ") or run on the CPU; `gpucore doctor` checks the GPU against the build.";
}

std::string torch_build_advice(const ComputeCapability& cc, const std::vector<std::string>& arch_list) {
  const std::string number = arch_number(cc);
  const std::string from_source =
      "or build torch from source with TORCH_CUDA_ARCH_LIST=\"" + cc.str() + "\"";
  if (arch_list.empty()) {
    return "Install a CUDA build of torch (pip install torch --index-url https://download.pytorch.org/whl/cu126, "
           "or the CUDA version that matches your driver).";
  }
  bool older_than_all = true;
  for (const auto& name : arch_list) {
    if (!(cc < parse_arch(name).cc)) older_than_all = false;
  }
  std::string advice = "Install a torch build whose torch.cuda.get_arch_list() contains sm_" +
                       std::to_string(cc.major) + "x (x <= " + std::to_string(cc.minor) +
                       ") or a compute_XY at or below compute_" + number + ": ";
  if (older_than_all) {
    advice += "PyTorch's CUDA 12.6 and 11.8 wheels (cu126, cu118) still carry sm_50/sm_60/sm_70 kernels, while the "
              "CUDA 12.8 and newer wheels start at sm_75 "
              "(pip install torch --index-url https://download.pytorch.org/whl/cu126), ";
  } else {
    advice += "a newer torch release built with a newer CUDA (the CUDA 12.8 and newer wheels cover Blackwell, sm_100/sm_120), ";
  }
  return advice + from_source + ".";
}

}  // namespace gpucore
