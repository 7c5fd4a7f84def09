#pragma once
// GPUCORE_VECTOR_CLONES on a function: GCC also compiles it for x86-64-v3 CPUs (AVX2, FMA) and x86-64-v4 ones
// (AVX-512) and picks the version at load time. Its loops then run on 32-byte vectors, reversed loads (flips)
// vectorise, fmaf is one instruction instead of the C library's exact software version, and AVX-512's narrowing
// conversions make the uint8 <-> float loops another 1.5x faster. The files that use it are compiled
// -ffp-contract=off, so all versions round every operation alike and give equal results. On a function template
// every instantiation is cloned: a kernel templated on its element type (float32, float64, bfloat16, half) runs its
// loops on AVX2/AVX-512 in each of them (its inline template body inside the clone: always_inline).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define GPUCORE_VECTOR_CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define GPUCORE_VECTOR_CLONES
#endif
