// The emulated CUDA grid itself (csrc/ops/cuda/emulator): what the kernel tests rely on it for. Threads of a block
// run at once and meet at __syncthreads, blocks run in a shuffled order, atomics are exact, half and bfloat16
// round as CUDA does, and launches CUDA refuses or kernels that fail a check end in CUDA's errors.
#include <gtest/gtest.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "ops/color_math.h"
#include "ops/cuda/color_kernels.h"
#include "ops/cuda/kernel_launch.h"

namespace {

// Every thread counts itself in, then waits (up to a few seconds) until the whole block has: a block whose
// threads ran one after another would never get there.
__global__ void all_threads_at_once_kernel(int* arrived, int* saw_everyone) {
  atomicAdd(arrived, 1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::atomic_ref<int>(*arrived).load() < static_cast<int>(blockDim.x) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  if (std::atomic_ref<int>(*arrived).load() == static_cast<int>(blockDim.x)) atomicAdd(saw_everyone, 1);
}

TEST(CudaEmulator, ThreadsOfABlockRunAtOnce) {
  int arrived = 0, saw_everyone = 0;
  GPUCORE_LAUNCH(all_threads_at_once_kernel, 1, 64, 0, nullptr, &arrived, &saw_everyone);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(saw_everyone, 64);
}

// Each round every thread writes its slot, then reads its neighbour's: right only if __syncthreads waits for all.
// Threads past `active` return first, as a kernel's bounds check does: the barrier no longer waits for them.
__global__ void neighbour_kernel(const int* input, int* output, int rounds, unsigned active) {
  __shared__ int slots[256];
  if (threadIdx.x >= active) return;
  int value = input[blockIdx.x * blockDim.x + threadIdx.x];
  for (int round = 0; round < rounds; ++round) {
    slots[threadIdx.x] = value;
    __syncthreads();
    value += slots[(threadIdx.x + 1) % active];
    __syncthreads();
  }
  output[blockIdx.x * blockDim.x + threadIdx.x] = value;
}

TEST(CudaEmulator, SyncthreadsIsABarrierThatExitedThreadsLeave) {
  constexpr int kBlocks = 3, kThreads = 256, kRounds = 5;
  constexpr unsigned kActive = 200;
  std::vector<int> input(kBlocks * kThreads), output(kBlocks * kThreads, -1);
  std::mt19937 engine(1);
  for (int& v : input) v = static_cast<int>(engine() % 1000);
  GPUCORE_LAUNCH(neighbour_kernel, kBlocks, kThreads, 0, nullptr, input.data(), output.data(), kRounds, kActive);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (int b = 0; b < kBlocks; ++b) {
    std::vector<int> values(input.begin() + b * kThreads, input.begin() + b * kThreads + kActive);
    for (int round = 0; round < kRounds; ++round) {
      std::vector<int> next(kActive);
      for (unsigned t = 0; t < kActive; ++t) next[t] = values[t] + values[(t + 1) % kActive];
      values = next;
    }
    for (unsigned t = 0; t < kActive; ++t) {
      ASSERT_EQ(output[b * kThreads + t], values[t]) << "block " << b << " thread " << t;
    }
  }
}

__global__ void block_order_kernel(int* next, int* order) {
  if (threadIdx.x == 0) order[blockIdx.y * gridDim.x + blockIdx.x] = atomicAdd(next, 1);
}

TEST(CudaEmulator, BlocksRunOnceEachInAShuffledOrder) {
  int next = 0;
  std::vector<int> order(64, -1);
  GPUCORE_LAUNCH(block_order_kernel, dim3(16, 4), 32, 0, nullptr, &next, order.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<int> sorted = order, identity(order.size());
  std::sort(sorted.begin(), sorted.end());
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(order, identity);
}

__global__ void atomics_kernel(unsigned long long* count, double* sum, int* lowest, int* highest) {
  const int value = static_cast<int>((blockIdx.x * 7919u + threadIdx.x * 104729u) % 100003u) - 50000;
  atomicAdd(count, 1ULL);
  atomicAdd(sum, 0.5);
  atomicMin(lowest, value);
  atomicMax(highest, value);
}

TEST(CudaEmulator, AtomicsLoseNoUpdate) {
  constexpr unsigned kBlocks = 4, kThreads = 1024;
  unsigned long long count = 0;
  double sum = 0;
  int lowest = 1 << 30, highest = -(1 << 30);
  GPUCORE_LAUNCH(atomics_kernel, kBlocks, kThreads, 0, nullptr, &count, &sum, &lowest, &highest);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  int want_low = 1 << 30, want_high = -(1 << 30);
  for (unsigned b = 0; b < kBlocks; ++b) {
    for (unsigned t = 0; t < kThreads; ++t) {
      const int value = static_cast<int>((b * 7919u + t * 104729u) % 100003u) - 50000;
      want_low = std::min(want_low, value), want_high = std::max(want_high, value);
    }
  }
  EXPECT_EQ(count, kBlocks * kThreads);
  EXPECT_EQ(sum, 0.5 * kBlocks * kThreads);
  EXPECT_EQ(lowest, want_low);
  EXPECT_EQ(highest, want_high);
}

// c10::Half and c10::BFloat16 round to nearest even, as CUDA's __float2half_rn and __float2bfloat16_rn.
TEST(CudaEmulator, HalfAndBfloat16ConvertAsCuda) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float from_c10 = static_cast<float>(c10::Half(static_cast<uint16_t>(bits), c10::Half::from_bits()));
    const float emulated = __half2float(__half{static_cast<uint16_t>(bits)});
    if (std::isnan(from_c10)) {
      ASSERT_TRUE(std::isnan(emulated));
      continue;
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(emulated), std::bit_cast<uint32_t>(from_c10)) << "half bits " << bits;
  }
  std::mt19937 engine(2);
  std::vector<float> values = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 1e-8f, 2.9802322e-08f, 5.9604645e-08f,
                               6.1035156e-05f, 6.0975552e-05f, 3.0e38f, -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::denorm_min()};
  for (int i = 0; i < 200000; ++i) {
    values.push_back(std::bit_cast<float>(static_cast<uint32_t>(engine())));  // every exponent
    // Half's range, from below its smallest subnormal to past its largest value.
    values.push_back(std::bit_cast<float>(0x33000000u + static_cast<uint32_t>(engine() % 0x14800000u)));
  }
  for (const float value : values) {
    if (std::isnan(value)) continue;
    ASSERT_EQ(__float2half_rn(value).bits, c10::Half(value).x) << value;
    ASSERT_EQ(__float2bfloat16_rn(value).bits, c10::BFloat16(value).x) << value;
  }
  EXPECT_EQ(__float2half_rn(std::numeric_limits<float>::quiet_NaN()).bits, 0x7fff);
  EXPECT_EQ(__float2bfloat16_rn(std::numeric_limits<float>::quiet_NaN()).bits, 0x7fff);
}

__global__ void checked_kernel(const int* values, int* blocks_run) {
  GPUCORE_KERNEL_ASSERT(values[blockIdx.x] >= 0);
  if (threadIdx.x == 0) atomicAdd(blocks_run, 1);
}

TEST(CudaEmulator, RefusedLaunchesAndFailedChecksEndInCudaErrors) {
  int blocks_run = 0;
  const std::vector<int> good(8, 1);
  GPUCORE_LAUNCH(checked_kernel, 0, 32, 0, nullptr, good.data(), &blocks_run);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  GPUCORE_LAUNCH(checked_kernel, 8, 1025, 0, nullptr, good.data(), &blocks_run);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  GPUCORE_LAUNCH(checked_kernel, 8, 32, 16, nullptr, good.data(), &blocks_run);
  EXPECT_EQ(cudaGetLastError(), cudaErrorNotSupported);
  EXPECT_EQ(blocks_run, 0);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // read once, then cleared

  std::vector<int> bad(8, 1);
  bad[5] = -1;
  GPUCORE_LAUNCH(checked_kernel, 8, 32, 0, nullptr, bad.data(), &blocks_run);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorAssert);
  EXPECT_LT(blocks_run, 8);  // the grid ends at the failed check
}

// The colour and erase kernels check the values their ops cannot read without waiting for the device, in release
// builds too (this binary is one): a wrong one fails the launch with a device-side assert, nothing is written past
// the image.
TEST(CudaEmulator, ColorAndEraseKernelsCheckTheirValuesInReleaseBuilds) {
  std::vector<uint8_t> image(3 * 4 * 4, 7), scratch(image.size());
  const std::vector<int64_t> codes = {gpucore::ops::kColorInvert, gpucore::ops::kColorOpCount};
  const std::vector<double> magnitudes = {0.0, 0.0};
  gpucore::ops::cuda::launch_color_ops(image.data(), scratch.data(), codes.data(), magnitudes.data(), 1, 2, 3, 4, 4,
                                       nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorAssert);

  std::vector<float> images(2 * 4 * 4);
  const std::vector<int64_t> boxes = {0, 0, 4, 4, 2, 1, 3, 2};  // the second box reaches past the bottom
  const std::vector<float> fill = {1.0f, 2.0f};
  gpucore::ops::cuda::launch_erase(images.data(), gpucore::ops::cuda::KernelDtype::kFloat32, boxes.data(), fill.data(),
                                   nullptr, 2, 1, 4, 4, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorAssert);
}

}  // namespace
