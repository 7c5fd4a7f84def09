#pragma once
// How gpucore's kernels are launched and check their inputs, the same text for nvcc and for the emulated grid of
// emulator/cuda_emulator.h (the host compiler, no GPU), which runs them in every CI run.
#include <cuda_runtime.h>

#ifdef __CUDACC__
#include <assert.h>
// Device code's assertion handler as CUDA's crt/common_functions.h declares it, but also under NDEBUG (as torch's
// CUDA_KERNEL_ASSERT does).
extern "C" __host__ __device__ void __assert_fail(const char* assertion, const char* file, unsigned int line,
                                                  const char* function) noexcept;
#define GPUCORE_LAUNCH(kernel, grid, block, shared_bytes, stream, ...) \
  kernel<<<grid, block, shared_bytes, stream>>>(__VA_ARGS__)
// A kernel's check of what the host could not check without waiting for the device (values in device memory),
// kept in release builds (unlike assert): the launch fails with cudaErrorAssert at the next synchronisation.
#define GPUCORE_KERNEL_ASSERT(condition) \
  do {                                   \
    if (!(condition)) __assert_fail(#condition, __FILE__, __LINE__, __func__); \
  } while (false)
#else
#define GPUCORE_LAUNCH(kernel, grid, block, shared_bytes, stream, ...) \
  ::gpucore::cuda_emulator::launch(grid, block, shared_bytes, stream, [&] { kernel(__VA_ARGS__); })
#define GPUCORE_KERNEL_ASSERT(condition) \
  do {                                   \
    if (!(condition)) ::gpucore::cuda_emulator::kernel_assert_failed(#condition, __FILE__, __LINE__, __func__); \
  } while (false)
#endif
