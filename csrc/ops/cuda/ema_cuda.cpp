// CUDA side of gpucore::ema_update: checks, device guard and stream, then the tensors in chunks of one type.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "ops/cuda/ema_kernels.h"
#include "ops/cuda/kernel_launch_check.h"
#include "ops/train_step/ema.h"

namespace gpucore::ops {
namespace {

cuda::KernelDtype ema_type(at::ScalarType dtype) {
  return kernel_dtype(dtype, cuda::EmaDtypes::values, "ema_update", "averages");
}

void ema_update_cuda(at::TensorList averages, at::TensorList sources, const at::Tensor& counters, double decay,
                     bool warmup, double warmup_gamma, double warmup_power) {
  const EmaParams params = ema_params(averages, sources, counters, decay, warmup, warmup_gamma, warmup_power);
  const c10::cuda::CUDAGuard guard(counters.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  for (const cuda::KernelDtype type : cuda::EmaDtypes::values) {
    cuda::EmaChunk chunk{};
    for (size_t i = 0; i < averages.size(); ++i) {
      if (ema_type(averages[i].scalar_type()) != type || averages[i].numel() == 0) continue;
      chunk.averages[chunk.count] = averages[i].data_ptr();
      chunk.sources[chunk.count] = sources[i].data_ptr();
      chunk.sizes[chunk.count] =
          type == cuda::KernelDtype::kBytes ? averages[i].numel() * averages[i].element_size() : averages[i].numel();
      if (++chunk.count == cuda::kEmaChunkSize) {
        cuda::launch_ema_update(chunk, type, counters.data_ptr<float>(), params, stream);
        check_kernel_launch("gpucore::ema_update");
        chunk.count = 0;
      }
    }
    cuda::launch_ema_update(chunk, type, counters.data_ptr<float>(), params, stream);
    check_kernel_launch("gpucore::ema_update");
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(gpucore, CUDA, m) { m.impl("ema_update", &ema_update_cuda); }

}  // namespace gpucore::ops
