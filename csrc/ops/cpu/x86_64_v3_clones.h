#pragma once
// GPUCORE_X86_64_V3_CLONES on a function: GCC also compiles it for x86-64-v3 CPUs (AVX2, FMA) and picks the
// version at load time. Its loops then run on 32-byte vectors, reversed loads (flips) vectorise, and fmaf is one
// instruction instead of the C library's exact software version. The files that use it are compiled
// -ffp-contract=off, so both versions round every operation alike and give equal results.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define GPUCORE_X86_64_V3_CLONES __attribute__((target_clones("default", "arch=x86-64-v3")))
#else
#define GPUCORE_X86_64_V3_CLONES
#endif
