// The kernels' one dtype dispatch (ops/cuda/kernel_dtype.h, kernel_dtype.cpp): what KernelDtypes<...>::dispatch
// calls, and kernel_dtype's map from at::ScalarType and its error.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ops/cuda/augment_kernels.h"
#include "ops/cuda/ema_kernels.h"
#include "ops/cuda/kernel_dtype.h"
#include "ops/cuda/kernel_launch_check.h"

namespace gpucore::ops {
namespace {

// What KernelDtypes<...>::dispatch called: the element type's size and whether it is a float, or nothing.
template <typename Dtypes>
std::vector<std::pair<size_t, bool>> dispatched(cuda::KernelDtype dtype) {
  std::vector<std::pair<size_t, bool>> calls;
  Dtypes::dispatch(dtype, [&](auto element) {
    using T = typename decltype(element)::type;
    calls.emplace_back(sizeof(T), std::is_floating_point_v<T>);
  });
  return calls;
}

TEST(KernelDtypes, DispatchCallsOnceWithTheElementTypeOfAListedDtype) {
  using Calls = std::vector<std::pair<size_t, bool>>;
  static_assert(std::is_same_v<cuda::KernelElement<cuda::KernelDtype::kFloat16>::type, __half>);
  static_assert(std::is_same_v<cuda::KernelElement<cuda::KernelDtype::kBFloat16>::type, __nv_bfloat16>);
  EXPECT_EQ(dispatched<cuda::EmaDtypes>(cuda::KernelDtype::kFloat32), (Calls{{4, true}}));
  EXPECT_EQ(dispatched<cuda::EmaDtypes>(cuda::KernelDtype::kFloat64), (Calls{{8, true}}));
  EXPECT_EQ(dispatched<cuda::EmaDtypes>(cuda::KernelDtype::kFloat16), (Calls{{2, false}}));
  EXPECT_EQ(dispatched<cuda::EmaDtypes>(cuda::KernelDtype::kBFloat16), (Calls{{2, false}}));
  EXPECT_EQ(dispatched<cuda::EmaDtypes>(cuda::KernelDtype::kBytes), (Calls{{1, false}}));
  // A dtype the list lacks calls nothing (the launcher's callers refused it with kernel_dtype).
  EXPECT_EQ(dispatched<cuda::AugmentOutDtypes>(cuda::KernelDtype::kFloat64), Calls{});
  EXPECT_EQ(dispatched<cuda::FloatingKernelDtypes>(cuda::KernelDtype::kBytes), Calls{});
}

std::string kernel_dtype_error(at::ScalarType dtype, c10::ArrayRef<cuda::KernelDtype> valid) {
  try {
    kernel_dtype(dtype, valid, "some_op", "images");
  } catch (const c10::Error& error) {
    return error.what_without_backtrace();
  }
  return "no error";
}

TEST(KernelDtypes, KernelDtypeMapsScalarTypesAndNamesTheOpAndTheValidDtypesOtherwise) {
  EXPECT_EQ(kernel_dtype(at::kHalf, cuda::FloatingKernelDtypes::values, "op", "x"), cuda::KernelDtype::kFloat16);
  EXPECT_EQ(kernel_dtype(at::kLong, cuda::EmaDtypes::values, "op", "x"), cuda::KernelDtype::kBytes);
  EXPECT_EQ(kernel_dtype(at::kBool, cuda::EmaDtypes::values, "op", "x"), cuda::KernelDtype::kBytes);
  EXPECT_EQ(kernel_dtype(at::kComplexFloat, cuda::EmaDtypes::values, "op", "x"), cuda::KernelDtype::kBytes);
  EXPECT_EQ(kernel_dtype_error(at::kInt, cuda::FloatingKernelDtypes::values),
            "some_op on CUDA: images must be float32, float64, float16 or bfloat16, got Int");
  EXPECT_EQ(kernel_dtype_error(at::kDouble, cuda::AugmentOutDtypes::values),
            "some_op on CUDA: images must be float32, float16 or bfloat16, got Double");
  // A floating-point dtype no kernel computes in is not copied as bytes either.
  EXPECT_EQ(kernel_dtype_error(at::kFloat8_e4m3fn, cuda::EmaDtypes::values),
            "some_op on CUDA: images must be float32, float64, float16, bfloat16 or any dtype that is not "
            "floating-point (copied as bytes), got Float8_e4m3fn");
}

}  // namespace
}  // namespace gpucore::ops
