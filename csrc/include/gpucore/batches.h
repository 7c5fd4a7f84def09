#pragma once
// Where micro-batches come from. TensorBatches serves in-memory tensors (kept on the training
// device when they fit): each epoch is a seeded permutation, a slice and a gather, with no host work
// per step. The order depends only on (seed, epoch), never on the device or thread count.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace gpucore {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual int64_t remaining() const = 0;  // batches next() will still return in this epoch
  // Next (inputs, targets) on the training device; false at the end of the epoch.
  virtual bool next(at::Tensor& inputs, at::Tensor& targets) = 0;
};

// The per-batch transform of image data sets kept as uint8 (gpucore::augment): scale to [0, 1],
// optional random crop of the padded image and horizontal flip, per-channel normalisation. The random
// draws belong to (seed, epoch, sample), so they do not depend on the batch size or the device.
struct AugmentConfig {
  bool enabled = false;
  int64_t crop_padding = 0;
  bool hflip = false;
  std::vector<double> mean, std;  // per channel; empty: no normalisation
  at::ScalarType dtype = at::kFloat;
};

class TensorBatches : public BatchSource {
 public:
  TensorBatches(at::Tensor inputs, at::Tensor targets, int64_t batch_size, bool shuffle, bool drop_last,
                uint64_t seed, const at::Device& device, AugmentConfig augment = {});

  // Serve only this rank's equal share of each epoch (distributed training); takes effect at start_epoch.
  void set_shard(int64_t rank, int64_t world_size);
  // Starts `epoch`, skipping its first `skip_batches` batches (resume mid-epoch).
  void start_epoch(int64_t epoch, int64_t skip_batches = 0);
  int64_t remaining() const override;
  bool next(at::Tensor& inputs, at::Tensor& targets) override;
  int64_t total_batches() const;                   // in a whole epoch
  int64_t position() const { return position_; }  // batches served in this epoch, skipped ones included
  int64_t size() const { return inputs_.size(0); }

 private:
  at::Tensor inputs_, targets_, order_;
  AugmentConfig augment_;
  at::Tensor offsets_, flips_;  // this epoch's draws per sample, on the device
  int64_t batch_size_;
  bool shuffle_, drop_last_;
  uint64_t seed_;
  at::Device device_;
  int64_t position_ = 0;
  int64_t rank_ = 0, world_size_ = 1;
};

}  // namespace gpucore
