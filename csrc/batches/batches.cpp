#include "gpucore/batches/batches.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/multinomial.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randperm.h>
#include <ATen/ops/zeros.h>

#include <algorithm>

#include "gpucore/errors.h"
#include "gpucore/ranges.h"
#include "ops/train_step/batch_cursor.h"
#include "ops/cpu/batch_memory.h"

namespace gpucore {

namespace {

// Host tensor to the device; pinned first, so the copy is asynchronous and costs no host sync.
at::Tensor to_device(at::Tensor host, const at::Device& device) {
  if (device.is_cuda()) host = host.pin_memory();
  return host.to(device, /*non_blocking=*/device.is_cuda());
}

// The rows `index` of resident data: on the CPU in memory reused from earlier batches (ops/cpu/batch_memory.h),
// as a batch of large images would otherwise be mapped afresh and page-faulted every time.
at::Tensor gather_rows(const at::Tensor& data, const at::Tensor& index) {
  std::vector<int64_t> sizes = data.sizes().vec();
  sizes[0] = index.size(0);
  at::Tensor rows = ops::empty_batch(sizes, data.options());
  return at::index_select_out(rows, data, 0, index);
}

// `host` into `buffer` on the device: in place when the buffer has its shape (every epoch after the
// first), so the buffers a step reads keep their address.
void refill(at::Tensor& buffer, const at::Tensor& host, const at::Device& device) {
  if (buffer.defined() && buffer.sizes() == host.sizes() && buffer.scalar_type() == host.scalar_type()) {
    buffer.copy_(device.is_cuda() ? host.pin_memory() : host, /*non_blocking=*/device.is_cuda());
  } else {
    buffer = to_device(host, device);
  }
}

}  // namespace

EpochBatches::EpochBatches(int64_t samples, const at::Tensor& targets, int64_t batch_size, bool shuffle,
                           bool drop_last, uint64_t seed, const at::Device& device, AugmentConfig augment,
                           const std::string& what)
    : augment_(std::move(augment)), batch_size_(batch_size), device_(device), samples_(samples), shuffle_(shuffle),
      drop_last_(drop_last), seed_(seed) {
  pipeline_ = TransformPipeline(augment_.transforms, augment_.mean, augment_.std);
  if (targets.defined() && (targets.dim() == 0 || targets.size(0) != samples)) {
    throw ConfigError(what + ": inputs and targets must have the same number of samples, got " +
                      std::to_string(samples) + " inputs and targets of shape " + c10::str(targets.sizes()));
  }
  ranges::kBatchSize.require(batch_size);
  if (augment_.dtype != at::kFloat && augment_.dtype != at::kHalf && augment_.dtype != at::kBFloat16) {
    throw ConfigError("batch dtype must be float32, float16 or bfloat16, got '" +
                      std::string(c10::getDtypeNames(augment_.dtype).first) + "'");
  }
  if (drop_last && samples < batch_size) {
    throw ConfigError(what + ": " + std::to_string(samples) + " samples make no full batch of " +
                      std::to_string(batch_size) + " with drop_last; lower batch_size or set drop_last false");
  }
  if (targets.defined()) targets_ = targets.to(device_);
  const auto index_options = at::TensorOptions().dtype(at::kLong).device(device_);
  cursor_ = at::zeros({}, index_options);
  index_ = at::empty({longest_batch()}, index_options);
}

void EpochBatches::start_epoch(int64_t epoch, int64_t skip_batches) {
  if (epoch < 0 || skip_batches < 0) {
    throw ConfigError("data position (epoch " + std::to_string(epoch) + ", batch " + std::to_string(skip_batches) +
                      ") must not be negative");
  }
  const int64_t n = samples_;
  // Drawn on the CPU from (seed, epoch) alone: the same order and augmentation on every device.
  const uint64_t epoch_seed = seed_ * 1000003ULL + static_cast<uint64_t>(epoch);
  const auto on_host = at::TensorOptions().dtype(at::kLong);
  // torch.multinomial and torch.randperm with a torch.Generator seeded so draw the same (a torch Dataset's loader).
  const at::Generator order_draws = at::detail::createCPUGenerator(epoch_seed);
  at::Tensor order = sampling_weights_.defined() ? at::multinomial(sampling_weights_, n, /*replacement=*/true, order_draws)
                     : shuffle_                   ? at::randperm(n, order_draws, on_host)
                                                  : at::arange(n, on_host);
  if (world_size_ > 1 || first_sample_ > 0) {
    // Equal shards of the order's unserved rest: wrapped to a multiple of the world size (from the
    // order's start), then rank r takes every world_size-th sample from r. After b batches per rank
    // the ranks have consumed exactly the first b * batch_size * world_size samples of the padded
    // order, so a resume at any world size shards order[consumed:] the same way. Every sample is
    // served once per epoch across ranks (a few twice).
    const int64_t first = std::min(first_sample_, n), rest = n - first;
    const int64_t per_rank = (rest + world_size_ - 1) / world_size_;
    order = at::cat({order.slice(0, first), order.slice(0, 0, per_rank * world_size_ - rest)})
                .slice(0, rank_, c10::nullopt, world_size_);
  }
  order_host_ = order.contiguous();
  refill(order_, order_host_, device_);
  if (augment_.enabled) {
    at::Generator draws = at::detail::createCPUGenerator(transform_seed(seed_, epoch));
    const auto params = pipeline_.sample(n, image_height_, image_width_, draws, &per_image_seed_);
    transform_params_.resize(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      transform_params_[i].resize(params[i].size());
      for (size_t j = 0; j < params[i].size(); ++j) refill(transform_params_[i][j], params[i][j].contiguous(), device_);
    }
  }
  if (skip_batches > total_batches()) {
    position_ = total_batches();  // nothing is served until a valid start
    throw ConfigError("data position: batch " + std::to_string(skip_batches) + " of epoch " + std::to_string(epoch) +
                      " is past its end (" + std::to_string(total_batches()) +
                      " batches): a checkpoint or DataLoader state of another data set, batch size or world size?");
  }
  position_ = skip_batches;
  cursor_.fill_(batch_begin(skip_batches));
}

void EpochBatches::set_sampling_weights(const at::Tensor& weights) {
  if (!weights.defined()) {
    sampling_weights_ = at::Tensor();
    return;
  }
  if (weights.dim() != 1 || weights.size(0) != samples_ || weights.scalar_type() != at::kDouble ||
      !weights.device().is_cpu()) {
    throw ConfigError("sampling weights must be one float64 CPU value per sample (" + std::to_string(samples_) +
                      "), got " + std::string(c10::toString(weights.scalar_type())) + " " + c10::str(weights.sizes()));
  }
  if (!weights.isfinite().all().item<bool>() || (weights < 0).any().item<bool>() || weights.sum().item<double>() <= 0) {
    throw ConfigError("sampling weights must be finite, non-negative and not all zero");
  }
  sampling_weights_ = weights.contiguous();
}

void EpochBatches::set_shard(int64_t rank, int64_t world_size, int64_t first_sample) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw ConfigError("shard: rank must be in [0, world_size) and world_size >= 1, got rank " + std::to_string(rank) +
                      " of " + std::to_string(world_size));
  }
  if (first_sample < 0 || first_sample > samples_) {
    throw ConfigError("shard: first sample " + std::to_string(first_sample) + " is outside the epoch's " +
                      std::to_string(samples_) + " samples: a checkpoint of another data set?");
  }
  rank_ = rank;
  world_size_ = world_size;
  first_sample_ = first_sample;
}

int64_t EpochBatches::total_batches() const {
  const int64_t n = order_host_.size(0);
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

at::Tensor EpochBatches::next_index(int64_t batch) const {
  const int64_t length = batch_end(batch) - batch_begin(batch);
  const at::Tensor index = length == batch_size_ ? index_ : index_.narrow(0, 0, length);
  ops::next_indices(order_, cursor_, index);
  return index;
}

std::vector<std::pair<std::string, at::Tensor>> EpochBatches::step_buffers() const {
  std::vector<std::pair<std::string, at::Tensor>> buffers{{"order", order_}, {"cursor", cursor_}, {"index", index_}};
  for (size_t i = 0; i < transform_params_.size(); ++i) {
    for (size_t j = 0; j < transform_params_[i].size(); ++j) {
      buffers.emplace_back("transforms[" + std::to_string(i) + "][" + std::to_string(j) + "]", transform_params_[i][j]);
    }
  }
  return buffers;
}

int64_t EpochBatches::longest_batch() const { return std::min(batch_size_, std::max<int64_t>(samples_, 1)); }

void EpochBatches::set_image_size(int64_t height, int64_t width) {
  image_height_ = height;
  image_width_ = width;
}

int64_t EpochBatches::remaining() const { return total_batches() - position_; }

int64_t EpochBatches::batch_end(int64_t batch) const {
  return std::min(batch_begin(batch) + batch_size_, order_host_.size(0));
}

void EpochBatches::finish_batch(const at::Tensor& batch_inputs, const at::Tensor& index, at::Tensor& inputs,
                                at::Tensor& targets, const at::Tensor& batch_targets) const {
  targets = batch_targets.defined() ? batch_targets : targets_.index_select(0, index);
  // No op for a transform that would change nothing: inputs already in the batch dtype, no transform and
  // no normalisation.
  if (!augment_.enabled ||
      (transform_params_.empty() && pipeline_.mean().empty() && batch_inputs.scalar_type() == augment_.dtype)) {
    inputs = augment_.channels_last && batch_inputs.dim() == 4
                 ? batch_inputs.contiguous(at::MemoryFormat::ChannelsLast) : batch_inputs;
    return;
  }
  std::vector<std::vector<at::Tensor>> rows(transform_params_.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    for (const at::Tensor& param : transform_params_[i]) rows[i].push_back(param.index_select(0, index));
  }
  // A segmentation mask (targets N x H x W of the images' size) follows the geometry, class 0 where
  // padding or rotation brings pixels in.
  at::Tensor masks = pipeline_.moves_pixels() && targets.dim() == 3 && targets.size(1) == batch_inputs.size(2) &&
                             targets.size(2) == batch_inputs.size(3)
                         ? targets
                         : at::Tensor();
  inputs = pipeline_.apply(batch_inputs, rows, augment_.dtype, masks, /*per_image_done=*/image_height_ == 0);
  if (masks.defined()) targets = masks;
  if (augment_.channels_last) inputs = inputs.contiguous(at::MemoryFormat::ChannelsLast);
}

TensorBatches::TensorBatches(at::Tensor inputs, at::Tensor targets, int64_t batch_size, bool shuffle, bool drop_last,
                             uint64_t seed, const at::Device& device, AugmentConfig augment, bool resident)
    : EpochBatches(inputs.dim() == 0 ? 0 : inputs.size(0), targets, batch_size, shuffle, drop_last, seed, device,
                   std::move(augment), "data"),
      resident_(resident || device.is_cpu()) {
  if (!targets.defined()) throw ConfigError("data: the targets tensor is missing");
  if (augment_.enabled && inputs.dim() != 4) {
    throw ConfigError("data: image transforms need N x C x H x W inputs, got shape " + c10::str(inputs.sizes()));
  }
  inputs_ = resident_ ? inputs.to(device_) : inputs.cpu();
  if (inputs.dim() == 4) set_image_size(inputs.size(2), inputs.size(3));
  start_epoch(0);
}

bool TensorBatches::next(at::Tensor& inputs, at::Tensor& targets) {
  if (position_ >= total_batches()) return false;
  const int64_t begin = batch_begin(position_), end = batch_end(position_);
  const at::Tensor index = next_index(position_);
  const at::Tensor batch = resident_ ? gather_rows(inputs_, index)
                                     : to_device(inputs_.index_select(0, order_host_.slice(0, begin, end)), device_);
  finish_batch(batch, index, inputs, targets);
  ++position_;
  return true;
}

}  // namespace gpucore
