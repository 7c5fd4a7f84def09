#include "gpucore/device/precision.h"

#include <ATen/Context.h>

#include "gpucore/choices.h"
#include "gpucore/errors.h"

namespace gpucore {

DeviceKind device_kind_of(const std::string& device) {
  if (device == "cpu") return DeviceKind::kCPU;
  if (device == "mps") return DeviceKind::kMPS;
  if (device.rfind("cuda", 0) == 0) return DeviceKind::kCUDA;
  throw ConfigError("device '" + device + "' is not one of cpu, cuda, cuda:N, mps");
}

namespace {
const Choices<Precision> kPrecisions = {{"auto", Precision::kAuto}, {"bf16-mixed", Precision::kBF16Mixed},
                                        {"16-mixed", Precision::kFP16Mixed}, {"32", Precision::kFP32},
                                        {"64", Precision::kFP64}};
const Choices<Toggle> kToggles = {{"auto", Toggle::kAuto}, {"true", Toggle::kOn}, {"false", Toggle::kOff}};
}  // namespace

Precision parse_precision(const std::string& name) { return parse_choice("precision", name, kPrecisions); }

std::string to_string(Precision precision) { return choice_name(precision, kPrecisions); }
std::vector<std::string> precision_names() { return choice_names(kPrecisions); }

Toggle parse_toggle(const std::string& key, const std::string& value) {
  return parse_choice(key, value, kToggles);
}
std::vector<std::string> toggle_names() { return choice_names(kToggles); }

namespace {

std::string describe(const DeviceCaps& caps) {
  if (caps.kind == DeviceKind::kCUDA) {
    return caps.device + " (" + caps.name + ", compute capability " + caps.cc.str() + ")";
  }
  return caps.device;
}

bool has_tf32(const DeviceCaps& caps) { return caps.kind == DeviceKind::kCUDA && caps.cc.major >= 8; }

}  // namespace

ResolvedPrecision resolve_precision(Precision requested, const DeviceCaps& caps, Toggle tf32, Toggle cudnn_benchmark) {
  ResolvedPrecision policy;
  const bool cuda = caps.kind == DeviceKind::kCUDA;
  Precision precision = requested;
  if (precision == Precision::kAuto) {
    if (cuda && caps.bf16_supported) {
      precision = Precision::kBF16Mixed;
      policy.reason = "auto: " + describe(caps) + " has bf16 tensor cores, so bf16-mixed needs no loss scaling";
    } else if (cuda && caps.cc.major >= 7) {
      precision = Precision::kFP16Mixed;
      policy.reason = "auto: " + describe(caps) + " has fp16 tensor cores but no bf16, so 16-mixed with loss scaling";
    } else if (caps.kind == DeviceKind::kMPS) {
      precision = Precision::kFP16Mixed;
      policy.reason = "auto: MPS runs float16 autocast, with loss scaling";
    } else if (caps.kind == DeviceKind::kCPU && !caps.cpu_bf16_isa.empty()) {
      precision = Precision::kBF16Mixed;
      policy.reason = "auto: the CPU does bf16 arithmetic natively (" + caps.cpu_bf16_isa +
                      "), so bf16-mixed: oneDNN runs convolutions and matmuls in bf16, the weights stay float32";
    } else if (caps.kind == DeviceKind::kCPU) {
      precision = Precision::kFP32;
      policy.reason = "auto: the CPU has no native bf16 arithmetic (neither AVX512-BF16 nor AMX), and emulated bf16 "
                      "is slower than float32, so 32";
    } else {
      precision = Precision::kFP32;
      policy.reason = "auto: " + describe(caps) + " has no fast reduced-precision arithmetic, so 32";
    }
  } else {
    policy.reason = "precision " + to_string(precision) + " as asked";
  }

  switch (precision) {
    case Precision::kBF16Mixed:
      if (!caps.bf16_supported) {
        throw ConfigError("precision 'bf16-mixed' needs bfloat16 support, which " + describe(caps) +
                          " does not have" + (cuda ? " (it needs compute capability 8.0 or newer)" : "") +
                          "; use precision 16-mixed" + (cuda ? "" : " or 32") + ", or auto");
      }
      policy.autocast_dtype = "bfloat16";
      break;
    case Precision::kFP16Mixed:
      if (caps.kind == DeviceKind::kCPU) {
        throw ConfigError("precision '16-mixed' is not supported on the CPU; use bf16-mixed, 32 or auto");
      }
      policy.autocast_dtype = "float16";
      policy.loss_scaling = true;
      break;
    case Precision::kFP64:
      if (caps.kind == DeviceKind::kMPS) {
        throw ConfigError("precision '64' is not supported on MPS, which has no float64; use 32 or auto");
      }
      policy.param_dtype = "float64";
      break;
    case Precision::kFP32:
    case Precision::kAuto:
      break;
  }
  policy.precision = precision;

  // tf32 and cudnn_benchmark are CUDA knobs: a config that sets them still runs on the CPU or MPS
  // (the same config serves every machine), but forcing TF32 on a GPU without it is a mistake.
  if (tf32 == Toggle::kOn && cuda && !has_tf32(caps)) {
    throw ConfigError("tf32 'true' needs compute capability 8.0 or newer, and " + describe(caps) +
                      " is older; use tf32 auto or false");
  }
  policy.tf32 = has_tf32(caps) && tf32 != Toggle::kOff;
  policy.cudnn_benchmark = cuda && cudnn_benchmark != Toggle::kOff;
  return policy;
}

void apply_precision_policy(const ResolvedPrecision& policy) {
  auto& context = at::globalContext();
  context.setAllowTF32CuBLAS(policy.tf32);
  context.setAllowTF32CuDNN(policy.tf32);
  context.setBenchmarkCuDNN(policy.cudnn_benchmark);
}

}  // namespace gpucore
