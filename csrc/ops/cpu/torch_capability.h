#pragma once
// Which build of torch's CPU kernels runs on this machine, where a result's last bit depends on it: torchvision
// calls them, and gpucore's kernels must round as they do.
#include <ATen/Version.h>

namespace gpucore::ops {

// Whether torch runs its vector kernels: on x86 the AVX2 and AVX-512 builds, not the baseline build that a CPU
// without AVX2 (or ATEN_CPU_CAPABILITY=default) gets; on ARM always. The vector builds fuse add_(other, alpha)'s
// multiply-add (Vectorized's fmadd), and torchvision resizes uint8 images natively only with them.
inline bool torch_runs_vector_kernels() {
#if defined(__x86_64__) || defined(_M_X64)
  static const bool vector = at::get_cpu_capability() != "DEFAULT";  // fixed for the process: read once
  return vector;
#else
  return true;
#endif
}

}  // namespace gpucore::ops
