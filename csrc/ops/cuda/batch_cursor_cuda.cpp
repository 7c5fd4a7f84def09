// CUDA side of the batch cursor op: checks, device guard and stream, then the kernels.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "ops/train_step/batch_cursor.h"
#include "ops/cuda/batch_cursor_kernels.h"
#include "ops/cuda/kernel_launch_check.h"

namespace gpucore::ops {
namespace {

void next_indices_cuda(const at::Tensor& order, const at::Tensor& cursor, const at::Tensor& index) {
  check_next_indices_inputs(order, cursor, index);
  const c10::cuda::CUDAGuard guard(order.device());
  cuda::launch_next_indices(order.data_ptr<int64_t>(), cursor.data_ptr<int64_t>(), index.data_ptr<int64_t>(),
                            index.numel(), c10::cuda::getCurrentCUDAStream().stream());
  check_kernel_launch("gpucore::next_indices");
}

}  // namespace

TORCH_LIBRARY_IMPL(gpucore, CUDA, m) { m.impl("next_indices", &next_indices_cuda); }

}  // namespace gpucore::ops
