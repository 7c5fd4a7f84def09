#pragma once
// The batch cursor as a torch op (namespace gpucore), with CPU and CUDA kernels: the sample indices of an epoch's
// next batch read on the device, so that serving a batch never syncs with the host (EpochBatches, batches.cpp).
//
//   next_indices(Tensor order, Tensor(a!) cursor, Tensor(b!) index) -> ()
//       The epoch's next batch of sample indices from a device-side cursor: index[i] = order[cursor + i]
//       for i < index.numel(), then cursor += index.numel(). order, index: int64 vectors; cursor: one int64.
#include <ATen/core/Tensor.h>

namespace gpucore::ops {

void check_next_indices_inputs(const at::Tensor& order, const at::Tensor& cursor, const at::Tensor& index);

// The op through the dispatcher (CPU or CUDA kernel by the tensors' device).
void next_indices(const at::Tensor& order, const at::Tensor& cursor, const at::Tensor& index);

}  // namespace gpucore::ops
