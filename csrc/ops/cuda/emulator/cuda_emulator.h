#pragma once
// An emulated CUDA grid: gpucore's kernel sources (csrc/ops/cuda/*_kernels.cu) compiled by the host compiler, with
// no nvcc and no GPU, so that every CI run executes them. The kernels include cuda_runtime.h, cuda_fp16.h and
// cuda_bf16.h as usual; the emulated build puts include/ first on the include path, whose headers of those names
// include this one. It maps what the kernels use: the function qualifiers, dim3 and the thread's coordinates,
// __shared__ memory, __syncthreads() as a real barrier, atomics as real atomics, __half and __nv_bfloat16 with
// CUDA's round-to-nearest-even conversions, streams, and the few memory calls the tests make.
//
// A launch (GPUCORE_LAUNCH in ops/cuda/kernel_launch.h) runs the grid's blocks one after another in a shuffled
// order, each block as one std::thread per CUDA thread, all of them running at once: a missing __syncthreads or a
// race between the threads of a block can show, and ASan/UBSan see every access. docs/architecture.md says what
// this proves and what only a GPU can show.
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>

#define __global__
#define __device__
#define __host__
#define __constant__
// One variable per kernel (or device function), shared by the threads of the block that runs: blocks run one at a
// time. It holds zeros or the previous block's values, not a GPU's garbage: a read before the first write can pass.
#define __shared__ static

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x = 1, unsigned y = 1, unsigned z = 1) : x(x), y(y), z(z) {}
};

// Each emulated CUDA thread is a std::thread, so its coordinates are thread-local.
inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;

// The values CUDA gives these errors (driver_types.h), so messages and codes read the same on both.
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorNoKernelImageForDevice = 209,
  cudaErrorAssert = 710,
  cudaErrorNotSupported = 801,
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
struct CUstream_st;
using cudaStream_t = CUstream_st*;

// Device memory is host memory here. Errors of a launch (its configuration, a failed GPUCORE_KERNEL_ASSERT) are
// kept until cudaGetLastError or cudaDeviceSynchronize reads them, as CUDA keeps them.
cudaError_t cudaMalloc(void** pointer, size_t bytes);
cudaError_t cudaFree(void* pointer);
cudaError_t cudaMemcpy(void* to, const void* from, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaGetLastError();
const char* cudaGetErrorString(cudaError_t error);

// Half and bfloat16 as their bits, converted with round-to-nearest-even as cuda_fp16.h and cuda_bf16.h do.
struct __half {
  uint16_t bits;
};
struct __nv_bfloat16 {
  uint16_t bits;
};
float __half2float(__half value);
__half __float2half_rn(float value);
inline __half __float2half(float value) { return __float2half_rn(value); }
float __bfloat162float(__nv_bfloat16 value);
__nv_bfloat16 __float2bfloat16_rn(float value);
inline __nv_bfloat16 __float2bfloat16(float value) { return __float2bfloat16_rn(value); }

// Rounded operations: the host never fuses them, as the emulated build is compiled with -ffp-contract=off.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }

// CUDA's integer min and max are global functions of two values of one type.
template <typename T>
constexpr T min(T a, T b) {
  return b < a ? b : a;
}
template <typename T>
constexpr T max(T a, T b) {
  return a < b ? b : a;
}

template <typename T>
T atomicAdd(T* address, T value) {
  return std::atomic_ref<T>(*address).fetch_add(value);
}
// Stores `value` at `address` while it beats what is there (`beats(value, seen)`); returns the old value, as CUDA's
// atomicMin and atomicMax do.
template <typename T, typename Beats>
T atomic_store_if(T* address, T value, Beats beats) {
  std::atomic_ref<T> target(*address);
  T seen = target.load();
  while (beats(value, seen) && !target.compare_exchange_weak(seen, value)) {
  }
  return seen;
}
template <typename T>
T atomicMin(T* address, T value) {
  return atomic_store_if(address, value, [](T a, T b) { return a < b; });
}
template <typename T>
T atomicMax(T* address, T value) {
  return atomic_store_if(address, value, [](T a, T b) { return b < a; });
}

namespace gpucore::cuda_emulator {

// Runs `kernel` (the kernel called with its arguments) on every thread of every block of `grid`. A configuration
// CUDA refuses (no blocks, too many threads, dynamic shared memory, which no kernel uses and this does not
// emulate) launches nothing and leaves its error for cudaGetLastError.
void launch(dim3 grid, dim3 block, size_t dynamic_shared_bytes, cudaStream_t stream,
            const std::function<void()>& kernel);

// Waits for every thread of the block that has not returned from the kernel.
void sync_block();

// A failed GPUCORE_KERNEL_ASSERT: prints the condition as CUDA does, ends the launch (the blocks not yet run are
// not run) and leaves cudaErrorAssert.
[[noreturn]] void kernel_assert_failed(const char* condition, const char* file, int line, const char* function);

}  // namespace gpucore::cuda_emulator

inline void __syncthreads() { gpucore::cuda_emulator::sync_block(); }
