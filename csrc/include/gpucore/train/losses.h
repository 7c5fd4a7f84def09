#pragma once
// Built-in losses, computed in float32 from the model's output; shape mismatches are ConfigErrors
// that name the loss and both shapes.
#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace gpucore {

enum class LossKind { kCrossEntropy, kMultiLabelSoftMargin, kBCEWithLogits, kDiceBCE, kCTC };
std::vector<std::string> loss_names();
LossKind parse_loss(const std::string& name);  // cross_entropy, multilabel_soft_margin, bce_with_logits, dice_bce, ctc
std::string to_string(LossKind kind);

// CTC (sequence models: a CNN + GRU that reads a line of characters, a sign-language video model): output
// (N, T, classes) logits, batch first; targets (N, S) class indices padded with -1 after each sequence; class 0 is
// the blank. With sequence_lengths the targets are (N, 1 + S): column 0 each clip's real frames (before the batch's
// padding), then its labels padded with -1, and clip i's output steps are min(ceil(frames_i / temporal_stride), T);
// without, every sample has all T. Impossible alignments (fewer output steps than the labels plus their adjacent
// repeats need) count as zero loss rather than stopping the run; the metrics count them (ctc_unfit).

struct LossConfig {
  LossKind kind = LossKind::kCrossEntropy;
  double label_smoothing = 0.0;  // cross_entropy
  int64_t heads = 0;             // multilabel_soft_margin: targets given as (N, heads) class indices
  // cross_entropy: one float32 weight per class on the output's device, torch's `weight=` (the mean is
  // sum(w[t_i] * l_i) / sum(w[t_i])); undefined: every class weighs 1.
  at::Tensor class_weights;
  // cross_entropy: class targets of this value count in no loss or metric (as torch's ignore_index): the loss is
  // the mean over the other targets, and the metrics leave them out of numerator and denominator.
  int64_t ignore_index = -100;
  // ctc: the targets carry each clip's frame count in column 0 (the data's sequence_lengths_in_target), and the model
  // gives one output step per temporal_stride frames (its temporal_stride attribute).
  bool sequence_lengths = false;
  int64_t temporal_stride = 1;
  // ctc: a class decoding never emits (-1: none), a gloss vocabulary's "<unk>": no training target has it, and a
  // dev or test gloss the training split never had is encoded as it, so it must score as an error, never as a hit.
  int64_t undecoded_class = -1;
};

// A CTC batch as ctc_loss takes it: the labels (N, S) padded with -1, each sample's output steps and label count
// (int64, on the target's device). ConfigError for an output that is not (N, T, classes) or targets that are not
// integer (N, S) (with sequence_lengths: (N, 1 + S)). A negative frame count reads as 0 steps: a clip that fits nothing.
struct CTCBatch {
  at::Tensor labels;
  at::Tensor input_lengths;
  at::Tensor target_lengths;
};
CTCBatch ctc_batch(const LossConfig& config, const at::Tensor& output, const at::Tensor& target);

// Mean over the batch. For multi-head targets given as indices, they are one-hot encoded first.
at::Tensor compute_loss(const LossConfig& config, const at::Tensor& output, const at::Tensor& target);

// Targets as the loss wants them (one-hot float for multi-head indices, float for BCE).
at::Tensor prepare_target(const LossConfig& config, const at::Tensor& output, const at::Tensor& target);

}  // namespace gpucore
