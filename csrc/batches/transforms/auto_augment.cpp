// The auto-augment policies of the `transforms` list, by torchvision.transforms.v2's rules: TrivialAugmentWide,
// RandAugment and AutoAugment. Each sample draws its operations and magnitudes as torchvision's forward does;
// a step is a photometric adjustment (gpucore::color_ops) or a geometric one (gpucore::affine), the other part
// of the step being the identity. params = {codes N x K int64, magnitudes N x K float64, matrices N x K x 6
// float32}, K the steps per sample.
#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linspace.h>

#include <array>
#include <cmath>
#include <optional>

#include "batches/transforms/color_transforms.h"
#include "ops/augment/color.h"
#include "ops/color_math.h"
#include "ops/augment/geometry.h"

namespace gpucore::transforms {
namespace {

enum class PolicyOp {
  kIdentity, kShearX, kShearY, kTranslateX, kTranslateY, kRotate, kBrightness, kColor, kContrast, kSharpness,
  kPosterize, kSolarize, kAutoContrast, kEqualize, kInvert,
};

// TrivialAugmentWide's and RandAugment's operations (_AUGMENTATION_SPACE's keys, in its order).
constexpr std::array<PolicyOp, 14> kSpace = {
    PolicyOp::kIdentity,   PolicyOp::kShearX,    PolicyOp::kShearY,   PolicyOp::kTranslateX, PolicyOp::kTranslateY,
    PolicyOp::kRotate,     PolicyOp::kBrightness, PolicyOp::kColor,   PolicyOp::kContrast,   PolicyOp::kSharpness,
    PolicyOp::kPosterize,  PolicyOp::kSolarize,  PolicyOp::kAutoContrast, PolicyOp::kEqualize};

// The magnitude bins of `op` as torchvision computes them (float32 tensors, read as Python floats); empty for the
// operations without a magnitude. `wide`: TrivialAugmentWide's space, else RandAugment's and AutoAugment's.
std::vector<double> magnitude_bins(PolicyOp op, int64_t bins, int64_t h, int64_t w, bool wide) {
  const auto linspace = [&](double start, double end) {
    const at::Tensor values = at::linspace(start, end, bins, at::TensorOptions().dtype(at::kFloat)).to(at::kDouble);
    return std::vector<double>(values.data_ptr<double>(), values.data_ptr<double>() + bins);
  };
  switch (op) {
    case PolicyOp::kShearX:
    case PolicyOp::kShearY:
      return linspace(0.0, wide ? 0.99 : 0.3);
    case PolicyOp::kTranslateX:
      return linspace(0.0, wide ? 32.0 : 150.0 / 331.0 * static_cast<double>(w));
    case PolicyOp::kTranslateY:
      return linspace(0.0, wide ? 32.0 : 150.0 / 331.0 * static_cast<double>(h));
    case PolicyOp::kRotate:
      return linspace(0.0, wide ? 135.0 : 30.0);
    case PolicyOp::kBrightness:
    case PolicyOp::kColor:
    case PolicyOp::kContrast:
    case PolicyOp::kSharpness:
      return linspace(0.0, wide ? 0.99 : 0.9);
    case PolicyOp::kPosterize: {
      // (8 - (arange(bins) / ((bins - 1) / 6 or 4))).round().int()
      const at::Tensor levels =
          (8 - at::arange(bins) / ((static_cast<double>(bins) - 1.0) / (wide ? 6.0 : 4.0))).round().to(at::kInt);
      return std::vector<double>(levels.data_ptr<int32_t>(), levels.data_ptr<int32_t>() + bins);
    }
    case PolicyOp::kSolarize:
      return linspace(1.0, 0.0);
    default:
      return {};
  }
}

constexpr size_t kPolicyOps = static_cast<size_t>(PolicyOp::kInvert) + 1;
using AllBins = std::array<std::vector<double>, kPolicyOps>;

// Every operation's magnitude bins, by PolicyOp.
AllBins all_bins(int64_t bins, int64_t h, int64_t w, bool wide) {
  AllBins all;
  for (size_t op = 0; op < kPolicyOps; ++op) all[op] = magnitude_bins(static_cast<PolicyOp>(op), bins, h, w, wide);
  return all;
}

bool is_signed(PolicyOp op) {
  switch (op) {
    case PolicyOp::kShearX: case PolicyOp::kShearY: case PolicyOp::kTranslateX: case PolicyOp::kTranslateY:
    case PolicyOp::kRotate: case PolicyOp::kBrightness: case PolicyOp::kColor: case PolicyOp::kContrast:
    case PolicyOp::kSharpness:
      return true;
    default:
      return false;
  }
}

constexpr double kDegreesPerRadian = 180.0 / M_PI;

// Steps of all samples: color_ops codes and magnitudes, affine matrices (identity where the step is photometric).
class PolicySteps {
 public:
  PolicySteps(int64_t samples, int64_t steps, int64_t h, int64_t w)
      : color_(samples, steps),
        matrices_(at::empty({samples, steps, 6}, at::TensorOptions().dtype(at::kFloat))),
        h_(h), w_(w) {
    float* m = matrices_.data_ptr<float>();
    for (int64_t i = 0; i < samples * steps; ++i) store_matrix(m + 6 * i, identity());
  }
  // _apply_image_or_video_transform's operation `op` with `magnitude` as step `index` (sample * steps + step).
  void set(int64_t index, PolicyOp op, double magnitude) {
    float* matrix = matrices_.data_ptr<float>() + 6 * index;
    // Shears about the top-left corner (center=[0, 0]), translations and rotations about the image centre.
    const double corner_x = -0.5 * static_cast<double>(w_), corner_y = -0.5 * static_cast<double>(h_);
    switch (op) {
      case PolicyOp::kShearX:
        return store_matrix(matrix, inverse_affine_matrix(corner_x, corner_y, 0.0, 0.0, 0.0, 1.0,
                                                   std::atan(magnitude) * kDegreesPerRadian, 0.0));
      case PolicyOp::kShearY:
        return store_matrix(matrix, inverse_affine_matrix(corner_x, corner_y, 0.0, 0.0, 0.0, 1.0, 0.0,
                                                   std::atan(magnitude) * kDegreesPerRadian));
      case PolicyOp::kTranslateX:  // translate=[int(magnitude), 0]
        return store_matrix(matrix, inverse_affine_matrix(0.0, 0.0, 0.0, std::trunc(magnitude), 0.0, 1.0, 0.0, 0.0));
      case PolicyOp::kTranslateY:
        return store_matrix(matrix, inverse_affine_matrix(0.0, 0.0, 0.0, 0.0, std::trunc(magnitude), 1.0, 0.0, 0.0));
      case PolicyOp::kRotate:  // rotate(angle): the affine map of -angle
        return store_matrix(matrix, inverse_affine_matrix(0.0, 0.0, -magnitude, 0.0, 0.0, 1.0, 0.0, 0.0));
      case PolicyOp::kBrightness:
        return color_.set(index, ops::kColorBrightness, 1.0 + magnitude);
      case PolicyOp::kColor:
        return color_.set(index, ops::kColorSaturation, 1.0 + magnitude);
      case PolicyOp::kContrast:
        return color_.set(index, ops::kColorContrast, 1.0 + magnitude);
      case PolicyOp::kSharpness:
        return color_.set(index, ops::kColorSharpness, 1.0 + magnitude);
      case PolicyOp::kPosterize:
        return color_.set(index, ops::kColorPosterize, std::trunc(magnitude));
      case PolicyOp::kSolarize:  // threshold = 255 * magnitude for uint8
        return color_.set(index, ops::kColorSolarize, 255.0 * magnitude);
      case PolicyOp::kAutoContrast:
        return color_.set(index, ops::kColorAutocontrast, 0.0);
      case PolicyOp::kEqualize:
        return color_.set(index, ops::kColorEqualize, 0.0);
      case PolicyOp::kInvert:
        return color_.set(index, ops::kColorInvert, 0.0);
      case PolicyOp::kIdentity:
        return;
    }
  }
  std::vector<at::Tensor> params() const { return {color_.codes, color_.magnitudes, matrices_}; }

 private:
  static std::array<double, 6> identity() { return {1.0, 0.0, 0.0, 0.0, 1.0, 0.0}; }

  ColorSteps color_;
  at::Tensor matrices_;
  int64_t h_, w_;
};

// The magnitude of `op` from its bins (none: 0), negated where the operation is signed and rand <= 0.5.
double signed_magnitude(PolicyOp op, const std::vector<double>& bins, int64_t bin, Draws& draws) {
  if (bins.empty()) return 0.0;
  double magnitude = bins[bin];
  if (is_signed(op) && draws.uniform(0.0, 1.0) <= 0.5) magnitude = -magnitude;
  return magnitude;
}

class PolicyTransform : public Transform {
 public:
  explicit PolicyTransform(const Arguments& arguments)
      : interpolation_(interpolation_of(arguments, "nearest")), fill_(arguments.numbers("fill", {}, {1, 3})) {}
  bool is_random() const override { return true; }
  bool moves_pixels() const override { return true; }
  // Step after step: the photometric part, then the geometric part (the identity where the step is photometric).
  at::Tensor apply(const at::Tensor& images, const std::vector<at::Tensor>& params) const override {
    at::Tensor out = images;
    for (int64_t k = 0; k < params[0].size(1); ++k) {
      out = ops::color_ops(out, params[0].narrow(1, k, 1), params[1].narrow(1, k, 1));
      out = ops::affine(out, params[2].select(1, k).contiguous(), interpolation_, fill_);
    }
    return out;
  }
  at::Tensor apply_to_mask(const at::Tensor& masks, const std::vector<at::Tensor>& params) const override {
    at::Tensor out = masks.unsqueeze(1).to(at::kFloat);
    for (int64_t k = 0; k < params[2].size(1); ++k) {
      out = ops::affine(out, params[2].select(1, k).contiguous(), "nearest", {0.0});
    }
    return out.squeeze(1).to(masks.scalar_type());
  }

 protected:
  static int64_t bins_of(const Arguments& arguments) {
    const double bins = arguments.number("num_magnitude_bins", 31);
    if (!is_integer(bins) || bins < 2 || bins > 1000) {
      arguments.fail("num_magnitude_bins", "must be an integer in [2, 1000]");
    }
    return static_cast<int64_t>(bins);
  }

  std::string interpolation_;
  std::vector<double> fill_;
};

class TrivialAugmentWide final : public PolicyTransform {
 public:
  explicit TrivialAugmentWide(const Arguments& arguments) : PolicyTransform(arguments), bins_(bins_of(arguments)) {}
  std::vector<at::Tensor> sample(int64_t samples, int64_t h, int64_t w, at::Generator& generator) const override {
    PolicySteps steps(samples, 1, h, w);
    const AllBins bins = all_bins(bins_, h, w, true);
    Draws draws(generator);
    for (int64_t s = 0; s < samples; ++s) {
      // forward: the operation, then (when it has magnitudes) the bin, then the sign.
      const PolicyOp op = kSpace[draws.below(kSpace.size())];
      const std::vector<double>& op_bins = bins[static_cast<size_t>(op)];
      const int64_t bin = op_bins.empty() ? 0 : draws.below(bins_);
      steps.set(s, op, signed_magnitude(op, op_bins, bin, draws));
    }
    return steps.params();
  }

 private:
  int64_t bins_;
};

class RandAugment final : public PolicyTransform {
 public:
  explicit RandAugment(const Arguments& arguments)
      : PolicyTransform(arguments), bins_(bins_of(arguments)) {
    const double ops = arguments.number("num_ops", 2);
    if (!is_integer(ops) || ops < 0 || ops > 64) arguments.fail("num_ops", "must be an integer in [0, 64]");
    const double magnitude = arguments.number("magnitude", 9);
    if (!is_integer(magnitude) || magnitude < 0 || magnitude >= static_cast<double>(bins_)) {
      arguments.fail("magnitude", "must be an integer in [0, num_magnitude_bins - 1] = [0, " +
                                      std::to_string(bins_ - 1) + "]");
    }
    num_ops_ = static_cast<int64_t>(ops), magnitude_ = static_cast<int64_t>(magnitude);
  }
  std::vector<at::Tensor> sample(int64_t samples, int64_t h, int64_t w, at::Generator& generator) const override {
    PolicySteps steps(samples, num_ops_, h, w);
    const AllBins bins = all_bins(bins_, h, w, false);
    Draws draws(generator);
    for (int64_t s = 0; s < samples; ++s) {
      for (int64_t k = 0; k < num_ops_; ++k) {
        const PolicyOp op = kSpace[draws.below(kSpace.size())];
        steps.set(s * num_ops_ + k, op, signed_magnitude(op, bins[static_cast<size_t>(op)], magnitude_, draws));
      }
    }
    return steps.params();
  }

 private:
  int64_t bins_, num_ops_ = 2, magnitude_ = 9;
};

// AutoAugment's sub-policies: two (operation, probability, magnitude bin of 10) each; bin -1: no magnitude.
struct SubPolicy {
  struct Step {
    PolicyOp op;
    double p;
    int bin;
  };
  Step first, second;
};

std::vector<SubPolicy> auto_augment_policies(const std::string& policy) {
  using P = PolicyOp;
  if (policy == "imagenet") {
    return {{{P::kPosterize, 0.4, 8}, {P::kRotate, 0.6, 9}},        {{P::kSolarize, 0.6, 5}, {P::kAutoContrast, 0.6, -1}},
            {{P::kEqualize, 0.8, -1}, {P::kEqualize, 0.6, -1}},    {{P::kPosterize, 0.6, 7}, {P::kPosterize, 0.6, 6}},
            {{P::kEqualize, 0.4, -1}, {P::kSolarize, 0.2, 4}},     {{P::kEqualize, 0.4, -1}, {P::kRotate, 0.8, 8}},
            {{P::kSolarize, 0.6, 3}, {P::kEqualize, 0.6, -1}},     {{P::kPosterize, 0.8, 5}, {P::kEqualize, 1.0, -1}},
            {{P::kRotate, 0.2, 3}, {P::kSolarize, 0.6, 8}},        {{P::kEqualize, 0.6, -1}, {P::kPosterize, 0.4, 6}},
            {{P::kRotate, 0.8, 8}, {P::kColor, 0.4, 0}},           {{P::kRotate, 0.4, 9}, {P::kEqualize, 0.6, -1}},
            {{P::kEqualize, 0.0, -1}, {P::kEqualize, 0.8, -1}},    {{P::kInvert, 0.6, -1}, {P::kEqualize, 1.0, -1}},
            {{P::kColor, 0.6, 4}, {P::kContrast, 1.0, 8}},         {{P::kRotate, 0.8, 8}, {P::kColor, 1.0, 2}},
            {{P::kColor, 0.8, 8}, {P::kSolarize, 0.8, 7}},         {{P::kSharpness, 0.4, 7}, {P::kInvert, 0.6, -1}},
            {{P::kShearX, 0.6, 5}, {P::kEqualize, 1.0, -1}},       {{P::kColor, 0.4, 0}, {P::kEqualize, 0.6, -1}},
            {{P::kEqualize, 0.4, -1}, {P::kSolarize, 0.2, 4}},     {{P::kSolarize, 0.6, 5}, {P::kAutoContrast, 0.6, -1}},
            {{P::kInvert, 0.6, -1}, {P::kEqualize, 1.0, -1}},      {{P::kColor, 0.6, 4}, {P::kContrast, 1.0, 8}},
            {{P::kEqualize, 0.8, -1}, {P::kEqualize, 0.6, -1}}};
  }
  if (policy == "cifar10") {
    return {{{P::kInvert, 0.1, -1}, {P::kContrast, 0.2, 6}},       {{P::kRotate, 0.7, 2}, {P::kTranslateX, 0.3, 9}},
            {{P::kSharpness, 0.8, 1}, {P::kSharpness, 0.9, 3}},    {{P::kShearY, 0.5, 8}, {P::kTranslateY, 0.7, 9}},
            {{P::kAutoContrast, 0.5, -1}, {P::kEqualize, 0.9, -1}}, {{P::kShearY, 0.2, 7}, {P::kPosterize, 0.3, 7}},
            {{P::kColor, 0.4, 3}, {P::kBrightness, 0.6, 7}},       {{P::kSharpness, 0.3, 9}, {P::kBrightness, 0.7, 9}},
            {{P::kEqualize, 0.6, -1}, {P::kEqualize, 0.5, -1}},    {{P::kContrast, 0.6, 7}, {P::kSharpness, 0.6, 5}},
            {{P::kColor, 0.7, 7}, {P::kTranslateX, 0.5, 8}},       {{P::kEqualize, 0.3, -1}, {P::kAutoContrast, 0.4, -1}},
            {{P::kTranslateY, 0.4, 3}, {P::kSharpness, 0.2, 6}},   {{P::kBrightness, 0.9, 6}, {P::kColor, 0.2, 8}},
            {{P::kSolarize, 0.5, 2}, {P::kInvert, 0.0, -1}},       {{P::kEqualize, 0.2, -1}, {P::kAutoContrast, 0.6, -1}},
            {{P::kEqualize, 0.2, -1}, {P::kEqualize, 0.6, -1}},    {{P::kColor, 0.9, 9}, {P::kEqualize, 0.6, -1}},
            {{P::kAutoContrast, 0.8, -1}, {P::kSolarize, 0.2, 8}}, {{P::kBrightness, 0.1, 3}, {P::kColor, 0.7, 0}},
            {{P::kSolarize, 0.4, 5}, {P::kAutoContrast, 0.9, -1}}, {{P::kTranslateY, 0.9, 9}, {P::kTranslateY, 0.7, 9}},
            {{P::kAutoContrast, 0.9, -1}, {P::kSolarize, 0.8, 3}}, {{P::kEqualize, 0.8, -1}, {P::kInvert, 0.1, -1}},
            {{P::kTranslateY, 0.7, 9}, {P::kAutoContrast, 0.9, -1}}};
  }
  return {{{P::kShearX, 0.9, 4}, {P::kInvert, 0.2, -1}},         {{P::kShearY, 0.9, 8}, {P::kInvert, 0.7, -1}},
          {{P::kEqualize, 0.6, -1}, {P::kSolarize, 0.6, 6}},     {{P::kInvert, 0.9, -1}, {P::kEqualize, 0.6, -1}},
          {{P::kEqualize, 0.6, -1}, {P::kRotate, 0.9, 3}},       {{P::kShearX, 0.9, 4}, {P::kAutoContrast, 0.8, -1}},
          {{P::kShearY, 0.9, 8}, {P::kInvert, 0.4, -1}},         {{P::kShearY, 0.9, 5}, {P::kSolarize, 0.2, 6}},
          {{P::kInvert, 0.9, -1}, {P::kAutoContrast, 0.8, -1}},  {{P::kEqualize, 0.6, -1}, {P::kRotate, 0.9, 3}},
          {{P::kShearX, 0.9, 4}, {P::kSolarize, 0.3, 3}},        {{P::kShearY, 0.8, 8}, {P::kInvert, 0.7, -1}},
          {{P::kEqualize, 0.9, -1}, {P::kTranslateY, 0.6, 6}},   {{P::kInvert, 0.9, -1}, {P::kEqualize, 0.6, -1}},
          {{P::kContrast, 0.3, 3}, {P::kRotate, 0.8, 4}},        {{P::kInvert, 0.8, -1}, {P::kTranslateY, 0.0, 2}},
          {{P::kShearY, 0.7, 6}, {P::kSolarize, 0.4, 8}},        {{P::kInvert, 0.6, -1}, {P::kRotate, 0.8, 4}},
          {{P::kShearY, 0.3, 7}, {P::kTranslateX, 0.9, 3}},      {{P::kShearX, 0.1, 6}, {P::kInvert, 0.6, -1}},
          {{P::kSolarize, 0.7, 2}, {P::kTranslateY, 0.6, 7}},    {{P::kShearY, 0.8, 4}, {P::kInvert, 0.8, -1}},
          {{P::kShearX, 0.7, 9}, {P::kTranslateY, 0.8, 3}},      {{P::kShearY, 0.8, 5}, {P::kAutoContrast, 0.7, -1}},
          {{P::kShearX, 0.7, 2}, {P::kInvert, 0.1, -1}}};
}

class AutoAugment final : public PolicyTransform {
 public:
  explicit AutoAugment(const Arguments& arguments)
      : PolicyTransform(arguments),
        policies_(auto_augment_policies(arguments.word("policy", "imagenet", {"imagenet", "cifar10", "svhn"}))) {}
  std::vector<at::Tensor> sample(int64_t samples, int64_t h, int64_t w, at::Generator& generator) const override {
    PolicySteps steps(samples, 2, h, w);
    const AllBins bins = all_bins(10, h, w, false);
    Draws draws(generator);
    for (int64_t s = 0; s < samples; ++s) {
      const SubPolicy& policy = policies_[draws.below(static_cast<int64_t>(policies_.size()))];
      int64_t k = 0;
      for (const SubPolicy::Step& step : {policy.first, policy.second}) {
        // forward: applied where rand <= p; then the sign of a signed magnitude.
        if (draws.uniform(0.0, 1.0) <= step.p) {
          const std::vector<double> none;
          const std::vector<double>& op_bins = step.bin < 0 ? none : bins[static_cast<size_t>(step.op)];
          steps.set(s * 2 + k, step.op, signed_magnitude(step.op, op_bins, step.bin, draws));
        }
        ++k;
      }
    }
    return steps.params();
  }

 private:
  std::vector<SubPolicy> policies_;
};

}  // namespace

std::unique_ptr<Transform> make_trivial_augment_wide(const Arguments& arguments) {
  return std::make_unique<TrivialAugmentWide>(arguments);
}
std::unique_ptr<Transform> make_rand_augment(const Arguments& arguments) {
  return std::make_unique<RandAugment>(arguments);
}
std::unique_ptr<Transform> make_auto_augment(const Arguments& arguments) {
  return std::make_unique<AutoAugment>(arguments);
}

}  // namespace gpucore::transforms
