#include "gpucore/train/losses.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/binary_cross_entropy_with_logits.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/ctc_loss.h>
#include <ATen/ops/full.h>
#include <ATen/ops/log_sigmoid.h>
#include <ATen/ops/log_softmax.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/zeros.h>

#include "gpucore/choices.h"
#include "gpucore/errors.h"

namespace gpucore {

namespace {

const Choices<LossKind> kLosses = {{"cross_entropy", LossKind::kCrossEntropy},
                                   {"multilabel_soft_margin", LossKind::kMultiLabelSoftMargin},
                                   {"bce_with_logits", LossKind::kBCEWithLogits},
                                   {"dice_bce", LossKind::kDiceBCE},
                                   {"ctc", LossKind::kCTC}};

[[noreturn]] void shape_error(LossKind kind, const std::string& expected, const at::Tensor& output, const at::Tensor& target) {
  throw ConfigError("loss " + to_string(kind) + " expects " + expected + "; the model's output has shape " +
                    c10::str(output.sizes()) + " and the target has shape " + c10::str(target.sizes()) + " (" +
                    std::string(c10::toString(target.scalar_type())) + ")");
}

}  // namespace

LossKind parse_loss(const std::string& name) { return parse_choice("loss", name, kLosses, ", or pass a loss callable"); }
std::string to_string(LossKind kind) { return choice_name(kind, kLosses); }
std::vector<std::string> loss_names() { return choice_names(kLosses); }

at::Tensor prepare_target(const LossConfig& config, const at::Tensor& output, const at::Tensor& target) {
  switch (config.kind) {
    case LossKind::kCrossEntropy:
    case LossKind::kCTC:
      return target;
    case LossKind::kMultiLabelSoftMargin: {
      const at::Tensor flat_output = output.reshape({output.size(0), -1});
      if (config.heads > 0 && !target.is_floating_point()) {
        if (target.dim() != 2 || target.size(1) != config.heads || flat_output.size(1) % config.heads != 0) {
          shape_error(config.kind, "an output of (N, heads * classes) and integer targets of (N, heads) with heads = " +
                      std::to_string(config.heads), output, target);
        }
        // One-hot by scatter: at::one_hot validates the indices on the host, a sync per step on CUDA.
        const int64_t classes = flat_output.size(1) / config.heads;
        const at::Tensor offsets = at::arange(config.heads, target.options()) * classes;
        return at::zeros({target.size(0), flat_output.size(1)}, flat_output.options().dtype(at::kFloat))
            .scatter_(1, target + offsets, 1.0);
      }
      return target.reshape({target.size(0), -1}).to(at::kFloat);
    }
    case LossKind::kBCEWithLogits:
    case LossKind::kDiceBCE: {
      // Masks often come as (N, H, W) for a (N, 1, H, W) output.
      if (target.dim() + 1 == output.dim() && output.size(1) == 1) return target.unsqueeze(1).to(at::kFloat);
      return target.to(at::kFloat);
    }
  }
  return target;
}

CTCBatch ctc_batch(const LossConfig& config, const at::Tensor& output, const at::Tensor& target) {
  const int64_t first_label = config.sequence_lengths ? 1 : 0;
  if (output.dim() != 3 || target.dim() != 2 || target.is_floating_point() || target.size(1) <= first_label) {
    shape_error(LossKind::kCTC, config.sequence_lengths
                    ? "an output of (N, T, classes) logits and integer targets of (N, 1 + S): each clip's frame count, "
                      "then its labels padded with -1"
                    : "an output of (N, T, classes) logits and integer targets of (N, S) padded with -1",
                output, target);
  }
  const int64_t n = output.size(0), steps = output.size(1);
  const at::Tensor t = target.to(at::kLong);
  CTCBatch batch;
  batch.labels = t.slice(1, first_label);
  batch.target_lengths = (batch.labels >= 0).sum(1);
  if (config.sequence_lengths) {
    if (config.temporal_stride < 1) {
      throw ConfigError("ctc: the model's temporal_stride must be >= 1, got " + std::to_string(config.temporal_stride));
    }
    const at::Tensor frames = t.select(1, 0);
    // ceil(frames / stride) in integers, clamped to the steps the output has.
    batch.input_lengths = ((frames + (config.temporal_stride - 1)).div(config.temporal_stride, "floor"))
                              .clamp(0, steps);
  } else {
    batch.input_lengths = at::full({n}, steps, t.options());
  }
  return batch;
}

at::Tensor compute_loss(const LossConfig& config, const at::Tensor& output, const at::Tensor& target) {
  const at::Tensor out = output.scalar_type() == at::kFloat ? output : output.to(at::kFloat);
  if (out.dim() == 0 || out.size(0) != target.size(0) || target.dim() == 0) {
    shape_error(config.kind, "output and target with the same batch size", output, target);
  }
  const at::Tensor t = prepare_target(config, output, target);
  switch (config.kind) {
    case LossKind::kCrossEntropy: {
      const bool indices = !t.is_floating_point() && t.dim() == out.dim() - 1;
      const bool probabilities = t.is_floating_point() && t.sizes() == out.sizes();
      if (out.dim() < 2 || !(indices || probabilities)) {
        shape_error(config.kind, "an output of (N, classes, ...) and integer class targets of (N, ...) or class "
                    "probabilities of the output's shape", output, target);
      }
      return at::cross_entropy_loss(out, t, config.class_weights, at::Reduction::Mean, config.ignore_index,
                                   config.label_smoothing);
    }
    case LossKind::kMultiLabelSoftMargin: {
      const at::Tensor flat = out.reshape({out.size(0), -1});
      if (flat.sizes() != t.sizes()) {
        shape_error(config.kind, "targets with as many labels per sample as the output has logits", output, target);
      }
      // As torch.nn.MultiLabelSoftMarginLoss: mean over labels, then over the batch.
      return -(t * at::log_sigmoid(flat) + (1 - t) * at::log_sigmoid(-flat)).mean(-1).mean();
    }
    case LossKind::kBCEWithLogits:
    case LossKind::kDiceBCE: {
      if (out.sizes() != t.sizes()) shape_error(config.kind, "a target of the output's shape", output, target);
      const at::Tensor bce = at::binary_cross_entropy_with_logits(out, t, {}, {}, at::Reduction::Mean);
      if (config.kind == LossKind::kBCEWithLogits) return bce;
      const at::Tensor p = at::sigmoid(out).reshape({out.size(0), -1});
      const at::Tensor m = t.reshape({t.size(0), -1});
      const at::Tensor dice = (2 * (p * m).sum(1) + 1) / (p.sum(1) + m.sum(1) + 1);  // smoothed per sample
      return bce + (1 - dice).mean();
    }
    case LossKind::kCTC: {
      const CTCBatch batch = ctc_batch(config, out, t);
      const at::Tensor log_probs = at::log_softmax(out, -1).transpose(0, 1);  // (T, N, C), as ctc_loss wants
      return at::ctc_loss(log_probs, batch.labels.clamp_min(0), batch.input_lengths, batch.target_lengths,
                          /*blank=*/0, at::Reduction::Mean, /*zero_infinity=*/true);
    }
  }
  return out;
}

}  // namespace gpucore
