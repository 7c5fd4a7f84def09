#pragma once
// Inside the transforms registry: what the geometric (geometric_transforms.cpp), photometric (color_transforms.cpp, erasing.cpp) and
// auto-augment (auto_augment.cpp) transforms share to draw and express their parameters.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/DistributionsHelper.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/full.h>
#include <ATen/ops/log.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>

#include "batches/transforms/factories.h"

namespace gpucore::transforms {

// Scalar draws from the per-epoch generator, holding its lock (one sample's parameters after another), each as
// torchvision draws it: torch.empty(1).uniform_(low, high) and torch.rand(1) are float32 tensors, so a draw is a
// float32 (from one 32-bit word) returned as a double; a fixed range (low == high) still takes its word and gives
// float32(low), e.g. 1.2999999523 for 1.3, as torchvision's parameter is.
class Draws {
 public:
  explicit Draws(at::Generator& generator)
      : generator_(at::check_generator<at::CPUGeneratorImpl>(generator)), lock_(generator.mutex()) {}
  double uniform(double low, double high) {  // torch.empty(1).uniform_(low, high).item()
    at::uniform_real_distribution<float> draw(static_cast<float>(low), static_cast<float>(high));
    return static_cast<float>(draw(generator_));
  }
  // torch.exp(torch.empty(1).uniform_(low, high)).item(): the exp through torch's own kernel, whose float32
  // rounding depends on the CPU's vector unit (SLEEF or the C library).
  double exp_uniform(double low, double high) {
    return at::exp(at::full({1}, uniform(low, high), at::TensorOptions().dtype(at::kFloat))).item<float>();
  }
  int64_t below(int64_t high) {  // torch.randint(0, high)
    at::uniform_int_from_to_distribution<int64_t> draw(static_cast<uint64_t>(high), 0);
    return draw(generator_);
  }

 private:
  at::CPUGeneratorImpl* generator_;
  std::lock_guard<std::mutex> lock_;
};

// torch.log(torch.tensor([low, high])) as torchvision computes an aspect-ratio range's logarithms: float32,
// through torch's kernel.
inline std::pair<double, double> float32_log(std::pair<double, double> range) {
  at::Tensor values = at::empty({2}, at::TensorOptions().dtype(at::kFloat));
  values.data_ptr<float>()[0] = static_cast<float>(range.first);
  values.data_ptr<float>()[1] = static_cast<float>(range.second);
  const at::Tensor logs = at::log(values);
  return {logs.data_ptr<float>()[0], logs.data_ptr<float>()[1]};
}

// Python's round(): half to even.
inline int64_t round_half_even(double value) { return static_cast<int64_t>(std::nearbyint(value)); }

// The `interpolation` argument: nearest or bilinear, the resampling gpucore's ops have (geometric_transforms.cpp).
std::string interpolation_of(const Arguments& arguments, const std::string& fallback);

}  // namespace gpucore::transforms
