// CUDA side of gpucore::ema_update: checks, device guard and stream, then the tensors in chunks of one type.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "ops/cuda/ema_kernels.h"
#include "ops/cuda/kernel_launch_check.h"
#include "ops/ema.h"

namespace gpucore::ops {
namespace {

cuda::EmaType ema_type(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return cuda::EmaType::kFloat32;
    case at::kDouble:
      return cuda::EmaType::kFloat64;
    case at::kHalf:
      return cuda::EmaType::kFloat16;
    case at::kBFloat16:
      return cuda::EmaType::kBFloat16;
    default:
      TORCH_CHECK(!at::isFloatingType(dtype), "ema_update on CUDA: no kernel averages ", dtype);
      return cuda::EmaType::kBytes;
  }
}

void ema_update_cuda(at::TensorList averages, at::TensorList sources, const at::Tensor& counters, double decay,
                     bool warmup, double warmup_gamma, double warmup_power) {
  const EmaParams params = ema_params(averages, sources, counters, decay, warmup, warmup_gamma, warmup_power);
  const c10::cuda::CUDAGuard guard(counters.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  for (const cuda::EmaType type : {cuda::EmaType::kFloat32, cuda::EmaType::kFloat64, cuda::EmaType::kFloat16,
                                   cuda::EmaType::kBFloat16, cuda::EmaType::kBytes}) {
    cuda::EmaChunk chunk{};
    for (size_t i = 0; i < averages.size(); ++i) {
      if (ema_type(averages[i].scalar_type()) != type || averages[i].numel() == 0) continue;
      chunk.averages[chunk.count] = averages[i].data_ptr();
      chunk.sources[chunk.count] = sources[i].data_ptr();
      chunk.sizes[chunk.count] =
          type == cuda::EmaType::kBytes ? averages[i].numel() * averages[i].element_size() : averages[i].numel();
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
