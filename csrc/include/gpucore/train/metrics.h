#pragma once
// Metric sums kept on the device; read() (or the caller's copy of sums()) is the only host synchronisation.
#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "gpucore/train/losses.h"

namespace gpucore {

// The names read() may report for this loss ("loss", "accuracy", "top5_accuracy", ...): top-k only
// when the output has more than top_k classes, which is known once the model has run.
std::vector<std::string> reported_metrics(const LossConfig& loss, int64_t top_k);

class MetricTracker {
 public:
  // top_k: extra top-k accuracy for classification (0 = off).
  MetricTracker(LossConfig loss, int64_t top_k, const at::Device& device);

  // Starts over (an epoch), in place: the sums keep their address.
  void reset();
  // output: model output; target: as given by the data; loss: the batch's mean loss (float32). Reads
  // them without autograd.
  void update(const at::Tensor& output, const at::Tensor& target, const at::Tensor& loss);
  // Host read: "loss" always; "accuracy" and "top{k}_accuracy" (cross_entropy); "char_accuracy" and
  // "seq_accuracy" (multi-head); "accuracy", "iou" and "dice" (bce_with_logits, dice_bce).
  std::map<std::string, double> read() const;
  // The same from sums() already copied to the host (a caller that copies more in the same read).
  std::map<std::string, double> read(const double* host_sums) const;
  int64_t samples_seen_on_host() const { return samples_host_; }
  // A replayed CUDA graph updates the sums without update() running on the host: the Engine counts its batches.
  void set_samples_seen_on_host(int64_t samples) { samples_host_ = samples; }
  const at::Tensor& sums() const { return sums_; }

 private:
  LossConfig loss_;
  int64_t top_k_;
  at::Tensor sums_;  // float64 [loss*n, n, correct, correct_k, char_correct, char_total, seq_correct, inter, union, dice_num, dice_den]
  int64_t samples_host_ = 0;     // counted from batch shapes, no sync
  bool top_k_computed_ = false;  // known from shapes: the output had more than top_k classes
};

}  // namespace gpucore
