// The `transforms` list as one batch transform: uint8 stage in list order, Normalize and the cast to the
// batch dtype in the fused augment op, float stage in list order; masks follow the geometric transforms.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/zeros.h>
#include <c10/util/ParallelGuard.h>

#include "batches/transforms/factories.h"
#include "gpucore/batches/transforms.h"
#include "gpucore/errors.h"
#include "ops/augment/augment.h"

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
  for (size_t k = 0; k < uint8_stage_.size(); ++k) {
    if (uint8_stage_[k]->one_output_size()) {
      per_image_ = k + 1;
      break;
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

uint64_t sample_seed(uint64_t per_image_seed, int64_t sample) {
  // splitmix64 of the sample's place in a Weyl sequence: well-spread seeds for neighbouring samples.
  uint64_t z = per_image_seed + 0x9E3779B97F4A7C15ULL * (static_cast<uint64_t>(sample) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::array<int64_t, 2> TransformPipeline::output_size(int64_t h, int64_t w) const {
  const bool own_sizes = h == 0 && w == 0 && per_image_ > 0;  // the per-image transforms' output, then the rest
  std::array<int64_t, 2> size = own_sizes ? per_image_size() : std::array<int64_t, 2>{h, w};
  size_t k = 0;
  for (const auto* stage : {&uint8_stage_, &float_stage_}) {
    for (const auto& transform : *stage) {
      if (k++ >= (own_sizes ? per_image_ : 0)) size = transform->output_size(size[0], size[1]);
    }
  }
  return size;
}

std::vector<std::vector<at::Tensor>> TransformPipeline::sample(int64_t samples, int64_t h, int64_t w,
                                                               at::Generator& generator, uint64_t* per_image_seed) const {
  const bool own_sizes = h == 0 && w == 0;
  if (own_sizes && per_image_ == 0) {
    throw ConfigError("images of mixed sizes need a transform that brings each to one size; start the transforms "
                      "list with RandomResizedCrop (training) or Resize + CenterCrop, or give the images one size");
  }
  // Images at their own sizes: the per-image transforms draw in apply_per_image, from each sample's own generator
  // seeded from the epoch generator's first word; the other transforms draw here, for their output size.
  uint64_t seed = 0;
  if (own_sizes) {
    const std::lock_guard<std::mutex> lock(generator.mutex());
    seed = at::check_generator<at::CPUGeneratorImpl>(generator)->random64();
  }
  if (per_image_seed != nullptr) *per_image_seed = seed;
  std::vector<std::vector<at::Tensor>> params(uint8_stage_.size() + float_stage_.size());
  std::array<int64_t, 2> size = own_sizes ? per_image_size() : std::array<int64_t, 2>{h, w};
  size_t k = 0;
  for (const auto* stage : {&uint8_stage_, &float_stage_}) {
    for (const auto& transform : *stage) {
      if (k++ < (own_sizes ? per_image_ : 0)) continue;
      params[k - 1] = transform->sample(samples, size[0], size[1], generator);
      size = transform->output_size(size[0], size[1]);
    }
  }
  return params;
}

std::array<int64_t, 2> TransformPipeline::per_image_size() const {
  if (per_image_ == 0) throw ConfigError("the transforms list has no per-image transforms");
  return uint8_stage_[per_image_ - 1]->output_size(1, 1);  // one size, whatever the input's
}

namespace {

// uint8 H x W x C as the transforms take it: 1 x C x H x W, contiguous.
at::Tensor planar(const at::Tensor& image) { return image.permute({2, 0, 1}).unsqueeze(0).contiguous(); }

// An image already in memory (a cached set's): its box is a view, so only the box is copied into the planar layout
// the transforms take, not the whole image (which then costs what the box's pixels cost, as a decoded file's does).
class InMemorySource final : public PerImageSource {
 public:
  explicit InMemorySource(const at::Tensor& image) : image_(image) {}
  std::array<int64_t, 2> size() override { return {image_.size(0), image_.size(1)}; }
  at::Tensor whole() override { return image_; }
  at::Tensor read_box(const std::array<int64_t, 4>& box, int64_t, int64_t) override {
    return image_.slice(0, box[0], box[0] + box[2]).slice(1, box[1], box[1] + box[3]);
  }

 private:
  at::Tensor image_;
};

}  // namespace

at::Tensor TransformPipeline::apply_per_image(const at::Tensor& image, uint64_t per_image_seed, int64_t sample) const {
  if (image.dim() != 3 || image.scalar_type() != at::kByte) {
    throw ConfigError("a per-image transform needs a uint8 H x W x C image, got " + c10::str(image.sizes()));
  }
  InMemorySource source(image);
  return apply_per_image(source, per_image_seed, sample);
}

at::Tensor TransformPipeline::apply_per_image(PerImageSource& source, uint64_t per_image_seed, int64_t sample) const {
  if (per_image_ == 0) throw ConfigError("the transforms list has no per-image transforms");
  const c10::ParallelGuard serial(true);  // reader threads: torch's kernels run on this thread alone
  at::Generator own = at::detail::createCPUGenerator(sample_seed(per_image_seed, sample));
  const Transform& first = *uint8_stage_[0];
  if (!first.resizes_box()) return per_image_from(planar(source.whole()), 0, own);
  // The first transform's draw on the image's own size, as on the whole image, then only its box read.
  const auto [height, width] = source.size();
  const at::Tensor boxes = first.sample(1, height, width, own)[0];
  const int64_t* box = boxes.data_ptr<int64_t>();
  const auto [least_height, least_width] = first.output_size(height, width);
  const at::Tensor region = source.read_box({box[0], box[1], box[2], box[3]}, least_height, least_width);
  return per_image_from(first.apply_to_region(planar(region), height, width), 1, own);
}

at::Tensor TransformPipeline::per_image_from(at::Tensor x, size_t k, at::Generator& own) const {
  for (; k < per_image_; ++k) {
    x = uint8_stage_[k]->apply(x, uint8_stage_[k]->sample(1, x.size(2), x.size(3), own));
  }
  return x[0];
}

at::Tensor TransformPipeline::apply(const at::Tensor& images, const std::vector<std::vector<at::Tensor>>& params,
                                    at::ScalarType dtype, at::Tensor& masks, bool per_image_done) const {
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
  // With per_image_done the batch starts after the per-image transforms: `first`.
  const size_t first = per_image_done ? per_image_ : 0;
  std::vector<std::array<int64_t, 2>> sizes(first + 1, {images.size(2), images.size(3)});
  for (size_t k = first; k < uint8_stage_.size(); ++k) {
    sizes.push_back(uint8_stage_[k]->output_size(sizes.back()[0], sizes.back()[1]));
  }
  const auto part = [&](size_t k) { return transforms::augment_part(*uint8_stage_[k], sizes[k][0], sizes[k][1]); };
  std::vector<bool> in_augment(uint8_stage_.size(), false);
  at::Tensor offsets, flips;
  size_t last_moving = to_uint8 ? 0 : uint8_stage_.size();
  while (last_moving > 0 && !uint8_stage_[last_moving - 1]->moves_pixels()) --last_moving;
  size_t tail = to_uint8 ? 0 : uint8_stage_.size();  // the crop may fuse only if nothing it does not commute with follows it
  if (last_moving > first && part(last_moving - 1) == transforms::AugmentPart::kHorizontalFlip) {
    in_augment[last_moving - 1] = true;
    flips = params[last_moving - 1][1].select(1, 1);
    if (last_moving == tail) --tail;
  }
  if (tail > first && part(tail - 1) == transforms::AugmentPart::kCrop) {
    in_augment[tail - 1] = true;
    offsets = params[tail - 1][0];
  }

  at::Tensor x = images;
  size_t k = first;
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
