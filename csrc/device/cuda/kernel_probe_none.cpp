// gpucore built without CUDA (a CPU-only torch, no nvcc, or GPUCORE_WITH_CUDA=OFF): say so.
#include "device/cuda/kernel_probe.h"

namespace gpucore::cuda {

ProbeResult run_kernel_probe(int /*index*/) {
  return {false,
          "gpucore was built without CUDA kernels (CPU-only torch, no nvcc, or GPUCORE_WITH_CUDA=OFF at build time)"};
}

std::vector<std::string> compiled_arch_list() { return {}; }

}  // namespace gpucore::cuda
