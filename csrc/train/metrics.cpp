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

std::vector<std::string> reported_metrics(const LossConfig& loss, int64_t top_k) {
  std::vector<std::string> names{"loss"};
  switch (loss.kind) {
    case LossKind::kCrossEntropy:
      names.push_back("accuracy");
      if (top_k > 0) names.push_back("top" + std::to_string(top_k) + "_accuracy");
      break;
    case LossKind::kCTC:
      names.push_back("seq_accuracy");
      break;
    case LossKind::kMultiLabelSoftMargin:
      if (loss.heads > 0) names.insert(names.end(), {"char_accuracy", "seq_accuracy"});
      break;
    case LossKind::kBCEWithLogits:
    case LossKind::kDiceBCE:
      names.insert(names.end(), {"accuracy", "iou", "dice"});  // accuracy: of the labels or pixels
      break;
  }
  return names;
}

std::map<std::string, double> MetricTracker::read() const {
  const at::Tensor host = sums_.cpu();
  const double* s = host.data_ptr<double>();
  std::map<std::string, double> metrics;
  if (s[kCount] == 0) return metrics;
  metrics["loss"] = s[kLossSum] / s[kCount];
  if (s[kAccTotal] > 0) metrics["accuracy"] = s[kCorrect] / s[kAccTotal];
  if (top_k_computed_) {
    metrics["top" + std::to_string(top_k_) + "_accuracy"] = s[kCorrectTopK] / s[kCount];
  }
  if (loss_.kind == LossKind::kCTC) {
    metrics["seq_accuracy"] = s[kSeqCorrect] / s[kCount];
  } else if (s[kCharTotal] > 0) {
    metrics["char_accuracy"] = s[kCharCorrect] / s[kCharTotal];
    metrics["seq_accuracy"] = s[kSeqCorrect] / s[kCount];
  }
  if (loss_.kind == LossKind::kBCEWithLogits || loss_.kind == LossKind::kDiceBCE) {
    metrics["iou"] = s[kUnion] > 0 ? s[kInter] / s[kUnion] : 1.0;
    metrics["dice"] = s[kDiceDen] > 0 ? s[kDiceNum] / s[kDiceDen] : 1.0;
  }
  return metrics;
}

}  // namespace gpucore
