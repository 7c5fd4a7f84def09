#include "gpucore/train/metrics.h"

#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/full.h>
#include <ATen/ops/where.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>

#include <functional>
#include <optional>

#include "ops/train_step.h"

namespace gpucore {

namespace {
// The first five slots are gpucore::accumulate_metrics' (ops/train_step.h).
enum Slot { kLossSum, kCount, kCorrect, kCorrectTopK, kAccTotal, kCharCorrect, kCharTotal, kSeqCorrect, kInter, kUnion, kDiceNum, kDiceDen, kSlots };
}

MetricTracker::MetricTracker(LossConfig loss, int64_t top_k, const at::Device& device) : loss_(loss), top_k_(top_k) {
  sums_ = at::zeros({kSlots}, at::TensorOptions().dtype(at::kDouble).device(device));
}

void MetricTracker::reset() {
  sums_.zero_();
  samples_host_ = 0;
  top_k_computed_ = false;
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
                            top_k ? top_k_ : 0);
    return;
  }
  ops::accumulate_metrics(sums_, output, std::nullopt, loss, 0);
  const auto zero = at::zeros({}, sums_.options());
  std::vector<at::Tensor> add(kSlots, zero);
  switch (loss_.kind) {
    case LossKind::kCrossEntropy:  // above
      break;
    case LossKind::kMultiLabelSoftMargin: {
      if (loss_.heads <= 0) break;
      const at::Tensor logits = output.reshape({n, loss_.heads, -1});
      const at::Tensor predicted = logits.argmax(-1);
      const at::Tensor truth = target.is_floating_point() ? target.reshape({n, loss_.heads, -1}).argmax(-1) : target;
      const at::Tensor hits = predicted == truth;
      add[kCharCorrect] = hits.sum().to(at::kDouble);
      add[kCharTotal] = at::full_like(zero, static_cast<double>(n * loss_.heads));
      add[kSeqCorrect] = hits.all(1).sum().to(at::kDouble);
      break;
    }
    case LossKind::kCTC: {
      // Greedy decoding on the device: best class per step, repeats collapsed, blanks (0) dropped,
      // then compared with the target sequence in full.
      const at::Tensor best = output.argmax(-1);  // (N, T)
      const int64_t steps = best.size(1);
      const at::Tensor previous = at::cat({at::full({n, 1}, -1, best.options()), best.slice(1, 0, steps - 1)}, 1);
      const at::Tensor keep = (best != 0) & (best != previous);
      const at::Tensor slot = at::where(keep, keep.cumsum(1) - 1, at::full_like(best, steps));
      const int64_t width = std::max(steps, target.size(1));
      at::Tensor decoded = at::full({n, width + 1}, -1, best.options());
      decoded.scatter_(1, slot, best);
      at::Tensor truth = at::full({n, width}, -1, best.options());
      truth.slice(1, 0, target.size(1)).copy_(at::where(target >= 0, target, at::full_like(target, -1)));
      add[kSeqCorrect] = (decoded.slice(1, 0, width) == truth).all(1).sum().to(at::kDouble);
      break;
    }
    case LossKind::kBCEWithLogits:
    case LossKind::kDiceBCE: {
      const at::Tensor predicted = output > 0;  // sigmoid(x) > 0.5
      const at::Tensor truth = prepare_target(loss_, output, target) > 0.5;
      const at::Tensor inter = (predicted & truth).sum().to(at::kDouble);
      add[kInter] = inter;
      add[kUnion] = (predicted | truth).sum().to(at::kDouble);
      add[kDiceNum] = 2 * inter;
      add[kDiceDen] = (predicted.sum() + truth.sum()).to(at::kDouble);
      add[kCorrect] = (predicted == truth).sum().to(at::kDouble);
      add[kAccTotal] = at::full_like(zero, static_cast<double>(truth.numel()));
      break;
    }
  }
  sums_.add_(at::stack(add));
}

namespace {

// A metric read() reports: its name, and its value from the host sums, or none when the batches gave it nothing
// to count (no labels for accuracy, no output with more than top_k classes for top-k). Every name lives here, so
// reported_metrics and read() cannot disagree.
struct Metric {
  std::string name;
  std::function<std::optional<double>(const double* s, bool top_k_computed)> value;
};

// num / den where the sums counted something (den > 0), else `empty`.
std::function<std::optional<double>(const double*, bool)> share(Slot num, Slot den,
                                                                  std::optional<double> empty = std::nullopt) {
  return [=](const double* s, bool) { return s[den] > 0 ? std::optional<double>(s[num] / s[den]) : empty; };
}

std::vector<Metric> metrics_of(const LossConfig& loss, int64_t top_k) {
  std::vector<Metric> metrics{{"loss", share(kLossSum, kCount)}};
  switch (loss.kind) {
    case LossKind::kCrossEntropy:
      metrics.push_back({"accuracy", share(kCorrect, kAccTotal)});  // soft labels: none
      if (top_k > 0) {
        metrics.push_back({"top" + std::to_string(top_k) + "_accuracy", [](const double* s, bool computed) {
                             return computed ? std::optional<double>(s[kCorrectTopK] / s[kCount]) : std::nullopt;
                           }});
      }
      break;
    case LossKind::kCTC:
      metrics.push_back({"seq_accuracy", share(kSeqCorrect, kCount)});
      break;
    case LossKind::kMultiLabelSoftMargin:
      if (loss.heads > 0) {
        metrics.push_back({"char_accuracy", share(kCharCorrect, kCharTotal)});
        metrics.push_back({"seq_accuracy", [](const double* s, bool) {
                             return s[kCharTotal] > 0 ? std::optional<double>(s[kSeqCorrect] / s[kCount])
                                                      : std::nullopt;
                           }});
      }
      break;
    case LossKind::kBCEWithLogits:
    case LossKind::kDiceBCE:
      metrics.push_back({"accuracy", share(kCorrect, kAccTotal)});  // of the labels or pixels
      metrics.push_back({"iou", share(kInter, kUnion, 1.0)});      // nothing predicted or true: a perfect 1
      metrics.push_back({"dice", share(kDiceNum, kDiceDen, 1.0)});
      break;
  }
  return metrics;
}

}  // namespace

std::vector<std::string> reported_metrics(const LossConfig& loss, int64_t top_k) {
  std::vector<std::string> names;
  for (const Metric& metric : metrics_of(loss, top_k)) names.push_back(metric.name);
  return names;
}

std::map<std::string, double> MetricTracker::read() const {
  const at::Tensor host = sums_.cpu();
  return read(host.data_ptr<double>());
}

std::map<std::string, double> MetricTracker::read(const double* s) const {
  std::map<std::string, double> metrics;
  if (s[kCount] == 0) return metrics;
  for (const Metric& metric : metrics_of(loss_, top_k_)) {
    if (const std::optional<double> value = metric.value(s, top_k_computed_)) metrics[metric.name] = *value;
  }
  return metrics;
}

}  // namespace gpucore
