#pragma once
// GPUCORE_HOST_DEVICE marks the torch-free math headers' functions (step_math.h, ema_math.h, color_math.h,
// resample_math.h) for both the CPU and the CUDA compiler, so one definition serves the kernels of both.
#ifdef __CUDACC__
#define GPUCORE_HOST_DEVICE __host__ __device__
#else
#define GPUCORE_HOST_DEVICE
#endif
