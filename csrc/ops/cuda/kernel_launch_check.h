#pragma once
// The check after every launch of gpucore's CUDA kernels, in every build type.
#include <string>

namespace gpucore::ops {

// Raises CUDA's launch error, if any, as a c10::Error naming `op`. A GPU gpucore's build has no kernels for (a
// Tesla M40, sm_52, against the default arch list) gets the build's arch list and how to rebuild, as
// `gpucore doctor` reports it, instead of CUDA's "no kernel image is available for execution on the device".
void check_kernel_launch(const std::string& op);

}  // namespace gpucore::ops
