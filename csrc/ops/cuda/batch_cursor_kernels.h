#pragma once
// Launcher of the batch cursor's CUDA kernels (raw buffers on the current device), kept free of torch headers.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace gpucore::ops::cuda {

// index[i] = order[*cursor + i] for i < count, then *cursor += count (two launches: every read before the move).
void launch_next_indices(const int64_t* order, int64_t* cursor, int64_t* index, int64_t count, cudaStream_t stream);

}  // namespace gpucore::ops::cuda
