// CUDA kernels of the batch cursor: one thread per index of the batch, then one thread that moves the cursor.
#include <cuda_runtime.h>

#include "ops/cuda/batch_cursor_kernels.h"
#include "ops/cuda/kernel_launch.h"

namespace gpucore::ops::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void gather_indices_kernel(const int64_t* order, const int64_t* cursor, int64_t* index, int64_t count) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < count) index[i] = order[*cursor + i];
}

__global__ void advance_cursor_kernel(int64_t* cursor, int64_t count) { *cursor += count; }

}  // namespace

void launch_next_indices(const int64_t* order, int64_t* cursor, int64_t* index, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  const unsigned blocks = static_cast<unsigned>((count + kThreads - 1) / kThreads);
  GPUCORE_LAUNCH(gather_indices_kernel, blocks, kThreads, 0, stream, order, cursor, index, count);
  GPUCORE_LAUNCH(advance_cursor_kernel, 1, 1, 0, stream, cursor, count);
}

}  // namespace gpucore::ops::cuda
