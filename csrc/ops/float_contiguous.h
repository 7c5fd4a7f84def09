#pragma once
#include <ATen/core/Tensor.h>

namespace gpucore::ops {

// Kernels compute in float32 on contiguous memory, whatever the caller passed.
inline at::Tensor float_contiguous(const at::Tensor& t) { return t.to(at::kFloat).contiguous(); }

}  // namespace gpucore::ops
