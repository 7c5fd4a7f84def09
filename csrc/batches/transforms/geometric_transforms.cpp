// The geometric transforms of the `transforms` list, by torchvision.transforms.v2's rules: their arguments,
// their parameter distributions (make_params / get_params, drawn per sample from gpucore's per-epoch
// generator) and their results through gpucore's crop, resized_crop and affine ops.
#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "batches/transforms/sampling.h"
#include "gpucore/errors.h"
#include "gpucore/ranges.h"
#include "ops/augment/geometry.h"

namespace gpucore::transforms {
namespace {

const at::TensorOptions kHostLong = at::TensorOptions().dtype(at::kLong);
const at::TensorOptions kHostBool = at::TensorOptions().dtype(at::kBool);
const std::vector<std::string> kInterpolations = {"nearest", "bilinear"};

std::vector<double> fill_of(const Arguments& arguments, std::vector<double> fallback) {
  return arguments.numbers("fill", std::move(fallback), {1, 3});
}

}  // namespace

std::string interpolation_of(const Arguments& arguments, const std::string& fallback) {
  return arguments.word("interpolation", fallback, kInterpolations);
}

namespace {

// A mask (N x H x W class ids) through `op` on its float copy (ids exact), back in its dtype.
template <typename Op>
at::Tensor on_float_mask(const at::Tensor& masks, Op op) {
  return op(masks.unsqueeze(1).to(at::kFloat)).squeeze(1).to(masks.scalar_type());
}

// Crops, padding and flips: one gpucore::crop per batch; params = {offsets N x 2, flips N x 2}.
class CropTransform : public Transform {
 public:
  bool moves_pixels() const override { return true; }
  at::Tensor apply(const at::Tensor& images, const std::vector<at::Tensor>& params) const override {
    return ops::crop(images, params[0], params[1], output_size(images.size(2), images.size(3)), fill_);
  }
  at::Tensor apply_to_mask(const at::Tensor& masks, const std::vector<at::Tensor>& params) const override {
    const auto size = output_size(masks.size(1), masks.size(2));
    return on_float_mask(masks, [&](const at::Tensor& m) { return ops::crop(m, params[0], params[1], size, {}); });
  }

 protected:
  std::vector<double> fill_;
};

// The entry `name` with the arguments `kept` of `spec` that it has: a random crop's deterministic counterpart.
TransformSpec counterpart(const std::string& name, const TransformSpec& spec, const std::vector<std::string>& kept) {
  TransformSpec out;
  out.name = name;
  for (const std::string& argument : kept) {
    if (const auto number = spec.numbers.find(argument); number != spec.numbers.end()) out.numbers.insert(*number);
    if (const auto word = spec.words.find(argument); word != spec.words.end()) out.words.insert(*word);
  }
  return out;
}

class RandomCrop final : public CropTransform {
 public:
  explicit RandomCrop(const Arguments& arguments) : size_(arguments.size("size")) {
    const std::vector<double> padding = arguments.numbers("padding", {0}, {1, 2, 4});
    for (const double value : padding) {
      if (!is_integer(value) || !ranges::kCropPadding.range.contains(value)) {
        arguments.fail("padding", "must be integers " + ranges::kCropPadding.range.describe() + ", got " + std::to_string(value));
      }
    }
    // torchvision's _parse_pad_padding: one value for all sides, (left/right, top/bottom) or (l, t, r, b).
    const auto at = [&](size_t four, size_t two) {
      return static_cast<int64_t>(padding.size() == 4 ? padding[four] : padding.size() == 2 ? padding[two] : padding[0]);
    };
    left_ = at(0, 0), top_ = at(1, 1), right_ = at(2, 0), bottom_ = at(3, 1);
    pad_if_needed_ = arguments.flag("pad_if_needed", false);
    fill_ = fill_of(arguments, {0});
    const std::string mode = arguments.word("padding_mode", "constant", {"constant", "edge", "reflect", "symmetric"});
    if (mode != "constant") {
      arguments.fail("padding_mode", "'" + mode + "' is not supported by gpucore; valid: constant");
    }
  }
  bool is_random() const override { return true; }
  std::vector<TransformSpec> validation_form(const TransformSpec& spec) const override {
    return {counterpart("CenterCrop", spec, {"size"})};
  }
  std::array<int64_t, 2> output_size(int64_t, int64_t) const override { return size_; }
  bool one_output_size() const override { return true; }
  bool keeps_size_with_zero_fill(int64_t h, int64_t w) const {
    return size_[0] == h && size_[1] == w && std::all_of(fill_.begin(), fill_.end(), [](double v) { return v == 0; });
  }
  std::vector<at::Tensor> sample(int64_t samples, int64_t h, int64_t w, at::Generator& generator) const override {
    int64_t top = top_, left = left_, padded_h = h + top_ + bottom_, padded_w = w + left_ + right_;
    if (pad_if_needed_ && padded_h < size_[0]) {
      top += size_[0] - padded_h;
      padded_h += 2 * (size_[0] - padded_h);
    }
    if (pad_if_needed_ && padded_w < size_[1]) {
      left += size_[1] - padded_w;
      padded_w += 2 * (size_[1] - padded_w);
    }
    if (padded_h < size_[0] || padded_w < size_[1]) {
      throw ConfigError("RandomCrop: the crop size (" + std::to_string(size_[0]) + ", " + std::to_string(size_[1]) +
                        ") is larger than the padded input image (" + std::to_string(padded_h) + ", " +
                        std::to_string(padded_w) + "); lower size, add padding or set pad_if_needed: true");
    }
    const int64_t span_h = padded_h - size_[0] + 1, span_w = padded_w - size_[1] + 1;
    // (top, left) per sample in the padded image; one n x 2 draw when the ranges agree (crop_padding's case).
    const at::Tensor corners = span_h == span_w ? at::randint(span_h, {samples, 2}, generator, kHostLong)
                                                : at::cat({at::randint(span_h, {samples, 1}, generator, kHostLong),
                                                           at::randint(span_w, {samples, 1}, generator, kHostLong)},
                                                          1);
    return {corners - at::tensor({top, left}, kHostLong), at::zeros({samples, 2}, kHostBool)};
  }

 private:
  std::array<int64_t, 2> size_;
  int64_t left_, top_, right_, bottom_;
  bool pad_if_needed_;
};

class CenterCrop final : public CropTransform {
 public:
  explicit CenterCrop(const Arguments& arguments) : size_(arguments.size("size")) {}
  bool is_random() const override { return false; }
  std::array<int64_t, 2> output_size(int64_t, int64_t) const override { return size_; }
  bool one_output_size() const override { return true; }
  std::vector<at::Tensor> sample(int64_t samples, int64_t h, int64_t w, at::Generator&) const override {
    // torchvision's center_crop: zero padding (floor on the top/left) where the crop is larger, then the
    // anchor round((padded - crop) / 2).
    const auto corner = [](int64_t crop, int64_t image) {
      const int64_t before = crop > image ? (crop - image) / 2 : 0;
      const int64_t padded = crop > image ? image + before + (crop - image + 1) / 2 : image;
      return round_half_even((padded - crop) / 2.0) - before;
    };
    const at::Tensor offsets = at::tensor({corner(size_[0], h), corner(size_[1], w)}, kHostLong);
    return {offsets.unsqueeze(0).expand({samples, 2}).contiguous(), at::zeros({samples, 2}, kHostBool)};
  }

 private:
  std::array<int64_t, 2> size_;
};

class RandomFlip final : public CropTransform {
 public:
  RandomFlip(const Arguments& arguments, int64_t axis) : p_(arguments.number("p", 0.5)), axis_(axis) {
    if (p_ < 0 || p_ > 1) arguments.fail("p", "must be in [0, 1], got " + std::to_string(p_));
  }
  bool is_random() const override { return true; }
  std::vector<at::Tensor> sample(int64_t samples, int64_t, int64_t, at::Generator& generator) const override {
    at::Tensor flips = at::zeros({samples, 2}, kHostBool);
    flips.select(1, axis_).copy_(at::rand({samples}, generator) < p_);  // torchvision: rand(1) < p flips
    return {at::zeros({samples, 2}, kHostLong), flips};
  }
  bool horizontal() const { return axis_ == 1; }

 private:
  double p_;
  int64_t axis_;  // 0: vertical, 1: horizontal
};

// Resizes of a box per sample: one gpucore::resized_crop per batch; params = {boxes N x 4}.
class ResizeTransform : public Transform {
 public:
  explicit ResizeTransform(const Arguments& arguments)
      : interpolation_(interpolation_of(arguments, "bilinear")), antialias_(arguments.flag("antialias", true)) {}
  bool moves_pixels() const override { return true; }
  at::Tensor apply(const at::Tensor& images, const std::vector<at::Tensor>& params) const override {
    return ops::resized_crop(images, params[0], output_size(images.size(2), images.size(3)), interpolation_,
                             antialias_ && interpolation_ == "bilinear");
  }
  at::Tensor apply_to_mask(const at::Tensor& masks, const std::vector<at::Tensor>& params) const override {
    const auto size = output_size(masks.size(1), masks.size(2));
    return on_float_mask(masks,
                         [&](const at::Tensor& m) { return ops::resized_crop(m, params[0], size, "nearest", false); });
  }
  bool resizes_box() const override { return true; }
  at::Tensor apply_to_region(const at::Tensor& region, int64_t input_height, int64_t input_width) const override {
    // The whole region is the box; the output size is the full input's, which a reduced region need not give.
    const at::Tensor box = at::tensor({int64_t{0}, int64_t{0}, region.size(2), region.size(3)}, kHostLong).unsqueeze(0);
    return ops::resized_crop(region, box, output_size(input_height, input_width), interpolation_,
                             antialias_ && interpolation_ == "bilinear");
  }

 protected:
  std::string interpolation_;
  bool antialias_;
};

class Resize final : public ResizeTransform {
 public:
  explicit Resize(const Arguments& arguments) : ResizeTransform(arguments), size_(arguments.size("size")) {
    pair_ = arguments.numbers("size", {}, {1, 2}).size() == 2;
    max_size_ = static_cast<int64_t>(arguments.number("max_size", 0));
    if (arguments.has("max_size") && (pair_ || max_size_ <= size_[0])) {
      arguments.fail("max_size", "needs size as one number below it (the smaller edge), got size " +
                                     std::to_string(size_[0]) + (pair_ ? " x " + std::to_string(size_[1]) : ""));
    }
  }
  bool is_random() const override { return false; }
  bool one_output_size() const override { return pair_; }
  std::array<int64_t, 2> output_size(int64_t h, int64_t w) const override {
    if (pair_) return size_;
    // torchvision's _compute_resized_output_size: the smaller edge to size, the other in proportion.
    const int64_t shorter = std::min(h, w), longer = std::max(h, w);
    int64_t new_short = size_[0], new_long = static_cast<int64_t>(static_cast<double>(size_[0]) * longer / shorter);
    if (max_size_ > 0 && new_long > max_size_) {
      new_short = static_cast<int64_t>(static_cast<double>(max_size_) * new_short / new_long);
      new_long = max_size_;
    }
    return w <= h ? std::array<int64_t, 2>{new_long, new_short} : std::array<int64_t, 2>{new_short, new_long};
  }
  std::vector<at::Tensor> sample(int64_t samples, int64_t h, int64_t w, at::Generator&) const override {
    return {at::tensor({int64_t{0}, int64_t{0}, h, w}, kHostLong).unsqueeze(0).expand({samples, 4}).contiguous()};
  }

 private:
  std::array<int64_t, 2> size_;
  bool pair_;
  int64_t max_size_;
};

class RandomResizedCrop final : public ResizeTransform {
 public:
  explicit RandomResizedCrop(const Arguments& arguments)
      : ResizeTransform(arguments),
        size_(arguments.size("size")),
        scale_(arguments.ordered_pair("scale", {0.08, 1.0}, positive, "both > 0")),
        ratio_(arguments.ordered_pair("ratio", {3.0 / 4.0, 4.0 / 3.0}, positive, "both > 0")) {}
  bool is_random() const override { return true; }
  std::vector<TransformSpec> validation_form(const TransformSpec& spec) const override {
    return {counterpart("Resize", spec, {"size", "interpolation", "antialias"}), counterpart("CenterCrop", spec, {"size"})};
  }
  std::array<int64_t, 2> output_size(int64_t, int64_t) const override { return size_; }
  bool one_output_size() const override { return true; }
  std::vector<at::Tensor> sample(int64_t samples, int64_t h, int64_t w, at::Generator& generator) const override {
    at::Tensor boxes = at::empty({samples, 4}, kHostLong);
    int64_t* box = boxes.data_ptr<int64_t>();
    const double area = static_cast<double>(h * w);
    const auto [log_low, log_high] = float32_log(ratio_);
    Draws draws(generator);
    for (int64_t s = 0; s < samples; ++s, box += 4) {
      // torchvision's make_params: ten tries of an area fraction and a log-uniform aspect ratio, then the
      // central crop of the ratio range's nearest ratio.
      bool found = false;
      for (int attempt = 0; attempt < 10 && !found; ++attempt) {
        const double target = area * draws.uniform(scale_.first, scale_.second);
        const double aspect = draws.exp_uniform(log_low, log_high);
        const int64_t cw = round_half_even(std::sqrt(target * aspect)), ch = round_half_even(std::sqrt(target / aspect));
        if (0 < cw && cw <= w && 0 < ch && ch <= h) {
          box[0] = draws.below(h - ch + 1);
          box[1] = draws.below(w - cw + 1);
          box[2] = ch, box[3] = cw;
          found = true;
        }
      }
      if (found) continue;
      const double in_ratio = static_cast<double>(w) / static_cast<double>(h);
      int64_t cw = w, ch = h;
      if (in_ratio < ratio_.first) {
        ch = round_half_even(cw / ratio_.first);
      } else if (in_ratio > ratio_.second) {
        cw = round_half_even(ch * ratio_.second);
      }
      box[0] = (h - ch) / 2, box[1] = (w - cw) / 2, box[2] = ch, box[3] = cw;
    }
    return {boxes};
  }

 private:
  std::array<int64_t, 2> size_;
  std::pair<double, double> scale_, ratio_;
};

// Rotations, shears, scales, translations: one gpucore::affine per batch; params = {matrices N x 6 float32}.
class AffineTransform : public Transform {
 public:
  explicit AffineTransform(const Arguments& arguments)
      : degrees_(arguments.symmetric_range("degrees", {0.0, 0.0})),
        interpolation_(interpolation_of(arguments, "nearest")),
        fill_(fill_of(arguments, {0})) {
    if (!arguments.has("degrees")) arguments.fail("degrees", "is required: a number d (range [-d, d]) or [low, high]");
    if (arguments.has("center")) {
      center_ = arguments.numbers("center", {}, {2});
      has_center_ = true;
    }
  }
  bool is_random() const override { return true; }
  bool moves_pixels() const override { return true; }
  std::vector<at::Tensor> sample(int64_t samples, int64_t h, int64_t w, at::Generator& generator) const override {
    at::Tensor matrices = at::empty({samples, 6}, at::TensorOptions().dtype(at::kFloat));
    float* row = matrices.data_ptr<float>();
    const auto [cx, cy] = centre(h, w);
    Draws draws(generator);
    for (int64_t s = 0; s < samples; ++s, row += 6) {
      store_matrix(row, draw_matrix(draws, cx, cy, h, w));
    }
    return {matrices};
  }
  at::Tensor apply(const at::Tensor& images, const std::vector<at::Tensor>& params) const override {
    return ops::affine(images, params[0], interpolation_, fill_);
  }
  at::Tensor apply_to_mask(const at::Tensor& masks, const std::vector<at::Tensor>& params) const override {
    return on_float_mask(masks, [&](const at::Tensor& m) { return ops::affine(m, params[0], "nearest", {0.0}); });
  }

 protected:
  // The centre relative to the image centre (torchvision: center - size / 2; none: 0).
  std::pair<double, double> centre(int64_t h, int64_t w) const {
    return has_center_ ? std::make_pair(center_[0] - w * 0.5, center_[1] - h * 0.5) : std::make_pair(0.0, 0.0);
  }
  // One sample's inverse affine matrix, its parameters drawn in torchvision's order.
  virtual std::array<double, 6> draw_matrix(Draws& draws, double cx, double cy, int64_t h, int64_t w) const = 0;

  std::pair<double, double> degrees_;
  std::string interpolation_;
  std::vector<double> fill_;
  std::vector<double> center_;
  bool has_center_ = false;
};

class RandomRotation final : public AffineTransform {
 public:
  explicit RandomRotation(const Arguments& arguments) : AffineTransform(arguments) {
    if (arguments.flag("expand", false)) {
      arguments.fail("expand", "true is not supported by gpucore (a batch keeps one image size); use false");
    }
  }
  std::array<double, 6> draw_matrix(Draws& draws, double cx, double cy, int64_t, int64_t) const override {
    // torchvision's rotate: the affine map of -angle (its angle is counter-clockwise).
    const double angle = draws.uniform(degrees_.first, degrees_.second);
    return inverse_affine_matrix(cx, cy, -angle, 0.0, 0.0, 1.0, 0.0, 0.0);
  }
};

class RandomAffine final : public AffineTransform {
 public:
  explicit RandomAffine(const Arguments& arguments) : AffineTransform(arguments) {
    if (arguments.has("translate")) {
      translate_ = arguments.numbers("translate", {}, {2});
      for (const double t : translate_) {
        if (t < 0 || t > 1) arguments.fail("translate", "values must be in [0, 1], got " + std::to_string(t));
      }
    }
    if (arguments.has("scale")) scale_ = arguments.ordered_pair("scale", {1.0, 1.0}, positive, "both > 0");
    has_shear_ = arguments.has("shear");
    if (has_shear_) {
      const std::vector<double> shear = arguments.numbers("shear", {}, {1, 2, 4});
      if (shear.size() == 1 && shear[0] < 0) arguments.fail("shear", "as a single number must be >= 0");
      shear_x_ = shear.size() == 1 ? std::make_pair(-shear[0], shear[0]) : std::make_pair(shear[0], shear[1]);
      if (shear.size() == 4) shear_y_ = std::make_pair(shear[2], shear[3]);
      has_shear_y_ = shear.size() == 4;
      if (shear_x_.first > shear_x_.second || shear_y_.first > shear_y_.second) {
        arguments.fail("shear", "ranges must be [low, high] with low <= high");
      }
    }
  }
  std::array<double, 6> draw_matrix(Draws& draws, double cx, double cy, int64_t h, int64_t w) const override {
    // torchvision's make_params, in its order of draws.
    const double angle = draws.uniform(degrees_.first, degrees_.second);
    double tx = 0, ty = 0;
    if (!translate_.empty()) {
      const double max_dx = translate_[0] * w, max_dy = translate_[1] * h;
      tx = static_cast<double>(round_half_even(draws.uniform(-max_dx, max_dx)));
      ty = static_cast<double>(round_half_even(draws.uniform(-max_dy, max_dy)));
    }
    // scale and shear are drawn only when given, as torchvision draws them
    const double scale = scale_ ? draws.uniform(scale_->first, scale_->second) : 1.0;
    const double shear_x = has_shear_ ? draws.uniform(shear_x_.first, shear_x_.second) : 0.0;
    const double shear_y = has_shear_y_ ? draws.uniform(shear_y_.first, shear_y_.second) : 0.0;
    return inverse_affine_matrix(cx, cy, angle, tx, ty, scale, shear_x, shear_y);
  }

 private:
  std::vector<double> translate_;
  std::optional<std::pair<double, double>> scale_;
  std::pair<double, double> shear_x_{0.0, 0.0}, shear_y_{0.0, 0.0};
  bool has_shear_ = false, has_shear_y_ = false;
};

}  // namespace

std::array<double, 6> inverse_affine_matrix(double cx, double cy, double angle, double tx, double ty, double scale,
                                            double shear_x, double shear_y) {
  const double rot = angle * M_PI / 180.0, sx = shear_x * M_PI / 180.0, sy = shear_y * M_PI / 180.0;
  const double cos_sy = std::cos(sy), tan_sx = std::tan(sx), rot_minus_sy = rot - sy;
  const double cx_plus_tx = cx + tx, cy_plus_ty = cy + ty;
  const double a = std::cos(rot_minus_sy) / cos_sy, b = -(a * tan_sx + std::sin(rot));
  const double c = std::sin(rot_minus_sy) / cos_sy, d = std::cos(rot) - c * tan_sx;
  std::array<double, 6> m = {d / scale, -b / scale, 0.0, -c / scale, a / scale, 0.0};
  m[2] += cx - m[0] * cx_plus_tx - m[1] * cy_plus_ty;
  m[5] += cy - m[3] * cx_plus_tx - m[4] * cy_plus_ty;
  return m;
}

AugmentPart augment_part(const Transform& transform, int64_t h, int64_t w) {
  if (const auto* crop = dynamic_cast<const RandomCrop*>(&transform); crop && crop->keeps_size_with_zero_fill(h, w)) {
    return AugmentPart::kCrop;
  }
  if (const auto* flip = dynamic_cast<const RandomFlip*>(&transform); flip && flip->horizontal()) {
    return AugmentPart::kHorizontalFlip;
  }
  return AugmentPart::kNone;
}

std::unique_ptr<Transform> make_random_crop(const Arguments& arguments) { return std::make_unique<RandomCrop>(arguments); }
std::unique_ptr<Transform> make_center_crop(const Arguments& arguments) { return std::make_unique<CenterCrop>(arguments); }
std::unique_ptr<Transform> make_horizontal_flip(const Arguments& arguments) {
  return std::make_unique<RandomFlip>(arguments, 1);
}
std::unique_ptr<Transform> make_vertical_flip(const Arguments& arguments) {
  return std::make_unique<RandomFlip>(arguments, 0);
}
std::unique_ptr<Transform> make_resize(const Arguments& arguments) { return std::make_unique<Resize>(arguments); }
std::unique_ptr<Transform> make_random_resized_crop(const Arguments& arguments) {
  return std::make_unique<RandomResizedCrop>(arguments);
}
std::unique_ptr<Transform> make_random_rotation(const Arguments& arguments) {
  return std::make_unique<RandomRotation>(arguments);
}
std::unique_ptr<Transform> make_random_affine(const Arguments& arguments) {
  return std::make_unique<RandomAffine>(arguments);
}

}  // namespace gpucore::transforms
