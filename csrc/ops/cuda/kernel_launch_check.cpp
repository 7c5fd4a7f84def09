#include "ops/cuda/kernel_launch_check.h"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>

#include "device/cuda/kernel_probe.h"
#include "gpucore/device/arch_compat.h"

namespace gpucore::ops {

void check_kernel_launch(const std::string& op) {
  const cudaError_t error = cudaGetLastError();
  if (error == cudaErrorNoKernelImageForDevice) {
    const c10::DeviceIndex index = c10::cuda::current_device();
    cudaDeviceProp properties{};
    C10_CUDA_CHECK(cudaGetDeviceProperties(&properties, index));
    const std::string device = "cuda:" + std::to_string(index) + " (" + properties.name + ")";
    TORCH_CHECK(false, missing_kernel_message(op, device, {properties.major, properties.minor},
                                              gpucore::cuda::compiled_arch_list()));
  }
  C10_CUDA_CHECK(error);
}

}  // namespace gpucore::ops
