#pragma once
// Inside the transforms registry: what the geometric (geometric.cpp), photometric (color.cpp, erasing.cpp) and
// auto-augment (auto_augment.cpp) transforms share to draw and express their parameters.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/DistributionsHelper.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>

#include "train/transforms/factories.h"

namespace gpucore::transforms {

// Scalar draws from the per-epoch generator, holding its lock (one sample's parameters after another).
class Draws {
 public:
  explicit Draws(at::Generator& generator)
      : generator_(at::check_generator<at::CPUGeneratorImpl>(generator)), lock_(generator.mutex()) {}
  double uniform(double low, double high) {  // torch.empty(1).uniform_(low, high)
    if (low == high) return low;
    at::uniform_real_distribution<double> draw(low, high);
    return draw(generator_);
  }
  int64_t below(int64_t high) {  // torch.randint(0, high)
    at::uniform_int_from_to_distribution<int64_t> draw(static_cast<uint64_t>(high), 0);
    return draw(generator_);
  }

 private:
  at::CPUGeneratorImpl* generator_;
  std::lock_guard<std::mutex> lock_;
};

// Python's round(): half to even.
inline int64_t round_half_even(double value) { return static_cast<int64_t>(std::nearbyint(value)); }

// The `interpolation` argument: nearest or bilinear, the resampling gpucore's ops have (geometric.cpp).
std::string interpolation_of(const Arguments& arguments, const std::string& fallback);

}  // namespace gpucore::transforms
