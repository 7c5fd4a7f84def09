#pragma once
// The checks around every launch of gpucore's CUDA kernels, in every build type: a tensor's dtype against the
// launcher's before, CUDA's launch error after.
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include <string>

#include "ops/cuda/kernel_dtype.h"

namespace gpucore::ops {

// The kernels' dtype of `dtype` (kBytes for any dtype that is not floating-point), if it is one of `valid` (the
// launcher's KernelDtypes<...>::values); else a c10::Error naming `op`, `what` and the valid dtypes:
// "erase on CUDA: images must be float32, float64, float16 or bfloat16, got Int". In kernel_dtype.cpp, which the
// build without CUDA compiles too (gpucore_kernel_tests checks it).
cuda::KernelDtype kernel_dtype(at::ScalarType dtype, c10::ArrayRef<cuda::KernelDtype> valid, const std::string& op,
                               const std::string& what);

// Raises CUDA's launch error, if any, as a c10::Error naming `op`. A GPU gpucore's build has no kernels for (a
// Tesla M40, sm_52, against the default arch list) gets the build's arch list and how to rebuild, as
// `gpucore doctor` reports it, instead of CUDA's "no kernel image is available for execution on the device".
void check_kernel_launch(const std::string& op);

}  // namespace gpucore::ops
