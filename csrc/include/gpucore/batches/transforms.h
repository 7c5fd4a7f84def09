#pragma once
// Image transforms of the training batches, by torchvision.transforms.v2's names and arguments (config key
// `transforms`). Each transform draws its per-sample parameters on the host from gpucore's seeded per-epoch
// generator (so resuming stays bitwise) and applies them to a batch on the training device with gpucore's
// ops, without host syncs. The pipeline runs the uint8-stage transforms in list order, then Normalize and the
// cast to the batch dtype (the fused gpucore::augment op), then the float-stage ones.
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace gpucore {

struct TransformSpec {                                   // one entry of the list, arguments checked by name
  std::string name;                                      // torchvision's class name, e.g. "ColorJitter"
  std::map<std::string, std::vector<double>> numbers;    // numeric args; a scalar is one value, a pair two
  std::map<std::string, std::string> words;              // string args: interpolation, value="random"
};

class Transform {
 public:
  virtual ~Transform() = default;
  virtual bool is_random() const = 0;
  // uint8 stage (before Normalize) or float stage (after Normalize: RandomErasing)
  virtual bool after_normalize() const { return false; }
  virtual bool moves_pixels() const { return false; }  // geometric: masks follow (nearest)
  virtual std::array<int64_t, 2> output_size(int64_t h, int64_t w) const { return {h, w}; }
  // Whether output_size is one size whatever the input's (RandomResizedCrop, CenterCrop, RandomCrop, Resize to
  // (h, w)): such a transform brings images of mixed sizes to one.
  virtual bool one_output_size() const { return false; }
  // Per-sample parameters for `samples` samples of H x W images, drawn on the host from `generator`
  // (gpucore's seeded per-epoch generator), as host tensors whose first dimension is the sample.
  virtual std::vector<at::Tensor> sample(int64_t samples, int64_t h, int64_t w, at::Generator& generator) const = 0;
  // `images` N x C x H x W (uint8 in the uint8 stage, float after Normalize) on the training device;
  // `params`: sample()'s tensors, the rows of this batch's samples, on the same device. No host sync.
  virtual at::Tensor apply(const at::Tensor& images, const std::vector<at::Tensor>& params) const = 0;
  // Whether it resizes one box of its input per sample (Resize, RandomResizedCrop): its params are then {boxes N x 4
  // (top, left, height, width)}, and the box may be read on its own, reduced (PerImageSource::read_box).
  virtual bool resizes_box() const { return false; }
  // Such a transform on `region` (uint8 1 x C x h x w: the pixels of its box, reduced or not): the box resized to the
  // size it gives an input of input_height x input_width.
  virtual at::Tensor apply_to_region(const at::Tensor& region, int64_t input_height, int64_t input_width) const;
  // Geometric transforms only: the same geometry on an N x H x W integer mask, nearest, fill 0.
  virtual at::Tensor apply_to_mask(const at::Tensor& masks, const std::vector<at::Tensor>& params) const;
  // What validation and evaluation run instead of the entry `spec` that built this transform: the entry itself
  // when it is deterministic, nothing when it is random, unless a deterministic counterpart exists.
  virtual std::vector<TransformSpec> validation_form(const TransformSpec& spec) const;
};

// Registry: torchvision name -> factory; unknown names/arguments throw ConfigError listing what is valid.
std::unique_ptr<Transform> make_transform(const TransformSpec& spec);
std::vector<std::string> transform_names();  // every name the `transforms` list takes, Normalize included
// Each name with its arguments and their defaults as the docs show them (YAML text, "null" or "required"), by name.
std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> transform_arguments();
// The list's deterministic form for validation, evaluation and prediction: per entry, in list order, what replaces it
// (its validation_form; Normalize kept; empty: dropped).
std::vector<std::vector<TransformSpec>> validation_form(const std::vector<TransformSpec>& specs);

// The seed of the generator an epoch's transform parameters are drawn from: training (EpochBatches) draws sample
// i of the epoch's order as row i; gpucore.transforms.Compose draws a batch as rows 0..N-1.
uint64_t transform_seed(uint64_t seed, int64_t epoch);
// The seed of sample `sample`'s own generator, which the list's per-image transforms (TransformPipeline's
// per_image_count) draw from for images at their own sizes: `per_image_seed` is the first word of the epoch's
// generator.
uint64_t sample_seed(uint64_t per_image_seed, int64_t sample);

// Where the per-image transforms read one image from when it is not decoded yet (an image file): its upright size,
// and the pixels of the box the first per-image transform resizes (Transform::resizes_box), which a JPEG decodes
// alone and may reduce by DCT scaling to no less than the size the box is resized to.
class PerImageSource {
 public:
  virtual ~PerImageSource() = default;
  virtual std::array<int64_t, 2> size() = 0;
  virtual at::Tensor whole() = 0;  // uint8 H x W x C
  // uint8 h x w x C covering exactly the box (top, left, height, width), h x w at least least_height x least_width
  // where the box is (no less than the box where it is smaller).
  virtual at::Tensor read_box(const std::array<int64_t, 4>& box, int64_t least_height, int64_t least_width) = 0;
};

// The whole list as a batch transform. Normalize is not a Transform: its mean and std go to the fused
// augment op between the two stages; a list without one uses the data set's statistics when given.
class TransformPipeline {
 public:
  TransformPipeline() = default;
  // Checks every entry: a ConfigError names it as "transforms[i] Name: ...". `mean`/`std`: the
  // normalisation when the list has no Normalize (empty: none).
  TransformPipeline(const std::vector<TransformSpec>& specs, std::vector<double> mean, std::vector<double> std);

  bool moves_pixels() const;
  // Whether the result is normalised floats: a Normalize (or mean/std given) or a float-stage transform.
  bool normalizes() const { return !mean_.empty() || !float_stage_.empty(); }
  // The transforms' names in the order they run (sample()'s order): the uint8 stage, then the float stage.
  std::vector<std::string> names() const;
  const std::vector<double>& mean() const { return mean_; }
  const std::vector<double>& std() const { return std_; }
  // The output size of H x W images; 0 x 0: of images of any sizes, for a list with per-image transforms.
  std::array<int64_t, 2> output_size(int64_t h, int64_t w) const;
  // The per-image transforms: the list's first uint8-stage transforms up to the first of one output size
  // (RandomResizedCrop, CenterCrop, ...), which bring images of any size to one, as torchvision does one image at a
  // time; 0 when no transform does. For images at their own sizes (apply_per_image) their parameters are drawn per
  // sample, from the sample's own generator (sample_seed), so a sample's draws do not depend on the other samples'
  // sizes or on the thread that reads it; a batch of one size draws them with the others, from the epoch's generator.
  size_t per_image_count() const { return per_image_; }
  std::array<int64_t, 2> per_image_size() const;  // the per-image transforms' output size (needs some)
  // Every transform's parameters for `samples` samples of H x W input images, in list order. h = w = 0: the images
  // come at their own sizes through apply_per_image; the per-image transforms' entries are then empty, the others
  // are drawn for the per-image transforms' output size, and `per_image_seed` (when given) receives the seed of the
  // per-image draws (the generator's first word).
  std::vector<std::vector<at::Tensor>> sample(int64_t samples, int64_t h, int64_t w, at::Generator& generator,
                                              uint64_t* per_image_seed = nullptr) const;
  // One image (uint8 H x W x C on the host, any size) through the per-image transforms with sample `sample`'s
  // draws: uint8 C x h x w of their output size. Runs serially on the calling thread (reader threads).
  at::Tensor apply_per_image(const at::Tensor& image, uint64_t per_image_seed, int64_t sample) const;
  // The same, the image read from `source`: when the first per-image transform resizes a box, its draws are made on
  // the source's size (the same numbers as for the decoded image) and only that box is read; else all of it.
  at::Tensor apply_per_image(PerImageSource& source, uint64_t per_image_seed, int64_t sample) const;
  // The batch `images` (N x C x H x W, uint8 or float32) through the list, as `dtype`; `params`: sample()'s
  // rows of this batch's samples on the images' device. `masks` (N x H x W class ids, or undefined)
  // follow the geometric transforms. dtype uint8 (a uint8 batch in) needs a list that does not normalise;
  // a float32 batch (values in [0, 1]) takes only the transforms that move pixels before Normalize.
  // `per_image_done`: the images came through apply_per_image, which ran the per-image transforms.
  at::Tensor apply(const at::Tensor& images, const std::vector<std::vector<at::Tensor>>& params, at::ScalarType dtype,
                   at::Tensor& masks, bool per_image_done = false) const;

 private:
  // x (uint8 1 x C x H x W) through the per-image transforms from the k-th on, drawing from `own`.
  at::Tensor per_image_from(at::Tensor x, size_t k, at::Generator& own) const;

  std::vector<std::unique_ptr<Transform>> uint8_stage_, float_stage_;
  std::vector<std::string> uint8_names_, float_names_;
  std::vector<double> mean_, std_;
  size_t per_image_ = 0;
};

}  // namespace gpucore
