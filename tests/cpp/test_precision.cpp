#include <gtest/gtest.h>

#include "gpucore/device/precision.h"
#include "gpucore/errors.h"

namespace gpucore {
namespace {

DeviceCaps cuda_caps(int major, int minor, const std::string& name = "GPU") {
  DeviceCaps caps;
  caps.device = "cuda:0";
  caps.kind = DeviceKind::kCUDA;
  caps.name = name;
  caps.cc = {major, minor};
  caps.bf16_supported = major >= 8;
  return caps;
}

DeviceCaps cpu_caps(const std::string& bf16_isa = "") {
  DeviceCaps caps;
  caps.bf16_supported = true;
  caps.cpu_bf16_isa = bf16_isa;
  return caps;
}

DeviceCaps mps_caps(bool bf16) {
  DeviceCaps caps;
  caps.device = "mps";
  caps.kind = DeviceKind::kMPS;
  caps.bf16_supported = bf16;
  return caps;
}

template <typename Fn>
std::string config_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError";
  return "";
}

TEST(Precision, AutoOnAmpereIsBf16WithTf32AndBenchmark) {
  const ResolvedPrecision p = resolve_precision(Precision::kAuto, cuda_caps(8, 0));
  EXPECT_EQ(p.precision, Precision::kBF16Mixed);
  EXPECT_EQ(p.autocast_dtype, "bfloat16");
  EXPECT_FALSE(p.loss_scaling);
  EXPECT_TRUE(p.tf32);
  EXPECT_TRUE(p.cudnn_benchmark);
}

TEST(Precision, AutoOnTuringAndVoltaIsFp16WithLossScaling) {
  for (const auto& cc : {ComputeCapability{7, 5}, ComputeCapability{7, 0}}) {
    const ResolvedPrecision p = resolve_precision(Precision::kAuto, cuda_caps(cc.major, cc.minor));
    EXPECT_EQ(p.precision, Precision::kFP16Mixed);
    EXPECT_EQ(p.autocast_dtype, "float16");
    EXPECT_TRUE(p.loss_scaling);
    EXPECT_FALSE(p.tf32);
  }
}

TEST(Precision, AutoOnOlderGpusAndCpuIs32) {
  const ResolvedPrecision m40 = resolve_precision(Precision::kAuto, cuda_caps(5, 2, "Tesla M40"));
  EXPECT_EQ(m40.precision, Precision::kFP32);
  EXPECT_EQ(m40.autocast_dtype, "");
  EXPECT_NE(m40.reason.find("Tesla M40"), std::string::npos) << m40.reason;
  const ResolvedPrecision cpu = resolve_precision(Precision::kAuto, cpu_caps());
  EXPECT_EQ(cpu.precision, Precision::kFP32);
  EXPECT_FALSE(cpu.tf32);
  EXPECT_FALSE(cpu.cudnn_benchmark);
  EXPECT_NE(cpu.reason.find("no native bf16"), std::string::npos) << cpu.reason;
}

TEST(Precision, AutoOnCpusWithNativeBf16IsBf16Mixed) {
  for (const std::string isa : {"AVX512-BF16", "AMX"}) {
    const ResolvedPrecision cpu = resolve_precision(Precision::kAuto, cpu_caps(isa));
    EXPECT_EQ(cpu.precision, Precision::kBF16Mixed);
    EXPECT_EQ(cpu.autocast_dtype, "bfloat16");
    EXPECT_EQ(cpu.param_dtype, "float32");
    EXPECT_FALSE(cpu.loss_scaling);
    EXPECT_NE(cpu.reason.find(isa), std::string::npos) << cpu.reason;
  }
}

TEST(Precision, AutoOnMpsIsFp16) {
  const ResolvedPrecision p = resolve_precision(Precision::kAuto, mps_caps(false));
  EXPECT_EQ(p.precision, Precision::kFP16Mixed);
  EXPECT_TRUE(p.loss_scaling);
}

TEST(Precision, Bf16OnAGpuWithoutItIsAnError) {
  const std::string message = config_error_of([] { resolve_precision(Precision::kBF16Mixed, cuda_caps(7, 0, "Tesla V100")); });
  EXPECT_NE(message.find("bf16-mixed"), std::string::npos) << message;
  EXPECT_NE(message.find("Tesla V100"), std::string::npos) << message;
  EXPECT_NE(message.find("7.0"), std::string::npos) << message;
  EXPECT_NE(message.find("8.0"), std::string::npos) << message;
}

TEST(Precision, Bf16OnCpuIsAllowed) {
  EXPECT_EQ(resolve_precision(Precision::kBF16Mixed, cpu_caps()).autocast_dtype, "bfloat16");
}

TEST(Precision, UnsupportedCombinationsAreErrors) {
  EXPECT_NE(config_error_of([] { resolve_precision(Precision::kFP16Mixed, cpu_caps()); }).find("CPU"), std::string::npos);
  EXPECT_NE(config_error_of([] { resolve_precision(Precision::kFP64, mps_caps(true)); }).find("MPS"), std::string::npos);
  EXPECT_NE(config_error_of([] { resolve_precision(Precision::kBF16Mixed, mps_caps(false)); }).find("mps"), std::string::npos);
}

TEST(Precision, Fp64KeepsParametersInDouble) {
  const ResolvedPrecision p = resolve_precision(Precision::kFP64, cuda_caps(9, 0));
  EXPECT_EQ(p.param_dtype, "float64");
  EXPECT_EQ(p.autocast_dtype, "");
}

TEST(Precision, Tf32AndBenchmarkToggles) {
  EXPECT_FALSE(resolve_precision(Precision::kFP32, cuda_caps(8, 0), Toggle::kOff).tf32);
  EXPECT_TRUE(resolve_precision(Precision::kFP32, cuda_caps(9, 0), Toggle::kOn).tf32);
  EXPECT_FALSE(resolve_precision(Precision::kFP32, cuda_caps(8, 0), Toggle::kAuto, Toggle::kOff).cudnn_benchmark);
  // CUDA knobs in a shared config do not stop a CPU run.
  const ResolvedPrecision cpu = resolve_precision(Precision::kFP32, cpu_caps(), Toggle::kOn, Toggle::kOn);
  EXPECT_FALSE(cpu.tf32);
  EXPECT_FALSE(cpu.cudnn_benchmark);
  const std::string message = config_error_of([] { resolve_precision(Precision::kFP32, cuda_caps(7, 5), Toggle::kOn); });
  EXPECT_NE(message.find("tf32"), std::string::npos) << message;
}

TEST(Precision, ParsingNamesTheBadValueAndTheValidOnes) {
  EXPECT_EQ(parse_precision("bf16-mixed"), Precision::kBF16Mixed);
  EXPECT_EQ(parse_precision("16-mixed"), Precision::kFP16Mixed);
  EXPECT_EQ(parse_precision("64"), Precision::kFP64);
  for (const auto p : {Precision::kAuto, Precision::kBF16Mixed, Precision::kFP16Mixed, Precision::kFP32, Precision::kFP64}) {
    EXPECT_EQ(parse_precision(to_string(p)), p);
  }
  const std::string message = config_error_of([] { parse_precision("fp16"); });
  EXPECT_NE(message.find("'fp16'"), std::string::npos) << message;
  EXPECT_NE(message.find("16-mixed"), std::string::npos) << message;
  EXPECT_NE(config_error_of([] { parse_toggle("tf32", "yes"); }).find("tf32 'yes'"), std::string::npos);
  EXPECT_NE(config_error_of([] { device_kind_of("tpu"); }).find("'tpu'"), std::string::npos);
}

}  // namespace
}  // namespace gpucore
