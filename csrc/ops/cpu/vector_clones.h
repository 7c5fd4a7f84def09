#pragma once
// GPUCORE_VECTOR_CLONES on a function: GCC also compiles it for x86-64-v3 CPUs (AVX2, FMA) and x86-64-v4 ones
// (AVX-512) and picks the version at load time. Its loops then run on 32-byte vectors, reversed loads (flips)
// vectorise, fmaf is one instruction instead of the C library's exact software version, and AVX-512's narrowing
// conversions make the uint8 <-> float loops another 1.5x faster. The files that use it are compiled
// -ffp-contract=off, so all versions round every operation alike and give equal results.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define GPUCORE_VECTOR_CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define GPUCORE_VECTOR_CLONES
#endif

#include <type_traits>
#include <utility>

namespace gpucore::ops {

// A kernel templated on its element type whose float32 version is compiled into a GPUCORE_VECTOR_CLONES entry point
// (float_clone: a plain function that calls the template, which must be always_inline so each clone holds its loops):
// float32 calls that entry point, other types (bfloat16, half, double) the template itself.
template <typename T, typename FloatClone, typename Template, typename... Args>
inline void call_vector_clone(FloatClone float_clone, Template generic, Args&&... args) {
  if constexpr (std::is_same_v<T, float>) {
    float_clone(std::forward<Args>(args)...);
  } else {
    generic(std::forward<Args>(args)...);
  }
}

}  // namespace gpucore::ops
