// The `transforms` list as one batch transform: uint8 stage in list order, Normalize and the cast to the
// batch dtype in the fused augment op, float stage in list order; masks follow the geometric transforms.
#include <ATen/ops/zeros.h>

#include "batches/transforms/factories.h"
#include "gpucore/batches/transforms.h"
#include "gpucore/errors.h"
#include "ops/augment.h"

namespace gpucore {

TransformPipeline::TransformPipeline(const std::vector<TransformSpec>& specs, std::vector<double> mean,
                                     std::vector<double> std)
    : mean_(std::move(mean)), std_(std::move(std)) {
  bool normalized = false;
  for (size_t i = 0; i < specs.size(); ++i) {
    const TransformSpec& spec = specs[i];
    const std::string entry = "transforms[" + std::to_string(i) + "] ";
    try {
      if (spec.name == "Normalize") {
        if (normalized) throw ConfigError("Normalize: given twice; keep one");
        const transforms::Arguments arguments(spec);
        for (const auto& [name, values] : spec.numbers) {
          if (name != "mean" && name != "std" && name != "inplace") {
            throw ConfigError("Normalize: unknown argument '" + name + "'; valid arguments: mean, std, inplace");
          }
        }
        if (!spec.words.empty()) {
          throw ConfigError("Normalize: unknown argument '" + spec.words.begin()->first +
                            "'; valid arguments: mean, std, inplace");
        }
        if (!arguments.has("mean") || !arguments.has("std")) {
          throw ConfigError("Normalize: needs mean and std (one value per channel)");
        }
        mean_ = arguments.numbers("mean", {}, {1, 3});
        std_ = arguments.numbers("std", {}, {mean_.size()});
        for (const double s : std_) {
          if (s <= 0) arguments.fail("std", "values must be > 0");
        }
        arguments.flag("inplace", false);
        normalized = true;
        continue;
      }
      std::unique_ptr<Transform> transform = make_transform(spec);
      if (transform->after_normalize()) {
        normalized = true;  // what follows works on normalised float images too
        float_stage_.push_back(std::move(transform));
        float_names_.push_back(spec.name);
      } else if (normalized) {
        throw ConfigError(spec.name + ": works on uint8 images, so it must come before Normalize and RandomErasing");
      } else {
        uint8_stage_.push_back(std::move(transform));
        uint8_names_.push_back(spec.name);
      }
    } catch (const ConfigError& error) {
      throw ConfigError(entry + error.what());
    }
  }
}

bool TransformPipeline::moves_pixels() const {
  for (const auto& transform : uint8_stage_) {
    if (transform->moves_pixels()) return true;
  }
  for (const auto& transform : float_stage_) {
    if (transform->moves_pixels()) return true;
  }
  return false;
}

std::vector<std::string> TransformPipeline::names() const {
  std::vector<std::string> names = uint8_names_;
  names.insert(names.end(), float_names_.begin(), float_names_.end());
  return names;
}

uint64_t transform_seed(uint64_t seed, int64_t epoch) {
  return (seed * 1000003ULL + static_cast<uint64_t>(epoch)) ^ 0x9E3779B97F4A7C15ULL;
}

std::array<int64_t, 2> TransformPipeline::output_size(int64_t h, int64_t w) const {
  std::array<int64_t, 2> size{h, w};
  for (const auto& transform : uint8_stage_) size = transform->output_size(size[0], size[1]);
  for (const auto& transform : float_stage_) size = transform->output_size(size[0], size[1]);
  return size;
}

std::vector<std::vector<at::Tensor>> TransformPipeline::sample(int64_t samples, int64_t h, int64_t w,
                                                               at::Generator& generator) const {
  std::vector<std::vector<at::Tensor>> params;
  std::array<int64_t, 2> size{h, w};
  for (const auto* stage : {&uint8_stage_, &float_stage_}) {
    for (const auto& transform : *stage) {
      params.push_back(transform->sample(samples, size[0], size[1], generator));
      size = transform->output_size(size[0], size[1]);
    }
  }
  return params;
}

at::Tensor TransformPipeline::apply(const at::Tensor& images, const std::vector<std::vector<at::Tensor>>& params,
                                    at::ScalarType dtype, at::Tensor& masks) const {
  const bool to_uint8 = dtype == at::kByte;
  if (to_uint8 && normalizes()) {
    throw ConfigError("a uint8 result needs a transforms list that does not normalise (no Normalize, no "
                      "RandomErasing, no mean/std given); ask for a float dtype instead");
  }
  if (to_uint8 && images.scalar_type() != at::kByte) {
    throw ConfigError("a uint8 result needs uint8 images, got " + std::string(c10::toString(images.scalar_type())));
  }
  for (size_t k = 0; k < uint8_stage_.size(); ++k) {
    if (images.scalar_type() != at::kByte && !uint8_stage_[k]->moves_pixels()) {
      throw ConfigError(uint8_names_[k] + ": works on uint8 images (0..255), got " +
                        std::string(c10::toString(images.scalar_type())) + " images; pass them as uint8");
    }
  }
  // Each uint8 transform's input size. The tail augment op runs two transforms itself: the last horizontal flip
  // when only pixel-wise (color) transforms follow it, as those commute with a flip exactly, and a same-size
  // RandomCrop that ends the stage or comes right before that flip at its end (augment crops, then flips).
  // A uint8 result has no augment op: every transform runs on its own.
  std::vector<std::array<int64_t, 2>> sizes{{images.size(2), images.size(3)}};
  for (const auto& transform : uint8_stage_) sizes.push_back(transform->output_size(sizes.back()[0], sizes.back()[1]));
  const auto part = [&](size_t k) { return transforms::augment_part(*uint8_stage_[k], sizes[k][0], sizes[k][1]); };
  std::vector<bool> in_augment(uint8_stage_.size(), false);
  at::Tensor offsets, flips;
  size_t last_moving = to_uint8 ? 0 : uint8_stage_.size();
  while (last_moving > 0 && !uint8_stage_[last_moving - 1]->moves_pixels()) --last_moving;
  size_t tail = to_uint8 ? 0 : uint8_stage_.size();  // the crop may fuse only if nothing it does not commute with follows it
  if (last_moving > 0 && part(last_moving - 1) == transforms::AugmentPart::kHorizontalFlip) {
    in_augment[last_moving - 1] = true;
    flips = params[last_moving - 1][1].select(1, 1);
    if (last_moving == tail) --tail;
  }
  if (tail > 0 && part(tail - 1) == transforms::AugmentPart::kCrop) {
    in_augment[tail - 1] = true;
    offsets = params[tail - 1][0];
  }

  at::Tensor x = images;
  size_t k = 0;
  for (; k < uint8_stage_.size(); ++k) {
    if (masks.defined() && uint8_stage_[k]->moves_pixels()) masks = uint8_stage_[k]->apply_to_mask(masks, params[k]);
    if (!in_augment[k]) x = uint8_stage_[k]->apply(x, params[k]);
  }
  if (to_uint8) return x;
  const int64_t n = x.size(0);
  const auto on_device = at::TensorOptions().device(x.device());
  if (!offsets.defined()) offsets = at::zeros({n, 2}, on_device.dtype(at::kLong));
  if (!flips.defined()) flips = at::zeros({n}, on_device.dtype(at::kBool));
  // torchvision's Normalize broadcasts one value over the channels; the augment op takes one per channel.
  const bool broadcast = mean_.size() == 1 && x.size(1) > 1;
  const std::vector<double> mean = broadcast ? std::vector<double>(x.size(1), mean_[0]) : mean_;
  const std::vector<double> std = broadcast ? std::vector<double>(x.size(1), std_[0]) : std_;
  x = ops::augment(x, offsets, flips, mean, std, dtype);
  for (const auto& transform : float_stage_) {
    if (masks.defined() && transform->moves_pixels()) masks = transform->apply_to_mask(masks, params[k]);
    x = transform->apply(x, params[k++]);
  }
  return x;
}

}  // namespace gpucore
