#pragma once
// Precision policy: which autocast dtype, loss scaling, TF32 and cuDNN settings a device gets.
#include <string>
#include <vector>

#include "gpucore/device/arch_compat.h"

namespace gpucore {

enum class DeviceKind { kCPU, kCUDA, kMPS };

// "cpu", "cuda", "cuda:1", "mps" -> the kind; throws ConfigError for anything else.
DeviceKind device_kind_of(const std::string& device);

enum class Precision { kAuto, kBF16Mixed, kFP16Mixed, kFP32, kFP64 };

// Accepts "auto", "bf16-mixed", "16-mixed", "32", "64"; throws ConfigError listing them otherwise.
Precision parse_precision(const std::string& name);
std::vector<std::string> precision_names();
std::string to_string(Precision precision);

// A setting that is on, off, or left to the policy.
enum class Toggle { kAuto, kOn, kOff };
Toggle parse_toggle(const std::string& key, const std::string& value);  // "auto", "true", "false"
std::vector<std::string> toggle_names();

// What the policy needs to know about the device.
struct DeviceCaps {
  std::string device = "cpu";  // "cuda:0"
  DeviceKind kind = DeviceKind::kCPU;
  std::string name;             // "NVIDIA A100-SXM4-80GB", for messages
  ComputeCapability cc;         // CUDA only
  bool bf16_supported = false;  // bf16 autocast runs (CUDA: CC >= 8.0; the CPU always, emulated if need be)
  std::string cpu_bf16_isa;     // CPU: the instructions that do bf16 natively, empty when emulated
};

struct ResolvedPrecision {
  Precision precision = Precision::kFP32;  // never kAuto once resolved
  std::string autocast_dtype;              // "bfloat16", "float16", or "" for no autocast
  std::string param_dtype = "float32";     // "float64" for precision 64
  bool loss_scaling = false;               // dynamic loss scaling (fp16 only)
  bool tf32 = false;                       // TF32 for float32 matmul and cuDNN convolutions
  bool cudnn_benchmark = false;            // cuDNN autotuning (pays off for static shapes)
  std::string reason;                      // why, in one sentence
};

// Defaults: precision auto -> bf16-mixed on CUDA CC >= 8.0 and on CPUs with native bf16 arithmetic
// (AVX512-BF16, AMX), 16-mixed on CUDA 7.x and on MPS, 32 on older GPUs and other CPUs. tf32 and cudnn_benchmark (CUDA-only knobs, off elsewhere):
// auto and true -> on where the GPU has it, false -> off. Throws ConfigError for a precision the
// device cannot do (bf16 without hardware support, 16-mixed on the CPU, 64 on MPS) and for tf32
// forced on a CUDA GPU older than 8.0.
ResolvedPrecision resolve_precision(Precision requested, const DeviceCaps& caps,
                                  Toggle tf32 = Toggle::kAuto, Toggle cudnn_benchmark = Toggle::kAuto);

// Sets the process-wide ATen flags (TF32 for cuBLAS and cuDNN, cuDNN benchmark) the policy asks for.
void apply_precision_policy(const ResolvedPrecision& policy);

}  // namespace gpucore
