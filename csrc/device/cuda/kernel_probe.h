#pragma once
// gpucore's own CUDA kernel probe. Defined in kernel_probe.cu when gpucore is built with CUDA,
// and in kernel_probe_none.cpp (which says so) when it is not.
#include <string>
#include <vector>

#include "gpucore/device/device_select.h"

namespace gpucore::cuda {

// Launches a small kernel of gpucore's on device `index` and checks what it wrote.
ProbeResult run_kernel_probe(int index);

// The architectures gpucore's CUDA sources were compiled for ("sm_75", ..., "compute_90").
std::vector<std::string> compiled_arch_list();

}  // namespace gpucore::cuda
