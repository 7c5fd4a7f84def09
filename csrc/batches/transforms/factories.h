#pragma once
// Inside the transforms registry: reading one entry's arguments by torchvision's rules, and the factory of
// each transform (registry.cpp holds the table of names, arguments and factories).
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gpucore/batches/transforms.h"

namespace gpucore::transforms {

// One entry's arguments; every error is a ConfigError naming the transform and the argument.
class Arguments {
 public:
  explicit Arguments(const TransformSpec& spec) : spec_(spec) {}
  const std::string& transform() const { return spec_.name; }
  bool has(const std::string& name) const;
  // Numeric values of `name` (a scalar is one value); `fallback` when absent. `counts`: the lengths allowed.
  std::vector<double> numbers(const std::string& name, std::vector<double> fallback,
                              const std::vector<size_t>& counts) const;
  double number(const std::string& name, double fallback) const;
  bool flag(const std::string& name, bool fallback) const;
  std::string word(const std::string& name, const std::string& fallback, const std::vector<std::string>& choices) const;
  // An output size: one positive integer (square) or (height, width).
  std::array<int64_t, 2> size(const std::string& name) const;
  // A range: a number d >= 0 is (-d, d); a pair (low, high) needs low <= high.
  std::pair<double, double> symmetric_range(const std::string& name, std::pair<double, double> fallback) const;
  // A pair (low, high) with low <= high whose values pass `check` (described by `valid`).
  std::pair<double, double> ordered_pair(const std::string& name, std::pair<double, double> fallback, bool (*check)(double),
                                         const std::string& valid) const;
  bool is_word(const std::string& name) const;  // given as a name (value: random), not as numbers
  [[noreturn]] void fail(const std::string& name, const std::string& message) const;

 private:
  const TransformSpec& spec_;
};

bool is_integer(double value);
// The check of ordered_pair for pairs of sizes and aspect ratios (scale, ratio): both > 0.
inline bool positive(double value) { return value > 0; }

// torchvision's _get_inverse_affine_matrix (inverted=True): the map from output pixel to input coordinates,
// both relative to the image centre (cx, cy: the rotation centre relative to it); degrees for the angles.
std::array<double, 6> inverse_affine_matrix(double cx, double cy, double angle, double tx, double ty, double scale,
                                            double shear_x, double shear_y);

// `matrix` as gpucore::affine reads it: six float32 values at `row`.
inline void store_matrix(float* row, const std::array<double, 6>& matrix) {
  for (int k = 0; k < 6; ++k) row[k] = static_cast<float>(matrix[k]);
}

// What a transform is to gpucore::augment, whose one pass can also crop without resizing (zero fill) and flip
// horizontally: a RandomCrop to the size of its h x w input with fill 0 (its offsets are augment's), a
// RandomHorizontalFlip (its flips' column 1 is augment's), or neither. The pipeline runs such a tail of the
// uint8 stage inside augment instead of as passes of its own; the result is the same.
enum class AugmentPart { kNone, kCrop, kHorizontalFlip };
AugmentPart augment_part(const Transform& transform, int64_t h, int64_t w);

// Geometric (geometric_transforms.cpp).
std::unique_ptr<Transform> make_random_crop(const Arguments& arguments);
std::unique_ptr<Transform> make_center_crop(const Arguments& arguments);
std::unique_ptr<Transform> make_horizontal_flip(const Arguments& arguments);
std::unique_ptr<Transform> make_vertical_flip(const Arguments& arguments);
std::unique_ptr<Transform> make_resize(const Arguments& arguments);
std::unique_ptr<Transform> make_random_resized_crop(const Arguments& arguments);
std::unique_ptr<Transform> make_random_rotation(const Arguments& arguments);
std::unique_ptr<Transform> make_random_affine(const Arguments& arguments);

// Photometric (color_transforms.cpp, auto_augment.cpp, erasing.cpp).
std::unique_ptr<Transform> make_color_jitter(const Arguments& arguments);
std::unique_ptr<Transform> make_random_grayscale(const Arguments& arguments);
std::unique_ptr<Transform> make_random_posterize(const Arguments& arguments);
std::unique_ptr<Transform> make_random_solarize(const Arguments& arguments);
std::unique_ptr<Transform> make_random_adjust_sharpness(const Arguments& arguments);
std::unique_ptr<Transform> make_random_autocontrast(const Arguments& arguments);
std::unique_ptr<Transform> make_random_equalize(const Arguments& arguments);
std::unique_ptr<Transform> make_random_invert(const Arguments& arguments);
std::unique_ptr<Transform> make_trivial_augment_wide(const Arguments& arguments);
std::unique_ptr<Transform> make_rand_augment(const Arguments& arguments);
std::unique_ptr<Transform> make_auto_augment(const Arguments& arguments);
std::unique_ptr<Transform> make_random_erasing(const Arguments& arguments);

}  // namespace gpucore::transforms
