#pragma once
// Live checks that run real work on a device.
#include <string>
#include <vector>

#include "gpucore/device/device_select.h"

namespace gpucore {

// A tiny computation through torch's own kernels, checked on the host. Catches what facts cannot:
// "no kernel image is available for execution on the device", a busy or broken GPU.
ProbeResult probe_device(const std::string& device);

// The same for gpucore's own CUDA kernels on cuda:N; not ok with a reason when gpucore was built
// without CUDA.
ProbeResult probe_gpucore_kernels(const std::string& device);

// Architectures gpucore's own CUDA kernels were compiled for; empty without CUDA.
std::vector<std::string> gpucore_cuda_arch_list();

struct SmokeResult {
  std::string device;
  bool ok = false;
  double matmul_rel_error = 0;  // max |device - reference| / max |reference|, reference in float64 on the CPU
  double conv_rel_error = 0;
  double matmul_ms = 0;         // mean time per call
  double conv_ms = 0;
  double tolerance = 0;
  std::string error;            // why not ok
};

// A 512x512 matmul and a 3x3 convolution in float32 on `device` under the current precision
// flags, checked against float64 on the CPU and timed.
SmokeResult smoke_test(const std::string& device);

// The NVIDIA driver's CUDA version (13000 for 13.0), read from libcuda directly so that it works
// even when torch cannot use the GPU; 0 when no driver is installed.
int cuda_driver_version();

}  // namespace gpucore
