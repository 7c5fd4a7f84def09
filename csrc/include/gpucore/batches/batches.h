#pragma once
// Where micro-batches come from. Every gpucore source draws each epoch's order and augmentation from
// (seed, epoch) alone, so batches never depend on the device, the thread count or the source:
//  - TensorBatches serves in-memory tensors (kept on the training device when they fit): each step is
//    a slice of the epoch's permutation, a gather and the fused transform, with no host work.
//  - FileBatches (file_batches.h) decodes image files on reader threads while training runs.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gpucore/batches/transforms.h"

namespace gpucore {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual int64_t remaining() const = 0;  // batches next() will still return in this epoch
  // Next (inputs, targets) on the training device; false at the end of the epoch.
  virtual bool next(at::Tensor& inputs, at::Tensor& targets) = 0;
};

// The per-batch transform of image data sets kept as uint8: the `transforms` list (transforms.h; config
// key crop_padding and hflip arrive as its RandomCrop and RandomHorizontalFlip entries), then scaling to
// [0, 1] and per-channel normalisation (gpucore::augment). The random draws belong to (seed, epoch,
// sample), so they do not depend on the batch size or the device. Segmentation masks (targets N x H x W
// of the images' size) follow the geometric transforms.
struct AugmentConfig {
  bool enabled = false;
  std::vector<TransformSpec> transforms;  // in list order
  std::vector<double> mean, std;  // per channel, unless the list has a Normalize; empty: no normalisation
  at::ScalarType dtype = at::kFloat;  // float32, float16 or bfloat16
  bool channels_last = false;         // the batch in channels-last memory format
};

// The epoch plan every seeded source shares: order, equal shards per rank, augmentation draws, and the
// position in the epoch (for resuming mid-epoch).
class EpochBatches : public BatchSource {
 public:
  // Serve only this rank's equal share of each epoch (distributed training), of the epoch's order from
  // sample `first_sample` on (the samples all ranks of an earlier run consumed before a resume, at any
  // world size); takes effect at start_epoch.
  void set_shard(int64_t rank, int64_t world_size, int64_t first_sample = 0);
  // Draw each epoch's order as `samples` draws with replacement, sample i with probability weights[i] / sum
  // (a balanced sampler: each class equally often in expectation), from the same (seed, epoch) generator as
  // the shuffle; float64, one finite non-negative weight per sample. Undefined: shuffled or not, as constructed.
  // Takes effect at start_epoch.
  void set_sampling_weights(const at::Tensor& weights);
  // Starts `epoch`, skipping its first `skip_batches` batches (resume mid-epoch).
  virtual void start_epoch(int64_t epoch, int64_t skip_batches = 0);
  int64_t remaining() const override;
  int64_t total_batches() const;                   // in a whole epoch
  int64_t position() const { return position_; }  // batches served in this epoch, skipped ones included
  // The device tensors a step reads or writes (the epoch's order, the cursor in it, the batch's indices,
  // each transform's parameters): refilled in place, so their addresses never change (what a CUDA graph
  // needs).
  std::vector<std::pair<std::string, at::Tensor>> step_buffers() const;

 protected:
  // `samples` inputs whose targets (moved to `device`) are `targets`, or undefined when the source
  // reads each batch's targets itself; `what` names the data in errors.
  EpochBatches(int64_t samples, const at::Tensor& targets, int64_t batch_size, bool shuffle, bool drop_last,
               uint64_t seed, const at::Device& device, AugmentConfig augment, const std::string& what);
  int64_t batch_begin(int64_t batch) const { return batch * batch_size_; }  // position in the epoch's order
  // The most samples a batch holds: batch_size, or all of them when it is larger (buffers are sized by this).
  int64_t longest_batch() const;
  int64_t batch_end(int64_t batch) const;
  // The input images' height and width (the transforms' parameters depend on them); before start_epoch.
  // 0 x 0: each image at its own size, brought to one by the list's per-image transforms (per_image_image).
  void set_image_size(int64_t height, int64_t width);
  const TransformPipeline& pipeline() const { return pipeline_; }
  // Sample `sample`'s image (uint8 H x W x C on the host, its own size) through the list's per-image transforms
  // with this epoch's draws: uint8 C x h x w. For sources whose images come at their own sizes (0 x 0).
  at::Tensor per_image_image(const at::Tensor& image, int64_t sample) const {
    return pipeline_.apply_per_image(image, per_image_seed_, sample);
  }
  // The same, the image read from `source` (only the box the first per-image transform resizes, where it does one).
  at::Tensor per_image_image(PerImageSource& source, int64_t sample) const {
    return pipeline_.apply_per_image(source, per_image_seed_, sample);
  }
  // The batch of the samples `index` (on the device) from their inputs: targets gathered (or
  // `batch_targets` when given), images transformed (masks in the targets follow the geometry).
  void finish_batch(const at::Tensor& batch_inputs, const at::Tensor& index, at::Tensor& inputs, at::Tensor& targets,
                    const at::Tensor& batch_targets = {}) const;

  // The next batch's sample indices (a view of index_, the batch's length), from the device-side cursor,
  // which it advances: a step reads the epoch's position on the device, not from the host.
  at::Tensor next_index(int64_t batch) const;

  AugmentConfig augment_;
  at::Tensor order_host_, order_;  // this epoch's samples (this rank's share), on the host and on the device
  int64_t batch_size_;
  at::Device device_;
  int64_t position_ = 0;  // the host's count of batches served, for remaining() and resuming
  at::Tensor cursor_;     // int64 0-dim on the device: the position in order_ of the next batch
  at::Tensor index_;      // int64 (batch_size) on the device: the batch's sample indices

 private:
  at::Tensor targets_;          // on the device
  TransformPipeline pipeline_;
  std::vector<std::vector<at::Tensor>> transform_params_;  // this epoch's draws per sample, on the device
  int64_t image_height_ = 0, image_width_ = 0;
  uint64_t per_image_seed_ = 0;  // this epoch's seed of the per-image transforms' draws
  int64_t samples_;
  bool shuffle_, drop_last_;
  at::Tensor sampling_weights_;  // float64 per sample on the host; undefined: no weighted draws
  uint64_t seed_;
  int64_t rank_ = 0, world_size_ = 1, first_sample_ = 0;
};

// resident: the inputs are kept on the training device; otherwise they stay in host memory and each
// batch is gathered on the host and copied over pinned memory.
class TensorBatches : public EpochBatches {
 public:
  TensorBatches(at::Tensor inputs, at::Tensor targets, int64_t batch_size, bool shuffle, bool drop_last,
                uint64_t seed, const at::Device& device, AugmentConfig augment = {}, bool resident = true);
  bool next(at::Tensor& inputs, at::Tensor& targets) override;

 private:
  at::Tensor inputs_;
  bool resident_;
};

}  // namespace gpucore
