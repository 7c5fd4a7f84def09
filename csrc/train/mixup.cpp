#include "gpucore/train/mixup.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/DistributionsHelper.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>

#include "gpucore/choices.h"
#include "gpucore/errors.h"
#include "gpucore/ranges.h"
#include "ops/augment/mixup.h"

namespace gpucore {

namespace {

const Choices<MixMode> kMixModes = {{"batch", MixMode::kBatch}, {"pair", MixMode::kPair}, {"elem", MixMode::kElem}};

std::string number(double value) { return c10::str(value); }

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

class Draws {
 public:
  explicit Draws(uint64_t seed) : generator_(at::detail::createCPUGenerator(seed)), cpu_(generator_.get<at::CPUGeneratorImpl>()) {}

  double uniform() { return at::uniform_real_distribution<double>(0.0, 1.0)(cpu_); }  // [0, 1)
  int64_t integer(int64_t low, int64_t high) {  // [low, high), as numpy's randint
    return low + static_cast<int64_t>(cpu_->random64() % static_cast<uint64_t>(high - low));
  }
  // Beta(alpha, alpha) from two Gamma(alpha) draws, in logs so that small alphas do not underflow.
  double beta(double alpha) {
    const double a = log_gamma(alpha), b = log_gamma(alpha);
    return 1.0 / (1.0 + std::exp(b - a));
  }

 private:
  // log of a Gamma(alpha, 1) draw: Marsaglia and Tsang's method; alpha < 1 through Gamma(alpha + 1) x U^(1/alpha).
  double log_gamma(double alpha) {
    if (alpha < 1.0) return log_gamma(alpha + 1.0) + std::log(1.0 - uniform()) / alpha;
    const double d = alpha - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
    at::normal_distribution<double> normal(0.0, 1.0);
    while (true) {
      const double x = normal(cpu_), v = 1.0 + c * x;
      if (v <= 0) continue;
      const double cube = v * v * v, u = 1.0 - uniform();
      if (std::log(u) < 0.5 * x * x + d - d * cube + d * std::log(cube)) return std::log(d * cube);
    }
  }

  at::Generator generator_;
  at::CPUGeneratorImpl* cpu_;
};

struct Mix {
  double lam = 1.0;
  bool cutmix = false;
};

// timm's Mixup._params_per_batch (and per element): whether to mix, mixup or CutMix, and lambda.
Mix draw_lambda(const MixupConfig& config, Draws& draws) {
  Mix mix;
  if (draws.uniform() >= config.prob) return mix;
  const double cutmix_alpha = config.cutmix_minmax.empty() ? config.cutmix_alpha : 1.0;
  if (config.mixup_alpha > 0 && cutmix_alpha > 0) {
    mix.cutmix = draws.uniform() < config.switch_prob;
  } else {
    mix.cutmix = cutmix_alpha > 0;
  }
  mix.lam = draws.beta(mix.cutmix ? cutmix_alpha : config.mixup_alpha);
  return mix;
}

// One params row (ops/mix_params.h) of `mix` for an image of h x w: timm's rand_bbox / rand_bbox_minmax and
// cutmix_bbox_and_lam for CutMix.
void fill_row(const MixupConfig& config, Mix mix, int64_t h, int64_t w, Draws& draws, float* row) {
  int64_t y0 = 0, y1 = h, x0 = 0, x1 = w;
  double lam = mix.lam;
  if (lam == 1.0) {
    y1 = x1 = 0;  // unmixed: an empty box
  } else if (mix.cutmix) {
    if (config.cutmix_minmax.empty()) {
      const double ratio = std::sqrt(1.0 - lam);
      const auto cut_h = static_cast<int64_t>(static_cast<double>(h) * ratio);
      const auto cut_w = static_cast<int64_t>(static_cast<double>(w) * ratio);
      const int64_t cy = draws.integer(0, h), cx = draws.integer(0, w);
      y0 = std::clamp<int64_t>(cy - cut_h / 2, 0, h);
      y1 = std::clamp<int64_t>(cy + (cut_h + 1) / 2, 0, h);
      x0 = std::clamp<int64_t>(cx - cut_w / 2, 0, w);
      x1 = std::clamp<int64_t>(cx + (cut_w + 1) / 2, 0, w);
    } else {
      const auto side = [&](int64_t size, double share) { return static_cast<int64_t>(static_cast<double>(size) * share); };
      const int64_t low_h = side(h, config.cutmix_minmax[0]), high_h = side(h, config.cutmix_minmax[1]);
      const int64_t low_w = side(w, config.cutmix_minmax[0]), high_w = side(w, config.cutmix_minmax[1]);
      if (low_h >= high_h || low_w >= high_w) {
        throw ConfigError("config key 'cutmix_minmax' [" + number(config.cutmix_minmax[0]) + ", " +
                          number(config.cutmix_minmax[1]) + "] leaves no box size to draw for images of " +
                          std::to_string(h) + " x " + std::to_string(w) + " pixels; widen it");
      }
      const int64_t cut_h = draws.integer(low_h, high_h), cut_w = draws.integer(low_w, high_w);
      y0 = draws.integer(0, h - cut_h + 1);
      x0 = draws.integer(0, w - cut_w + 1);
      y1 = y0 + cut_h;
      x1 = x0 + cut_w;
    }
    if (config.correct_lam || !config.cutmix_minmax.empty()) {
      lam = 1.0 - static_cast<double>((y1 - y0) * (x1 - x0)) / static_cast<double>(h * w);
    }
  }
  row[ops::kInputSelf] = mix.cutmix ? 0.0f : static_cast<float>(lam);
  row[ops::kInputPartner] = mix.cutmix ? 1.0f : static_cast<float>(1.0 - lam);
  row[ops::kTargetSelf] = static_cast<float>(lam);
  row[ops::kTargetPartner] = static_cast<float>(1.0 - lam);
  const int64_t box[] = {y0, y1, x0, x1};
  for (int k = 0; k < 4; ++k) row[ops::kBoxY0 + k] = static_cast<float>(box[k]);
}

}  // namespace

MixMode parse_mix_mode(const std::string& name) { return parse_choice("mixup_mode", name, kMixModes); }
std::string to_string(MixMode mode) { return choice_name(mode, kMixModes); }
std::vector<std::string> mix_mode_names() { return choice_names(kMixModes); }

void validate(const MixupConfig& config) {
  ranges::kMixupAlpha.check(config.mixup_alpha);
  ranges::kCutmixAlpha.check(config.cutmix_alpha);
  ranges::kMixupProb.check(config.prob);
  ranges::kMixupSwitchProb.check(config.switch_prob);
  const auto& minmax = config.cutmix_minmax;
  const Range& side = ranges::kCutmixMinmax.range;
  TORCH_CHECK(minmax.empty() || (minmax.size() == 2 && side.contains(minmax[0]) && side.contains(minmax[1]) &&
                                 minmax[0] < minmax[1]),
              ranges::kCutmixMinmax.key, " must be empty or two numbers ", side.describe(), ", min < max, got ",
              c10::ArrayRef<double>(minmax));
}

at::Tensor draw_mix(const MixupConfig& config, int64_t epoch, int64_t batch, int64_t n, int64_t h, int64_t w) {
  const uint64_t epoch_seed = config.seed * 1000003ULL + static_cast<uint64_t>(epoch);
  Draws draws(splitmix64(splitmix64(epoch_seed) + static_cast<uint64_t>(batch)));
  at::Tensor params = at::empty({n, ops::kMixParams}, at::TensorOptions().dtype(at::kFloat));
  float* rows = params.data_ptr<float>();
  switch (config.mode) {
    case MixMode::kBatch: {
      if (n == 0) break;
      fill_row(config, draw_lambda(config, draws), h, w, draws, rows);
      for (int64_t i = 1; i < n; ++i) std::copy(rows, rows + ops::kMixParams, rows + i * ops::kMixParams);
      break;
    }
    case MixMode::kElem:
      for (int64_t i = 0; i < n; ++i) fill_row(config, draw_lambda(config, draws), h, w, draws, rows + i * ops::kMixParams);
      break;
    case MixMode::kPair:
      // Pair (i, N-1-i) shares one draw, so both get the same box; an odd batch's middle sample stays as it is.
      for (int64_t i = 0; i < (n + 1) / 2; ++i) {
        float* row = rows + i * ops::kMixParams;
        fill_row(config, 2 * i + 1 == n ? Mix{} : draw_lambda(config, draws), h, w, draws, row);
        std::copy(row, row + ops::kMixParams, rows + (n - 1 - i) * ops::kMixParams);
      }
      break;
  }
  return params;
}

BatchMixer::BatchMixer(MixupConfig config, double label_smoothing, at::Device device)
    : config_((validate(config), std::move(config))), label_smoothing_(label_smoothing), device_(device) {}

void BatchMixer::draw(const at::Tensor& inputs, int64_t epoch, int64_t batch) {
  if (!inputs.is_floating_point()) {
    throw ConfigError("mixup and CutMix (config keys mixup_alpha, cutmix_alpha) mix floating-point inputs, got " +
                      std::string(c10::toString(inputs.scalar_type())));
  }
  const bool images = inputs.dim() == 4;
  if ((config_.cutmix_alpha > 0 || !config_.cutmix_minmax.empty()) && !images) {
    throw ConfigError("CutMix (config keys cutmix_alpha, cutmix_minmax) needs N x C x H x W images, got inputs of shape " +
                      c10::str(inputs.sizes()) + "; use mixup_alpha alone");
  }
  if (inputs.dim() < 1 || inputs.dim() > 4) {
    throw ConfigError("mixup (config key mixup_alpha) mixes inputs of up to 4 dimensions, got shape " + c10::str(inputs.sizes()));
  }
  const at::Tensor view = ops::mix_images_view(inputs);  // the box covers the op's H x W
  const at::Tensor host = draw_mix(config_, epoch, batch, inputs.size(0), view.size(2), view.size(3));
  if (!device_.is_cuda()) {
    params_ = host;
    return;
  }
  // Into the first rows of one device buffer, made anew only for a larger batch: a captured step (cuda_graphs)
  // reads its address. Pinned, so the copy is asynchronous and the host never waits for the device.
  const int64_t n = host.size(0);
  if (!buffer_.defined() || buffer_.size(0) < n) buffer_ = at::empty(host.sizes(), host.options().device(device_));
  params_ = buffer_.narrow(0, 0, n);
  params_.copy_(host.pin_memory(), /*non_blocking=*/true);
}

at::Tensor BatchMixer::mix(const at::Tensor& inputs) const { return ops::mix_inputs(inputs, params_); }

at::Tensor BatchMixer::targets(const at::Tensor& targets, const at::Tensor& output) const {
  if (output.dim() != 2 || targets.dim() != 1 || targets.is_floating_point()) {
    throw ConfigError("mixup and CutMix need single-label classification: model outputs of N x classes and N class "
                      "indices as targets, got outputs of shape " + c10::str(output.sizes()) + " and targets of shape " +
                      c10::str(targets.sizes()) + " (" + std::string(c10::toString(targets.scalar_type())) + ")");
  }
  return ops::mix_targets(targets, params_, output.size(1), label_smoothing_);
}

}  // namespace gpucore
