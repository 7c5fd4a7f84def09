#include "gpucore/train/metrics.h"

#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/full.h>
#include <ATen/ops/where.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>

#include "ops/train_step/train_step.h"

namespace gpucore {

namespace {
// The first five slots are gpucore::accumulate_metrics' (ops/train_step/train_step.h).
enum Slot { kLossSum, kCount, kCorrect, kCorrectTopK, kAccTotal, kCharCorrect, kCharTotal, kSeqCorrect, kInter, kUnion, kDiceNum, kDiceDen, kUnfit, kSlots };
}

MetricTracker::MetricTracker(LossConfig loss, int64_t top_k, const at::Device& device, bool per_class)
    : loss_(loss), top_k_(top_k), per_class_(per_class) {
  sums_ = at::zeros({kSlots}, at::TensorOptions().dtype(at::kDouble).device(device));
}

void MetricTracker::reset() {
  sums_.zero_();
  continue_sums();
}

void MetricTracker::continue_sums() {
  class_counts_ = at::Tensor();
  counts_ = Counts::kNone;
  samples_host_ = 0;
  top_k_computed_ = false;
  word_edits_ = reference_words_ = 0;
}

void MetricTracker::update(const at::Tensor& output, const at::Tensor& target, const at::Tensor& loss) {
  // Plain reads of the step's tensors: no autograd, no detach op.
  const at::NoGradGuard no_grad;
  const int64_t n = output.size(0);
  samples_host_ += n;
  if (loss_.kind == LossKind::kCrossEntropy) {
    // Loss, count, accuracy and top-k in one op; soft labels (float targets) have no accuracy.
    const bool labels = !target.is_floating_point();
    const bool top_k = labels && top_k_ > 0 && output.dim() == 2 && output.size(1) > top_k_;
    top_k_computed_ = top_k_computed_ || top_k;
    ops::accumulate_metrics(sums_, output, labels ? std::optional<at::Tensor>(target) : std::nullopt, loss,
                            top_k ? top_k_ : 0, loss_.ignore_index);
    if (per_class_ && labels) {
      if (output.dim() > 2) {
        add_confusion(output, target);
      } else {
        add_class_counts(output, target);
      }
    }
    return;
  }
  ops::accumulate_metrics(sums_, output, std::nullopt, loss, 0, loss_.ignore_index);
  const auto zero = at::zeros({}, sums_.options());
  std::vector<at::Tensor> add(kSlots, zero);
  switch (loss_.kind) {
    case LossKind::kCrossEntropy:  // above
      break;
    case LossKind::kCTC: {
      // Greedy decoding on the device: best class per step up to each sample's output length, repeats collapsed,
      // blanks (0) dropped, then compared with the target sequence in full.
      const CTCBatch batch = ctc_batch(loss_, output, target);
      const int64_t steps = output.size(1);
      const at::Tensor within = at::arange(steps, batch.input_lengths.options()).unsqueeze(0) <
                                batch.input_lengths.unsqueeze(1);
      at::Tensor scores = output;
      if (loss_.undecoded_class >= 0) {
        scores = output.clone();
        scores.select(-1, loss_.undecoded_class).fill_(-std::numeric_limits<double>::infinity());
      }
      const at::Tensor best = at::where(within, scores.argmax(-1), 0);  // (N, T); past the length: blanks
      const at::Tensor previous = at::cat({at::full({n, 1}, -1, best.options()), best.slice(1, 0, steps - 1)}, 1);
      const at::Tensor keep = (best != 0) & (best != previous);
      const at::Tensor slot = at::where(keep, keep.cumsum(1) - 1, at::full_like(best, steps));
      const at::Tensor& labels = batch.labels;
      const int64_t width = std::max(steps, labels.size(1));
      at::Tensor decoded = at::full({n, width + 1}, -1, best.options());
      decoded.scatter_(1, slot, best);
      decoded = decoded.slice(1, 0, width);
      at::Tensor truth = at::full({n, width}, -1, best.options());
      truth.slice(1, 0, labels.size(1)).copy_(at::where(labels >= 0, labels, -1));
      add[kSeqCorrect] = (decoded == truth).all(1).sum().to(at::kDouble);
      // Samples no alignment fits: fewer output steps than the labels and a blank between each adjacent repeat.
      const at::Tensor repeats =
          ((labels.slice(1, 1) == labels.slice(1, 0, -1)) & (labels.slice(1, 1) >= 0)).sum(1);
      add[kUnfit] = (batch.input_lengths < batch.target_lengths + repeats).sum().to(at::kDouble);
      if (per_class_ && loss_.sequence_lengths) add_word_edits(decoded, truth);
      break;
    }
    case LossKind::kMultiLabelSoftMargin:
      if (loss_.heads > 0) {
        const at::Tensor logits = output.reshape({n, loss_.heads, -1});
        const at::Tensor predicted = logits.argmax(-1);
        const at::Tensor truth =
            target.is_floating_point() ? target.reshape({n, loss_.heads, -1}).argmax(-1) : target;
        const at::Tensor hits = predicted == truth;
        add[kCharCorrect] = hits.sum().to(at::kDouble);
        add[kCharTotal] = at::full_like(zero, static_cast<double>(n * loss_.heads));
        add[kSeqCorrect] = hits.all(1).sum().to(at::kDouble);
        break;
      }
      [[fallthrough]];  // without heads: a set of labels per sample, scored as bce_with_logits scores them
    case LossKind::kBCEWithLogits:
    case LossKind::kDiceBCE: {
      const at::Tensor predicted = (output > 0).flatten(1);  // sigmoid(x) > 0.5
      const at::Tensor truth = (prepare_target(loss_, output, target) > 0.5).flatten(1);
      const at::Tensor inter = (predicted & truth).sum().to(at::kDouble);
      add[kInter] = inter;
      add[kUnion] = (predicted | truth).sum().to(at::kDouble);
      add[kDiceNum] = 2 * inter;
      add[kDiceDen] = (predicted.sum() + truth.sum()).to(at::kDouble);
      add[kCorrect] = (predicted == truth).sum().to(at::kDouble);
      add[kAccTotal] = at::full_like(zero, static_cast<double>(truth.numel()));
      if (output.dim() == 2) {  // labels per sample (multi-label), not pixels: samples right in full, per label
        add[kSeqCorrect] = (predicted == truth).all(1).sum().to(at::kDouble);
        add[kCharTotal] = at::full_like(zero, static_cast<double>(n));
        if (per_class_) add_label_counts(predicted, truth);
      }
      break;
    }
  }
  sums_.add_(at::stack(add));
}

void MetricTracker::add_word_edits(const at::Tensor& decoded, const at::Tensor& truth) {
  const at::Tensor both = at::stack({decoded, truth}).to(at::kCPU, at::kLong).contiguous();
  const int64_t n = both.size(1), width = both.size(2);
  const int64_t* values = both.data_ptr<int64_t>();
  const auto sequence = [&](int64_t which, int64_t sample) {
    std::vector<int64_t> words;
    for (const int64_t* v = values + (which * n + sample) * width; words.size() < static_cast<size_t>(width) && *v >= 0; ++v) {
      words.push_back(*v);
    }
    return words;
  };
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<int64_t> reference = sequence(1, i);
    word_edits_ += static_cast<int64_t>(word_edits(reference, sequence(0, i)).size());
    reference_words_ += static_cast<int64_t>(reference.size());
  }
}

std::vector<WordEdit> word_edits(const std::vector<int64_t>& reference, const std::vector<int64_t>& hypothesis) {
  const size_t n = reference.size(), m = hypothesis.size();
  // distance[i][j]: edits between the first i reference and the first j hypothesis words.
  std::vector<std::vector<int64_t>> distance(n + 1, std::vector<int64_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) distance[i][0] = static_cast<int64_t>(i);
  for (size_t j = 0; j <= m; ++j) distance[0][j] = static_cast<int64_t>(j);
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      distance[i][j] = std::min({distance[i - 1][j - 1] + (reference[i - 1] != hypothesis[j - 1]),
                                 distance[i - 1][j] + 1, distance[i][j - 1] + 1});
    }
  }
  std::vector<WordEdit> edits;
  size_t i = n, j = m;
  while (i > 0 || j > 0) {
    if (i > 0 && j > 0 && distance[i][j] == distance[i - 1][j - 1] + (reference[i - 1] != hypothesis[j - 1])) {
      --i, --j;
      if (reference[i] != hypothesis[j]) edits.push_back({'s', static_cast<int64_t>(i), static_cast<int64_t>(j)});
    } else if (i > 0 && distance[i][j] == distance[i - 1][j] + 1) {
      --i;
      edits.push_back({'d', static_cast<int64_t>(i), -1});
    } else {
      --j;
      edits.push_back({'i', -1, static_cast<int64_t>(j)});
    }
  }
  std::reverse(edits.begin(), edits.end());
  return edits;
}

void MetricTracker::start_counts(Counts kind, int64_t classes, int64_t cells) {
  if (!class_counts_.defined()) {
    class_counts_ = at::zeros({cells}, sums_.options());
    classes_ = classes;
    counts_ = kind;
  }
  TORCH_CHECK(classes_ == classes && counts_ == kind, "metrics: outputs of ", classes, " classes or labels after "
              "outputs of ", classes_, " (or of another layout) in one pass");
}

void MetricTracker::add_label_counts(const at::Tensor& predicted, const at::Tensor& truth) {
  const int64_t labels = predicted.size(1);
  start_counts(Counts::kLabels, labels, 3 * labels);
  class_counts_.add_(at::cat({(predicted & truth).sum(0), (predicted & ~truth).sum(0), (~predicted & truth).sum(0)})
                         .to(at::kDouble));
}

void MetricTracker::add_class_counts(const at::Tensor& output, const at::Tensor& target) {
  const int64_t classes = output.size(1);
  start_counts(Counts::kClasses, classes, 3 * classes + 1);
  // Each counted sample adds 1 to TP[t] (right) or FN[t] (wrong) and, when wrong, to FP[predicted]; the ignored ones
  // (and targets outside [0, C)) land in the extra last cell, which no metric reads: no boolean indexing, so no host
  // sync on CUDA. 3 C numbers rather than a C x C confusion matrix: what the host copies each pass stays small.
  const at::Tensor truth = target.to(at::kLong).reshape(-1), predicted = output.argmax(1);
  const at::Tensor counted = (truth != loss_.ignore_index) & (truth >= 0) & (truth < classes);
  const at::Tensor right = predicted == truth, unused = at::full_like(truth, 3 * classes);
  const at::Tensor cell = at::cat({at::where(counted, at::where(right, truth, truth + 2 * classes), unused),
                                   at::where(counted & ~right, predicted + classes, unused)});
  class_counts_.scatter_add_(0, cell, at::ones({1}, sums_.options()).expand_as(cell));
}

void MetricTracker::add_confusion(const at::Tensor& output, const at::Tensor& target) {
  const int64_t classes = output.size(1), cells = classes * classes;
  start_counts(Counts::kConfusion, classes, cells + 1);
  // Cell true * C + predicted of each counted pixel; the ignored ones (and targets outside [0, C)) land in the
  // extra last cell, which no metric reads: no boolean indexing, so no host sync on CUDA.
  const at::Tensor truth = target.to(at::kLong).reshape(-1), predicted = output.argmax(1).reshape(-1);
  const at::Tensor counted = (truth != loss_.ignore_index) & (truth >= 0) & (truth < classes);
  const at::Tensor cell = at::where(counted, truth * classes + predicted, at::full_like(truth, cells));
  class_counts_.scatter_add_(0, cell, at::ones({1}, sums_.options()).expand_as(cell));
}

namespace {

// What the metrics are computed from: the host copy of the sums and, in an evaluation, of the per-class counts
// (MetricTracker's class_counts_): cross_entropy's confusion matrix (confusion[true * classes + predicted],
// pixels counted) or the classes' or labels' [TP..., FP..., FN...], as `counts` says (kNone: none).
struct HostSums {
  const double* s;
  bool top_k_computed;
  const double* class_counts;  // null without them
  int64_t classes;             // the classes or labels they count
  MetricTracker::Counts counts;  // their layout
  int64_t word_edits;       // ctc with per-clip lengths, in an evaluation: S + D + I over the pass
  int64_t reference_words;  // and the reference words they are counted against (0: none counted)
};

// A metric read() reports: its name, and its value from the host sums, or none when the batches gave it nothing
// to count (no labels for accuracy, no output with more than top_k classes for top-k). Every name lives here, so
// reported_metrics and read() cannot disagree.
struct Metric {
  std::string name;
  std::function<std::optional<double>(const HostSums&)> value;
  bool evaluation_only = false;  // needs the per-class counts only an evaluation's tracker keeps
};

// num / den where the sums counted something (den > 0), else `empty`.
std::function<std::optional<double>(const HostSums&)> share(Slot num, Slot den,
                                                            std::optional<double> empty = std::nullopt) {
  return [=](const HostSums& h) { return h.s[den] > 0 ? std::optional<double>(h.s[num] / h.s[den]) : empty; };
}

// The mean over classes `first`.. of each class's IoU (dice: Dice, 2 TP / (2 TP + FP + FN)) from the confusion
// matrix; a class with no true and no predicted pixel has none and is left out of the mean (as torchmetrics'
// JaccardIndex(average="macro"), mmsegmentation's and Cityscapes' mIoU).
std::function<std::optional<double>(const HostSums&)> class_mean(int64_t first, bool dice) {
  return [=](const HostSums& h) -> std::optional<double> {
    if (h.counts != MetricTracker::Counts::kConfusion) return std::nullopt;
    const int64_t c = h.classes;
    const double* confusion = h.class_counts;
    double total = 0;
    int64_t scored = 0;
    for (int64_t k = first; k < c; ++k) {
      double true_pixels = 0, predicted_pixels = 0;
      for (int64_t j = 0; j < c; ++j) {
        true_pixels += confusion[k * c + j];
        predicted_pixels += confusion[j * c + k];
      }
      const double hits = confusion[k * c + k], wrong = true_pixels + predicted_pixels - 2 * hits;
      if (hits + wrong == 0) continue;
      total += dice ? 2 * hits / (2 * hits + wrong) : hits / (hits + wrong);
      ++scored;
    }
    return scored > 0 ? std::optional<double>(total / static_cast<double>(scored)) : std::nullopt;
  };
}

// The mean over the classes (or labels) of per_class(TP, FP, FN), from the per-class counts of `counts`' layout
// ([TP..., FP..., FN...]); a class where scored(TP, FP, FN) is false is left out of the mean, none scored: none.
std::function<std::optional<double>(const HostSums&)> count_mean(
    MetricTracker::Counts counts, std::function<bool(double, double, double)> scored,
    std::function<double(double, double, double)> per_class) {
  return [=](const HostSums& h) -> std::optional<double> {
    if (h.counts != counts) return std::nullopt;
    const double *tp = h.class_counts, *fp = tp + h.classes, *fn = fp + h.classes;
    double total = 0;
    int64_t averaged = 0;
    for (int64_t k = 0; k < h.classes; ++k) {
      if (!scored(tp[k], fp[k], fn[k])) continue;
      total += per_class(tp[k], fp[k], fn[k]);
      ++averaged;
    }
    return averaged > 0 ? std::optional<double>(total / static_cast<double>(averaged)) : std::nullopt;
  };
}

double f1(double tp, double fp, double fn) {
  const double den = 2 * tp + fp + fn;
  return den > 0 ? 2 * tp / den : 0.0;
}

std::vector<Metric> metrics_of(const LossConfig& loss, int64_t top_k) {
  std::vector<Metric> metrics{{"loss", share(kLossSum, kCount)}};
  switch (loss.kind) {
    case LossKind::kCrossEntropy:
      metrics.push_back({"accuracy", share(kCorrect, kAccTotal)});  // soft labels: none
      if (top_k > 0) {
        metrics.push_back({"top" + std::to_string(top_k) + "_accuracy", [](const HostSums& h) {
                             return h.top_k_computed && h.s[kAccTotal] > 0
                                        ? std::optional<double>(h.s[kCorrectTopK] / h.s[kAccTotal])
                                        : std::nullopt;
                           }});
      }
      // One class per sample, in evaluations (validation, gpucore evaluate) only. Balanced accuracy: the mean of the
      // recalls TP / (TP + FN) of the classes with targets (scikit-learn's balanced_accuracy_score; a class only
      // predicted has no recall). Macro F1: the mean F1 of the classes true or predicted (scikit-learn's
      // f1_score(average="macro"), whose labels are those in the targets or predictions: a class true but never
      // predicted, or predicted but never true, scores 0; one neither is in no mean, so zero_division never applies).
      metrics.push_back({"balanced_accuracy",
                         count_mean(MetricTracker::Counts::kClasses,
                                    [](double tp, double, double fn) { return tp + fn > 0; },
                                    [](double tp, double, double fn) { return tp / (tp + fn); }),
                         true});
      metrics.push_back({"f1_macro",
                         count_mean(MetricTracker::Counts::kClasses,
                                    [](double tp, double fp, double fn) { return tp + fp + fn > 0; }, f1),
                         true});
      // Per-pixel class targets, in evaluations (validation, gpucore evaluate) only.
      metrics.push_back({"miou", class_mean(0, false), true});
      metrics.push_back({"miou_no_background", class_mean(1, false), true});  // class 0 left out of the mean
      metrics.push_back({"mdice", class_mean(0, true), true});
      metrics.push_back({"mdice_no_background", class_mean(1, true), true});
      break;
    case LossKind::kCTC:
      metrics.push_back({"seq_accuracy", share(kSeqCorrect, kCount)});
      // Samples whose labels no alignment of their output steps fits (their loss counts as 0): the data's to fix.
      metrics.push_back({"ctc_unfit", [](const HostSums& h) { return std::optional<double>(h.s[kUnfit]); }});
      if (loss.sequence_lengths) {
        // Word (gloss) error rate, (S + D + I) / reference words over the pass, as jiwer's wer pools them.
        metrics.push_back({"wer", [](const HostSums& h) {
                             return h.reference_words > 0 ? std::optional<double>(static_cast<double>(h.word_edits) /
                                                                                  static_cast<double>(h.reference_words))
                                                          : std::nullopt;
                           }, true});
      }
      break;
    case LossKind::kMultiLabelSoftMargin:
      if (loss.heads > 0) {
        metrics.push_back({"char_accuracy", share(kCharCorrect, kCharTotal)});
        metrics.push_back({"seq_accuracy", [](const HostSums& h) {
                             return h.s[kCharTotal] > 0 ? std::optional<double>(h.s[kSeqCorrect] / h.s[kCount])
                                                        : std::nullopt;
                           }});
        break;
      }
      [[fallthrough]];
    case LossKind::kBCEWithLogits:
    case LossKind::kDiceBCE:
      metrics.push_back({"accuracy", share(kCorrect, kAccTotal)});  // of the labels or pixels
      metrics.push_back({"iou", share(kInter, kUnion, 1.0)});      // nothing predicted or true: a perfect 1
      metrics.push_back({"dice", share(kDiceNum, kDiceDen, 1.0)});  // multi-label: the labels' micro F1
      // Multi-label outputs (N, labels) only: samples with every label right; the labels' macro F1 (evaluations).
      metrics.push_back({"subset_accuracy", share(kSeqCorrect, kCharTotal)});
      // The labels' F1 averaged over every label: one neither true nor predicted scores 0 (as torchmetrics'
      // MultilabelF1Score(average="macro") and scikit-learn's f1_score(average="macro", zero_division=0)).
      metrics.push_back({"f1_macro",
                         count_mean(MetricTracker::Counts::kLabels, [](double, double, double) { return true; }, f1),
                         true});
      break;
  }
  return metrics;
}

}  // namespace

std::vector<std::string> reported_metrics(const LossConfig& loss, int64_t top_k, bool training) {
  std::vector<std::string> names;
  for (const Metric& metric : metrics_of(loss, top_k)) {
    if (!(training && metric.evaluation_only)) names.push_back(metric.name);
  }
  return names;
}

std::map<std::string, double> MetricTracker::read() const {
  // One host copy of the sums and the confusion matrix together.
  const at::Tensor host = (class_counts_.defined() ? at::cat({sums_, class_counts_}) : sums_).cpu();
  return read(host.data_ptr<double>(), class_counts_.defined() ? host.data_ptr<double>() + kSlots : nullptr);
}

std::map<std::string, double> MetricTracker::read(const double* s, const double* class_counts) const {
  std::map<std::string, double> metrics;
  if (s[kCount] == 0) return metrics;
  const HostSums host{s, top_k_computed_, class_counts, class_counts != nullptr ? classes_ : 0,
                      class_counts != nullptr ? counts_ : Counts::kNone, word_edits_, reference_words_};
  for (const Metric& metric : metrics_of(loss_, top_k_)) {
    if (const std::optional<double> value = metric.value(host)) metrics[metric.name] = *value;
  }
  return metrics;
}

}  // namespace gpucore
