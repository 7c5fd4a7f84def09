// The host side of kernel_dtype.h: at::ScalarType to the kernels' dtype (declared in kernel_launch_check.h). Torch
// headers but no CUDA runtime, so the build without CUDA compiles it too, for gpucore_kernel_tests.
#include <c10/util/Exception.h>

#include <algorithm>
#include <optional>

#include "ops/cuda/kernel_launch_check.h"

namespace gpucore::ops {
namespace {

std::optional<cuda::KernelDtype> element_dtype(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return cuda::KernelDtype::kFloat32;
    case at::kDouble:
      return cuda::KernelDtype::kFloat64;
    case at::kHalf:
      return cuda::KernelDtype::kFloat16;
    case at::kBFloat16:
      return cuda::KernelDtype::kBFloat16;
    default:
      if (at::isFloatingType(dtype)) return std::nullopt;  // float8 and the like: no kernel computes in them
      return cuda::KernelDtype::kBytes;
  }
}

const char* dtype_name(cuda::KernelDtype dtype) {
  switch (dtype) {
    case cuda::KernelDtype::kFloat32:
      return "float32";
    case cuda::KernelDtype::kFloat64:
      return "float64";
    case cuda::KernelDtype::kFloat16:
      return "float16";
    case cuda::KernelDtype::kBFloat16:
      return "bfloat16";
    case cuda::KernelDtype::kBytes:
      return "any dtype that is not floating-point (copied as bytes)";
  }
  return "?";
}

}  // namespace

cuda::KernelDtype kernel_dtype(at::ScalarType dtype, c10::ArrayRef<cuda::KernelDtype> valid, const std::string& op,
                               const std::string& what) {
  const std::optional<cuda::KernelDtype> element = element_dtype(dtype);
  if (element && std::find(valid.begin(), valid.end(), *element) != valid.end()) return *element;
  std::string names;
  for (size_t i = 0; i < valid.size(); ++i) {
    names += i == 0 ? "" : i + 1 == valid.size() ? " or " : ", ";
    names += dtype_name(valid[i]);
  }
  TORCH_CHECK(false, op, " on CUDA: ", what, " must be ", names, ", got ", dtype);
}

}  // namespace gpucore::ops
