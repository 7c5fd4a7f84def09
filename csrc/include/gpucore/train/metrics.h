#pragma once
// Metric sums kept on the device; read() (or the caller's copy of sums()) is the only host synchronisation.
#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "gpucore/train/losses.h"

namespace gpucore {

// One step of a minimal alignment of a hypothesis with its reference (Levenshtein over words or glosses): a
// substitution ('s'), a deletion ('d': a reference word missing) or an insertion ('i': a word the reference lacks),
// with the reference and hypothesis positions it concerns (-1: none). Matches are not listed. Among the minimal
// alignments, the one whose backtrace from the end prefers a match, then a substitution, then a deletion.
struct WordEdit {
  char kind;
  int64_t reference;
  int64_t hypothesis;
};
std::vector<WordEdit> word_edits(const std::vector<int64_t>& reference, const std::vector<int64_t>& hypothesis);

// The names read() may report for this loss ("loss", "accuracy", "top5_accuracy", ...): top-k only
// when the output has more than top_k classes, which is known once the model has run.
// training: only those the training step's sums report (not the class means, balanced accuracy and macro F1, which
// need an evaluation's per-class counts).
std::vector<std::string> reported_metrics(const LossConfig& loss, int64_t top_k, bool training = false);

class MetricTracker {
 public:
  // What the per-class counts hold: none yet; a confusion matrix of pixels (classes x classes + 1); each class's or
  // label's [TP..., FP..., FN...] (one class per sample: 3 x classes + 1; multi-label: 3 x labels).
  enum class Counts { kNone, kConfusion, kClasses, kLabels };

  // top_k: extra top-k accuracy for classification (0 = off). per_class: also counts per class on the device, for
  // the metrics averaged over classes: with per-pixel class targets (cross_entropy segmentation) a confusion
  // matrix (mean IoU and Dice), with one class per sample each class's TP, FP and FN (balanced accuracy, macro F1),
  // with multi-label outputs each label's (macro F1). An evaluation's tracker; the training step's keeps to its
  // fixed sums.
  MetricTracker(LossConfig loss, int64_t top_k, const at::Device& device, bool per_class = false);

  // Starts over (an epoch), in place: the sums keep their address.
  void reset();
  // Starts a pass that goes on with the sums as they are (restored from a checkpoint of the epoch's earlier part):
  // everything else starts over, as reset() does.
  void continue_sums();
  // output: model output; target: as given by the data; loss: the batch's mean loss (float32). Reads
  // them without autograd.
  void update(const at::Tensor& output, const at::Tensor& target, const at::Tensor& loss);
  // Host read: "loss" always; "accuracy" and "top{k}_accuracy" (cross_entropy), with per_class and per-pixel
  // targets also "miou", "mdice" and both without class 0, with per_class and a class per sample
  // "balanced_accuracy" and "f1_macro"; "char_accuracy" and "seq_accuracy" (multi-head);
  // "accuracy", "iou" and "dice" (bce_with_logits, dice_bce, multilabel_soft_margin without heads), for
  // multi-label outputs also "subset_accuracy" and with per_class "f1_macro"; "seq_accuracy" and "ctc_unfit" (ctc),
  // with per_class and per-clip lengths (loss.sequence_lengths) also "wer", greedy decoding's word error rate.
  std::map<std::string, double> read() const;
  // The same from sums() already copied to the host (a caller that copies more in the same read), and the per-class
  // counts' copy (none: null).
  std::map<std::string, double> read(const double* host_sums, const double* host_class_counts = nullptr) const;
  int64_t samples_seen_on_host() const { return samples_host_; }
  // A replayed CUDA graph updates the sums without update() running on the host: the Engine counts its batches.
  void set_samples_seen_on_host(int64_t samples) { samples_host_ = samples; }
  const at::Tensor& sums() const { return sums_; }

 private:
  // The per-class counts of `kind` for `classes` classes in `cells` cells: zeros at a pass's first batch, after which
  // every batch must keep to them.
  void start_counts(Counts kind, int64_t classes, int64_t cells);
  void add_confusion(const at::Tensor& output, const at::Tensor& target);
  void add_class_counts(const at::Tensor& output, const at::Tensor& target);
  void add_label_counts(const at::Tensor& predicted, const at::Tensor& truth);
  // Adds the word edits of decoded against truth ((N, W) each, padded with -1) and truth's words: a host copy.
  void add_word_edits(const at::Tensor& decoded, const at::Tensor& truth);

  LossConfig loss_;
  int64_t top_k_;
  at::Tensor sums_;  // float64 [loss sum, what it is the mean over (counted targets, else samples), correct, correct_k, char_correct, char_total, seq_correct, inter, union, dice_num, dice_den, ctc_unfit]
  // per_class, float64, undefined until a batch needs them, in the layout counts_ says (the last cell of the
  // cross_entropy ones: targets not counted).
  at::Tensor class_counts_;
  Counts counts_ = Counts::kNone;
  int64_t classes_ = 0;  // the classes or labels class_counts_ counts
  bool per_class_;
  int64_t samples_host_ = 0;     // counted from batch shapes, no sync
  bool top_k_computed_ = false;  // known from shapes: the output had more than top_k classes
  // ctc with per_class and sequence_lengths: the word edits (S + D + I) and reference words of the pass, counted on
  // the host (ctc_loss reads its lengths there too).
  int64_t word_edits_ = 0;
  int64_t reference_words_ = 0;
};

}  // namespace gpucore
