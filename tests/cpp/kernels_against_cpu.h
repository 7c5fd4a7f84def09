#pragma once
// What the tests of csrc/ops/cuda's launchers share (test_<family>_kernels.cpp, one per *_kernels.h header): each
// launcher against the CPU kernel of its op, on random inputs and the edge cases of a grid: sizes that are not a
// multiple of the block, one element, none, loops that go round a block or a grid more than once, every dtype a
// launcher takes, strides, the most channels. Without CUDA the kernels run on the emulated grid
// (csrc/ops/cuda/emulator), with CUDA on the device: the buffers are cudaMalloc'd either way. Bit-exact where the CPU
// kernel is exact to its reference; within a tolerance where the two compute differently: the CAM ops (float sums
// per block, double sums on the CPU; a multiply by the inverse range) within 1e-5 relative, and bilinear resized_crop
// (per-pixel taps in double, ATen's float upsample kernels on the CPU) within one intensity level for uint8 and 1e-5
// (relative and absolute) for float32.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "ops/cuda/kernel_dtype.h"
#include "ops/cuda/kernel_launch_check.h"

namespace gpucore::ops {

// On the emulated grid the comparisons always run; built with CUDA they run on the device, and a machine with no GPU
// or no driver (the CUDA wheel's build, checked by scripts/check_cuda_wheel.sh on a CPU machine) skips them, saying so.
class KernelsAgainstCpu : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef GPUCORE_KERNEL_TESTS_ON_DEVICE
    int devices = 0;
    const cudaError_t status = cudaGetDeviceCount(&devices);
    if (status != cudaSuccess || devices == 0) {
      GTEST_SKIP() << "no CUDA device to run the kernels on (" << cudaGetErrorString(status)
                   << "); the CPU build runs them on the emulated grid, scripts/gpu/verify.sh on a GPU";
    }
#endif
  }
};

// A CPU tensor's bytes (dense, in its own layout) in device memory, and back as a CPU tensor of that layout.
class DeviceCopy {
 public:
  explicit DeviceCopy(const at::Tensor& host) : host_(host) {
    EXPECT_TRUE(host.is_non_overlapping_and_dense());
    EXPECT_EQ(cudaMalloc(&data_, host.nbytes()), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data_, host.data_ptr(), host.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  ~DeviceCopy() { cudaFree(data_); }

  void* get() const { return data_; }
  template <typename T>
  T* get() const {
    return static_cast<T*>(data_);
  }
  at::Tensor host() const {
    at::Tensor out = at::empty_like(host_);
    EXPECT_EQ(cudaMemcpy(out.data_ptr(), data_, host_.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }

 private:
  at::Tensor host_;
  void* data_ = nullptr;
};

// The launch was accepted and its kernels ran to the end without a failed check.
inline void expect_ran() {
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

inline void expect_bitwise_equal(const at::Tensor& actual, const at::Tensor& expected) {
  ASSERT_EQ(actual.sizes(), expected.sizes());
  ASSERT_EQ(actual.scalar_type(), expected.scalar_type());
  const at::Tensor a = actual.contiguous(), e = expected.contiguous();
  if (a.numel() == 0 || std::memcmp(a.data_ptr(), e.data_ptr(), a.nbytes()) == 0) return;
  const at::Tensor differ = a.ne(e).logical_and(a.isnan().logical_and(e.isnan()).logical_not()).flatten();
  const int64_t first = differ.nonzero().numel() > 0 ? differ.nonzero()[0].item<int64_t>() : -1;
  ADD_FAILURE() << differ.sum().item<int64_t>() << " of " << a.numel() << " values differ; first at flat index "
                << first << ": " << (first >= 0 ? a.flatten()[first].item<double>() : 0.0) << " instead of "
                << (first >= 0 ? e.flatten()[first].item<double>() : 0.0);
}

inline void expect_close(const at::Tensor& actual, const at::Tensor& expected, double rtol, double atol) {
  ASSERT_EQ(actual.sizes(), expected.sizes());
  if (actual.numel() == 0) return;
  const at::Tensor error = (actual.to(at::kDouble) - expected.to(at::kDouble)).abs();
  const at::Tensor allowed = expected.to(at::kDouble).abs() * rtol + atol;
  EXPECT_TRUE(error.le(allowed).all().item<bool>())
      << "largest error " << error.max().item<double>() << " (allowed " << rtol << " relative + " << atol << ")";
}

// Seeded random tensors: the same inputs on every run, different for every case.
class Random {
 public:
  explicit Random(uint64_t seed) : generator_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}
  at::Tensor uniform(at::IntArrayRef sizes, double low, double high, at::ScalarType dtype = at::kFloat) {
    return at::empty(sizes, at::kDouble).uniform_(low, high, generator_).to(dtype);
  }
  at::Tensor integers(at::IntArrayRef sizes, int64_t low, int64_t high, at::ScalarType dtype = at::kLong) {
    return at::randint(low, high, sizes, generator_, at::TensorOptions(dtype));
  }
  int64_t integer(int64_t low, int64_t high) { return integers({}, low, high).item<int64_t>(); }
  at::Tensor permutation(int64_t n) { return at::randperm(n, generator_, at::TensorOptions(at::kLong)); }
  at::Tensor images(at::IntArrayRef sizes, at::ScalarType dtype) {
    return dtype == at::kByte ? integers(sizes, 0, 256, at::kByte) : uniform(sizes, -1.0, 2.0, dtype);
  }

 private:
  at::Generator generator_;
};

// A test's dtypes: a tensor's, and the one its launcher takes (as kernel_dtype maps it).
using DtypePairs = std::vector<std::pair<at::ScalarType, cuda::KernelDtype>>;

// A launcher's test runs every dtype its header lists (KernelDtypes<...>::values), each as kernel_dtype maps it.
inline void expect_every_listed_dtype(const DtypePairs& tested, c10::ArrayRef<cuda::KernelDtype> listed) {
  std::set<cuda::KernelDtype> launched;
  for (const auto& [dtype, launch_type] : tested) {
    launched.insert(launch_type);
    EXPECT_EQ(kernel_dtype(dtype, listed, "op", "input"), launch_type) << dtype;
  }
  EXPECT_EQ(launched, std::set<cuda::KernelDtype>(listed.begin(), listed.end()));
}

inline std::string shape_name(at::IntArrayRef sizes) {
  std::ostringstream out;
  out << sizes;
  return out.str();
}

}  // namespace gpucore::ops
