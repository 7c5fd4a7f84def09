#include "gpucore/batches.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/randperm.h>

#include "gpucore/errors.h"

namespace gpucore {

TensorBatches::TensorBatches(at::Tensor inputs, at::Tensor targets, int64_t batch_size, bool shuffle, bool drop_last,
                             uint64_t seed, const at::Device& device)
    : batch_size_(batch_size), shuffle_(shuffle), drop_last_(drop_last), seed_(seed), device_(device) {
  if (inputs.dim() == 0 || targets.dim() == 0 || inputs.size(0) != targets.size(0)) {
    throw ConfigError("data: inputs and targets must have the same number of samples, got inputs of shape " +
                      c10::str(inputs.sizes()) + " and targets of shape " + c10::str(targets.sizes()));
  }
  if (batch_size < 1) throw ConfigError("batch_size must be >= 1, got " + std::to_string(batch_size));
  if (drop_last && inputs.size(0) < batch_size) {
    throw ConfigError("data: " + std::to_string(inputs.size(0)) + " samples make no full batch of " +
                      std::to_string(batch_size) + " with drop_last; lower batch_size or set drop_last false");
  }
  inputs_ = inputs.to(device_);
  targets_ = targets.to(device_);
  start_epoch(0);
}

void TensorBatches::start_epoch(int64_t epoch, int64_t skip_batches) {
  const int64_t n = inputs_.size(0);
  if (shuffle_) {
    // Drawn on the CPU from (seed, epoch) alone: the same order on every device and machine.
    const at::Generator generator = at::detail::createCPUGenerator(seed_ * 1000003ULL + static_cast<uint64_t>(epoch));
    at::Tensor order = at::randperm(n, generator, at::TensorOptions().dtype(at::kLong));
    // Pinned, the copy to the GPU is asynchronous: starting an epoch costs no host sync.
    if (device_.is_cuda()) order = order.pin_memory();
    order_ = order.to(device_, /*non_blocking=*/device_.is_cuda());
  } else {
    order_ = at::arange(n, at::TensorOptions().dtype(at::kLong).device(device_));
  }
  position_ = std::min(skip_batches, total_batches());
}

int64_t TensorBatches::total_batches() const {
  const int64_t n = inputs_.size(0);
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

int64_t TensorBatches::remaining() const { return total_batches() - position_; }

bool TensorBatches::next(at::Tensor& inputs, at::Tensor& targets) {
  if (position_ >= total_batches()) return false;
  const int64_t begin = position_ * batch_size_;
  const int64_t end = std::min(begin + batch_size_, inputs_.size(0));
  const at::Tensor index = order_.slice(0, begin, end);
  inputs = inputs_.index_select(0, index);
  targets = targets_.index_select(0, index);
  ++position_;
  return true;
}

}  // namespace gpucore
