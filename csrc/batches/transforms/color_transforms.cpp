// The photometric transforms of the `transforms` list, by torchvision.transforms.v2's rules: their arguments,
// their parameter distributions (make_params, drawn per sample from gpucore's per-epoch generator) and their
// results through gpucore::color_ops. params = {codes N x K int64, magnitudes N x K float64}.
#include <ATen/ops/empty.h>

#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <sstream>

#include "batches/transforms/color_transforms.h"
#include "ops/augment/color.h"
#include "ops/color_math.h"

namespace gpucore::transforms {

at::Tensor ColorOpsTransform::apply(const at::Tensor& images, const std::vector<at::Tensor>& params) const {
  return ops::color_ops(images, params[0], params[1]);
}

ColorSteps::ColorSteps(int64_t samples, int64_t steps)
    : codes(at::empty({samples, steps}, at::TensorOptions().dtype(at::kLong))),
      magnitudes(at::empty({samples, steps}, at::TensorOptions().dtype(at::kDouble))),
      code_(codes.data_ptr<int64_t>()),
      magnitude_(magnitudes.data_ptr<double>()) {
  codes.fill_(ops::kColorIdentity);
  magnitudes.zero_();
}

void ColorSteps::set(int64_t index, int64_t code, double magnitude) {
  code_[index] = code;
  magnitude_[index] = magnitude;
}

double probability(const Arguments& arguments, double fallback) {
  const double p = arguments.number("p", fallback);
  if (p < 0 || p > 1) {
    std::ostringstream value;
    value << p;
    arguments.fail("p", "must be in [0, 1], got " + value.str());
  }
  return p;
}

namespace {

// ColorJitter's _check_input: a number v >= 0 is [center - v, center + v] (the factors' low end at least 0), a
// pair is [low, high]; increasing and inside [bound_low, bound_high]. nullopt: no jitter (torchvision's None).
std::optional<std::pair<double, double>> jitter_range(const Arguments& arguments, const std::string& name, double center,
                                                      double bound_low, double bound_high, bool clip_at_zero) {
  if (!arguments.has(name)) return std::nullopt;
  const std::vector<double> values = arguments.numbers(name, {}, {1, 2});
  double low = values[0], high = values.back();
  if (values.size() == 1) {
    if (values[0] < 0) arguments.fail(name, "as a single number must be >= 0");
    low = center - values[0], high = center + values[0];
    if (clip_at_zero) low = std::max(low, 0.0);
  }
  if (!(bound_low <= low && low <= high && high <= bound_high)) {
    std::ostringstream message;
    message << "values must be increasing and inside [" << bound_low << ", " << bound_high << "], got [" << low << ", "
            << high << "]";
    arguments.fail(name, message.str());
  }
  if (low == center && high == center) return std::nullopt;
  return std::make_pair(low, high);
}

class ColorJitter final : public ColorOpsTransform {
 public:
  explicit ColorJitter(const Arguments& arguments) {
    const double inf = std::numeric_limits<double>::infinity();
    ranges_[0] = jitter_range(arguments, "brightness", 1.0, 0.0, inf, true);
    ranges_[1] = jitter_range(arguments, "contrast", 1.0, 0.0, inf, true);
    ranges_[2] = jitter_range(arguments, "saturation", 1.0, 0.0, inf, true);
    ranges_[3] = jitter_range(arguments, "hue", 0.0, -0.5, 0.5, false);
  }
  bool is_random() const override { return true; }
  std::vector<at::Tensor> sample(int64_t samples, int64_t, int64_t, at::Generator& generator) const override {
    // The adjustments in fn_idx's order (codes 1..4 are brightness, contrast, saturation, hue).
    static_assert(ops::kColorBrightness == 1 && ops::kColorContrast == 2 && ops::kColorSaturation == 3 &&
                  ops::kColorHue == 4);
    ColorSteps steps(samples, 4);
    Draws draws(generator);
    for (int64_t s = 0; s < samples; ++s) {
      // torchvision's make_params: fn_idx = randperm(4), then the four factors in their fixed order.
      std::array<int64_t, 4> order{0, 1, 2, 3};
      for (int64_t i = 3; i > 0; --i) std::swap(order[i], order[draws.below(i + 1)]);
      std::array<double, 4> factors{};
      for (int j = 0; j < 4; ++j) {
        if (ranges_[j]) factors[j] = draws.uniform(ranges_[j]->first, ranges_[j]->second);
      }
      for (int k = 0; k < 4; ++k) {
        const int64_t j = order[k];
        if (ranges_[j]) steps.set(s * 4 + k, j + 1, factors[j]);
      }
    }
    return {steps.codes, steps.magnitudes};
  }

 private:
  std::array<std::optional<std::pair<double, double>>, 4> ranges_;
};

// RandomGrayscale and torchvision's other _RandomApplyTransform photometric transforms: one adjustment with a
// fixed magnitude, applied where rand < p.
class RandomApplyColorOp final : public ColorOpsTransform {
 public:
  RandomApplyColorOp(double p, int64_t code, double magnitude) : p_(p), code_(code), magnitude_(magnitude) {}
  bool is_random() const override { return true; }
  std::vector<at::Tensor> sample(int64_t samples, int64_t, int64_t, at::Generator& generator) const override {
    ColorSteps steps(samples, 1);
    Draws draws(generator);
    for (int64_t s = 0; s < samples; ++s) {
      if (draws.uniform(0.0, 1.0) < p_) steps.set(s, code_, magnitude_);
    }
    return {steps.codes, steps.magnitudes};
  }

 private:
  double p_;
  int64_t code_;
  double magnitude_;
};

}  // namespace

std::unique_ptr<Transform> make_color_jitter(const Arguments& arguments) {
  return std::make_unique<ColorJitter>(arguments);
}

std::unique_ptr<Transform> make_random_grayscale(const Arguments& arguments) {
  return std::make_unique<RandomApplyColorOp>(probability(arguments, 0.1), ops::kColorGrayscale, 0.0);
}

std::unique_ptr<Transform> make_random_posterize(const Arguments& arguments) {
  if (!arguments.has("bits")) arguments.fail("bits", "is required: an integer in [0, 8]");
  const double bits = arguments.number("bits", 8);
  if (!is_integer(bits) || bits < 0 || bits > 8) arguments.fail("bits", "must be an integer in [0, 8]");
  return std::make_unique<RandomApplyColorOp>(probability(arguments, 0.5), ops::kColorPosterize, bits);
}

std::unique_ptr<Transform> make_random_solarize(const Arguments& arguments) {
  if (!arguments.has("threshold")) arguments.fail("threshold", "is required: a value in [0, 255] for uint8 images");
  const double threshold = arguments.number("threshold", 0);
  if (threshold > 255) arguments.fail("threshold", "must be <= 255 (the uint8 images' maximum)");
  return std::make_unique<RandomApplyColorOp>(probability(arguments, 0.5), ops::kColorSolarize, threshold);
}

std::unique_ptr<Transform> make_random_adjust_sharpness(const Arguments& arguments) {
  if (!arguments.has("sharpness_factor")) arguments.fail("sharpness_factor", "is required: a number >= 0");
  const double factor = arguments.number("sharpness_factor", 1);
  if (factor < 0) arguments.fail("sharpness_factor", "must be >= 0");
  return std::make_unique<RandomApplyColorOp>(probability(arguments, 0.5), ops::kColorSharpness, factor);
}

std::unique_ptr<Transform> make_random_autocontrast(const Arguments& arguments) {
  return std::make_unique<RandomApplyColorOp>(probability(arguments, 0.5), ops::kColorAutocontrast, 0.0);
}

std::unique_ptr<Transform> make_random_equalize(const Arguments& arguments) {
  return std::make_unique<RandomApplyColorOp>(probability(arguments, 0.5), ops::kColorEqualize, 0.0);
}

std::unique_ptr<Transform> make_random_invert(const Arguments& arguments) {
  return std::make_unique<RandomApplyColorOp>(probability(arguments, 0.5), ops::kColorInvert, 0.0);
}

}  // namespace gpucore::transforms
