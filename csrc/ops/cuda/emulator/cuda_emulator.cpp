#include "ops/cuda/emulator/cuda_emulator.h"

#include <algorithm>
#include <barrier>
#include <bit>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

namespace gpucore::cuda_emulator {
namespace {

// __syncthreads for one block. Unlike std::barrier, a thread that returns from the kernel leaves only the rest of
// this block's barriers (CUDA counts exited threads as arrived); reset() makes every thread present again for
// the next block.
class BlockBarrier {
 public:
  explicit BlockBarrier(unsigned threads) : present_(threads) {}

  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t phase = phase_;
    if (++arrived_ == present_) {
      release();
      return;
    }
    released_.wait(lock, [&] { return phase_ != phase; });
  }

  void leave() {
    const std::lock_guard<std::mutex> lock(mutex_);
    --present_;
    if (arrived_ > 0 && arrived_ == present_) release();
  }

  void reset(unsigned threads) {
    const std::lock_guard<std::mutex> lock(mutex_);
    present_ = threads;
    arrived_ = 0;
  }

 private:
  void release() {
    arrived_ = 0;
    ++phase_;
    released_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable released_;
  unsigned present_;
  unsigned arrived_ = 0;
  uint64_t phase_ = 0;
};

// Thrown by a failed kernel assertion, caught where the emulated thread starts.
struct KernelTrap {};

thread_local BlockBarrier* current_block = nullptr;
std::mutex error_mutex;
cudaError_t last_error = cudaSuccess;

void set_error(cudaError_t error) {
  const std::lock_guard<std::mutex> lock(error_mutex);
  if (last_error == cudaSuccess) last_error = error;
}

cudaError_t take_error() {
  const std::lock_guard<std::mutex> lock(error_mutex);
  return std::exchange(last_error, cudaSuccess);
}

// CUDA's limits for every device since compute capability 3.0.
cudaError_t check_configuration(dim3 grid, dim3 block, size_t dynamic_shared_bytes) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535 ||
      threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64) {
    return cudaErrorInvalidConfiguration;
  }
  return dynamic_shared_bytes == 0 ? cudaSuccess : cudaErrorNotSupported;
}

// Every block of the grid, in an order that changes from launch to launch (and is the same from run to run).
std::vector<uint3> shuffled_blocks(dim3 grid) {
  static std::mt19937_64 engine(34);
  std::vector<uint3> blocks;
  blocks.reserve(size_t{grid.x} * grid.y * grid.z);
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) blocks.push_back({x, y, z});
    }
  }
  std::shuffle(blocks.begin(), blocks.end(), engine);
  return blocks;
}

}  // namespace

void launch(dim3 grid, dim3 block, size_t dynamic_shared_bytes, cudaStream_t /*stream*/,
            const std::function<void()>& kernel) {
  if (const cudaError_t error = check_configuration(grid, block, dynamic_shared_bytes); error != cudaSuccess) {
    set_error(error);
    return;
  }
  // One launch at a time, as on one stream; __shared__ variables are statics, one set per kernel.
  static std::mutex one_launch;
  const std::lock_guard<std::mutex> lock(one_launch);
  const std::vector<uint3> blocks = shuffled_blocks(grid);
  const unsigned threads = block.x * block.y * block.z;
  BlockBarrier sync(threads);
  // Every thread finishes a block before any starts the next (its __shared__ variables are the next block's).
  std::barrier block_end(threads, [&]() noexcept { sync.reset(threads); });
  std::atomic<bool> trapped{false};
  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      threadIdx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
      blockDim = block;
      gridDim = grid;
      current_block = &sync;
      for (const uint3& index : blocks) {
        blockIdx = index;
        if (!trapped.load()) {
          try {
            kernel();
          } catch (const KernelTrap&) {
            trapped = true;
          }
        }
        sync.leave();
        block_end.arrive_and_wait();
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  if (trapped) set_error(cudaErrorAssert);
}

void sync_block() { current_block->arrive_and_wait(); }

void kernel_assert_failed(const char* condition, const char* file, int line, const char* function) {
  std::fprintf(stderr, "%s:%d: %s: block: [%u,%u,%u], thread: [%u,%u,%u] Assertion `%s` failed.\n", file, line,
               function, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z, condition);
  throw KernelTrap{};
}

}  // namespace gpucore::cuda_emulator

using gpucore::cuda_emulator::take_error;

cudaError_t cudaMalloc(void** pointer, size_t bytes) {
  // CUDA gives no memory (a null pointer) for 0 bytes: a kernel that reads it fails here too.
  *pointer = bytes == 0 ? nullptr : std::malloc(bytes);
  return bytes == 0 || *pointer != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void* pointer) {
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* to, const void* from, size_t bytes, cudaMemcpyKind /*kind*/) {
  if (bytes > 0) std::memcpy(to, from, bytes);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() { return take_error(); }

cudaError_t cudaGetLastError() { return take_error(); }

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoKernelImageForDevice: return "no kernel image is available for execution on the device";
    case cudaErrorAssert: return "device-side assert triggered";
    case cudaErrorNotSupported: return "operation not supported (dynamic shared memory is not emulated)";
  }
  return "unknown error";
}

float __half2float(__half value) {
  const uint32_t sign = uint32_t{value.bits & 0x8000u} << 16, exponent = (value.bits >> 10) & 0x1fu,
                 mantissa = value.bits & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  const uint32_t bits = exponent == 31 ? sign | 0x7f800000u | (mantissa << 13)
                                       : sign | ((exponent + 112) << 23) | (mantissa << 13);
  return std::bit_cast<float>(bits);
}

__half __float2half_rn(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return {0x7fff};  // NaN, as CUDA writes it
  if (magnitude >= 0x477ff000u) return {static_cast<uint16_t>(sign | 0x7c00u)};  // >= 65520 rounds to infinity
  if (magnitude < 0x38800000u) {  // below 2^-14: a subnormal half, in units of 2^-24 (the scaling is exact)
    const float units = std::nearbyint(std::bit_cast<float>(magnitude) * 16777216.0f);
    return {static_cast<uint16_t>(sign | static_cast<uint16_t>(units))};
  }
  // Round the 13 dropped mantissa bits to nearest even, then rebias the exponent from 127 to 15.
  const uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return {static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13))};
}

float __bfloat162float(__nv_bfloat16 value) { return std::bit_cast<float>(uint32_t{value.bits} << 16); }

__nv_bfloat16 __float2bfloat16_rn(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return {0x7fff};  // NaN, as CUDA writes it
  return {static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16)};
}
