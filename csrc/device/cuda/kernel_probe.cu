#include <cuda_runtime.h>

#include <sstream>

#include "device/cuda/kernel_probe.h"

namespace gpucore::cuda {

namespace {

constexpr int kThreads = 64;

__global__ void write_pattern(int* out) { out[threadIdx.x] = 3 * static_cast<int>(threadIdx.x) + 1; }

std::string describe_error(const char* step, cudaError_t status) {
  std::ostringstream message;
  message << "gpucore's CUDA kernel probe failed at " << step << ": " << cudaGetErrorString(status);
  if (status == cudaErrorNoKernelImageForDevice) {
    message << " (gpucore was compiled for " << GPUCORE_CUDA_ARCH_LIST
            << "; rebuild it with TORCH_CUDA_ARCH_LIST naming this GPU's compute capability)";
  }
  return message.str();
}

}  // namespace

ProbeResult run_kernel_probe(int index) {
  int previous = 0;
  cudaError_t status = cudaGetDevice(&previous);
  if (status != cudaSuccess) return {false, describe_error("cudaGetDevice", status)};
  if ((status = cudaSetDevice(index)) != cudaSuccess) return {false, describe_error("cudaSetDevice", status)};

  ProbeResult result{true, ""};
  int* buffer = nullptr;
  int host[kThreads] = {};
  if ((status = cudaMalloc(&buffer, sizeof(host))) != cudaSuccess) {
    result = {false, describe_error("cudaMalloc", status)};
  } else {
    write_pattern<<<1, kThreads>>>(buffer);
    if ((status = cudaGetLastError()) != cudaSuccess) {
      result = {false, describe_error("kernel launch", status)};
    } else if ((status = cudaMemcpy(host, buffer, sizeof(host), cudaMemcpyDeviceToHost)) != cudaSuccess) {
      result = {false, describe_error("cudaMemcpy", status)};
    } else {
      for (int i = 0; i < kThreads; ++i) {
        if (host[i] != 3 * i + 1) {
          result = {false, "gpucore's CUDA kernel probe read back wrong values (element " + std::to_string(i) + ")"};
          break;
        }
      }
    }
    cudaFree(buffer);
  }
  cudaSetDevice(previous);
  return result;
}

std::vector<std::string> compiled_arch_list() {
  std::vector<std::string> names;
  std::stringstream list(GPUCORE_CUDA_ARCH_LIST);
  for (std::string name; std::getline(list, name, ',');) names.push_back(name);
  return names;
}

}  // namespace gpucore::cuda
