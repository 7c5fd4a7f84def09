// RandomErasing of the `transforms` list, by torchvision.transforms.v2's rules, on the float batch after
// Normalize: the box per sample drawn as make_params draws it, filled by gpucore::erase with the value (one for
// all channels or one per channel) or, for value "random", standard normal values from a per-sample seed.
// params = {boxes N x 4 int64, fill N x V float32 (V values) or seeds N int64}.
#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <cmath>
#include <limits>

#include "batches/transforms/color_transforms.h"
#include "gpucore/errors.h"
#include "ops/augment/color.h"

namespace gpucore::transforms {
namespace {

bool in_unit_interval(double value) { return value >= 0 && value <= 1; }

class RandomErasing final : public Transform {
 public:
  explicit RandomErasing(const Arguments& arguments)
      : p_(probability(arguments, 0.5)),
        scale_(arguments.ordered_pair("scale", {0.02, 0.33}, in_unit_interval, "both in [0, 1]")),
        ratio_(arguments.ordered_pair("ratio", {0.3, 3.3}, positive, "both > 0")) {
    // value: a number, one per channel, or the word "random".
    random_ = arguments.is_word("value");
    if (random_) {
      arguments.word("value", "random", {"random"});
    } else {
      value_ = arguments.numbers("value", {0.0}, {1, 3});
    }
    arguments.flag("inplace", false);  // gpucore's batches are its own: in place or not, the result is the same
  }
  bool is_random() const override { return true; }
  bool after_normalize() const override { return true; }
  std::vector<at::Tensor> sample(int64_t samples, int64_t h, int64_t w, at::Generator& generator) const override {
    at::Tensor boxes = at::zeros({samples, 4}, at::TensorOptions().dtype(at::kLong));
    at::Tensor seeds = at::empty({random_ ? samples : 0}, at::TensorOptions().dtype(at::kLong));
    int64_t* box = boxes.data_ptr<int64_t>();
    const double area = static_cast<double>(h * w);
    const auto [log_low, log_high] = float32_log(ratio_);
    Draws draws(generator);
    for (int64_t s = 0; s < samples; ++s, box += 4) {
      if (random_) seeds.data_ptr<int64_t>()[s] = draws.below(std::numeric_limits<int64_t>::max());
      if (draws.uniform(0.0, 1.0) >= p_) continue;  // _RandomApplyTransform: applied where rand < p
      // make_params: ten tries of an area fraction and a log-uniform aspect ratio; none fits: no erasing.
      for (int attempt = 0; attempt < 10; ++attempt) {
        const double erase_area = area * draws.uniform(scale_.first, scale_.second);
        const double aspect = draws.exp_uniform(log_low, log_high);
        const int64_t eh = round_half_even(std::sqrt(erase_area * aspect));
        const int64_t ew = round_half_even(std::sqrt(erase_area / aspect));
        if (!(eh < h && ew < w)) continue;
        box[0] = draws.below(h - eh + 1);
        box[1] = draws.below(w - ew + 1);
        box[2] = eh, box[3] = ew;
        break;
      }
    }
    if (random_) return {boxes, seeds};
    const at::Tensor fill = at::tensor(std::vector<float>(value_.begin(), value_.end()));
    return {boxes, fill.unsqueeze(0).expand({samples, fill.size(0)}).contiguous()};
  }
  at::Tensor apply(const at::Tensor& images, const std::vector<at::Tensor>& params) const override {
    if (random_) return ops::erase(images, params[0], std::nullopt, params[1]);
    const int64_t channels = images.size(1);
    if (params[1].size(1) != 1 && params[1].size(1) != channels) {
      throw ConfigError("RandomErasing: value has " + std::to_string(params[1].size(1)) +
                        " numbers for images of " + std::to_string(channels) + " channels; give one or " +
                        std::to_string(channels));
    }
    return ops::erase(images, params[0], params[1].expand({images.size(0), channels}), std::nullopt);
  }

 private:
  double p_;
  std::pair<double, double> scale_, ratio_;
  bool random_ = false;
  std::vector<double> value_;
};

}  // namespace

std::unique_ptr<Transform> make_random_erasing(const Arguments& arguments) {
  return std::make_unique<RandomErasing>(arguments);
}

}  // namespace gpucore::transforms
