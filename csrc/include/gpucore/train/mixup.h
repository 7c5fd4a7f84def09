#pragma once
// Mixup and CutMix for single-label classification, as timm's Mixup (timm/data/mixup.py): each training batch is
// mixed with its reversed order (timm's x.flip(0)), its targets become one-hot with label smoothing, mixed by the
// same lambda, and the loss is the soft-target cross-entropy. Lambda, the choice of mixup or CutMix and the box
// are drawn on the host from (seed, epoch, batch) alone (no host sync, the same draws on every device and after a
// resume); the mixing runs on the device (gpucore::mix_inputs, mix_targets in ops/augment/mixup.h).
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace gpucore {

// batch: one lambda and box for the whole batch; pair: one per pair (i, N-1-i); elem: one per sample.
enum class MixMode { kBatch, kPair, kElem };
std::vector<std::string> mix_mode_names();
MixMode parse_mix_mode(const std::string& name);  // batch, pair, elem
std::string to_string(MixMode mode);

struct MixupConfig {
  double mixup_alpha = 0.0;            // Beta(alpha, alpha) of mixup's lambda; 0: no mixup
  double cutmix_alpha = 0.0;           // Beta(alpha, alpha) of CutMix's lambda; 0: no CutMix
  std::vector<double> cutmix_minmax;   // [min, max] box side as a share of the image's (CutMix with alpha 1); empty: off
  double prob = 1.0;                   // chance that a batch (sample, pair) is mixed at all
  double switch_prob = 0.5;            // with both on: chance of CutMix instead of mixup
  MixMode mode = MixMode::kBatch;
  bool correct_lam = true;             // CutMix's lambda from the box's area after clipping at the image's border
  uint64_t seed = 42;                  // config key seed's default
  bool enabled() const { return mixup_alpha > 0 || cutmix_alpha > 0 || !cutmix_minmax.empty(); }
};

void validate(const MixupConfig& config);  // TORCH_CHECK of each key's range (gpucore/ranges.h); config.py checks first

// The mix of batch `batch` of `epoch` (n samples of h x w pixels): float32 (n, 8) on the host, the rows the mix
// ops take (ops/augment/mixup.h): [input weights of sample and partner, target weights of both, box y0, y1, x0, x1].
at::Tensor draw_mix(const MixupConfig& config, int64_t epoch, int64_t batch, int64_t n, int64_t h, int64_t w);

// What the engine calls per training batch.
class BatchMixer {
 public:
  // label_smoothing: the loss's, applied to the one-hot targets before they are mixed.
  BatchMixer(MixupConfig config, double label_smoothing, at::Device device);
  bool enabled() const { return config_.enabled(); }
  // Draws the mixing of (epoch, batch) for `inputs` on the host and copies it to the device buffer that mix() and
  // targets() read (the same buffer from batch to batch of one size: a captured step reads it too).
  void draw(const at::Tensor& inputs, int64_t epoch, int64_t batch);
  // `inputs` mixed by the last draw.
  at::Tensor mix(const at::Tensor& inputs) const;
  // The last mixed batch's soft targets for `output` (N x classes): float32, label smoothing included.
  at::Tensor targets(const at::Tensor& targets, const at::Tensor& output) const;

 private:
  MixupConfig config_;
  double label_smoothing_;
  at::Device device_;
  at::Tensor params_;  // the last batch's draws, on the device: the first rows of buffer_ on CUDA
  at::Tensor buffer_;  // CUDA: the draws' device memory, as many rows as the largest batch
};

}  // namespace gpucore
