#pragma once
// Inside the transforms registry: what the photometric transforms (color_transforms.cpp) and the auto-augment policies
// (auto_augment.cpp) share.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "batches/transforms/sampling.h"

namespace gpucore::transforms {

// A transform whose params are {codes, magnitudes} for gpucore::color_ops.
class ColorOpsTransform : public Transform {
 public:
  at::Tensor apply(const at::Tensor& images, const std::vector<at::Tensor>& params) const override;
};

// Host tensors of color_ops steps, samples x steps, every step the identity until set.
struct ColorSteps {
  ColorSteps(int64_t samples, int64_t steps);
  void set(int64_t index, int64_t code, double magnitude);  // index = sample * steps + step
  at::Tensor codes, magnitudes;

 private:
  int64_t* code_;
  double* magnitude_;
};

// A _RandomApplyTransform's p: in [0, 1].
double probability(const Arguments& arguments, double fallback);

}  // namespace gpucore::transforms
