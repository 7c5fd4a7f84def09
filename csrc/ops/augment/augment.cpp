// The augment op's checks and its C++ entry point through the dispatcher.
#include "ops/augment/augment.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

namespace gpucore::ops {

void check_augment_inputs(const at::Tensor& images, const at::Tensor& offsets, const at::Tensor& flips,
                          const std::vector<double>& mean, const std::vector<double>& std) {
  TORCH_CHECK(images.dim() == 4, "augment: images must be N x C x H x W, got ", images.dim(), "D");
  TORCH_CHECK(images.scalar_type() == at::kByte || images.is_floating_point(),
              "augment: images must be uint8 or floating point, got ", images.scalar_type());
  const int64_t n = images.size(0), channels = images.size(1);
  TORCH_CHECK(offsets.dim() == 2 && offsets.size(0) == n && offsets.size(1) == 2 && offsets.scalar_type() == at::kLong,
              "augment: offsets must be int64 N x 2 (N = ", n, "), got ", offsets.scalar_type(), " ", offsets.sizes());
  TORCH_CHECK(flips.dim() == 1 && flips.size(0) == n && flips.scalar_type() == at::kBool,
              "augment: flips must be bool of length ", n, ", got ", flips.scalar_type(), " ", flips.sizes());
  TORCH_CHECK(offsets.device() == images.device() && flips.device() == images.device(),
              "augment: images, offsets and flips must be on one device");
  TORCH_CHECK(mean.size() == std.size() && (mean.empty() || static_cast<int64_t>(mean.size()) == channels),
              "augment: mean and std need one value per channel (", channels, ") or none, got ", mean.size(), " and ",
              std.size());
  for (const double s : std) TORCH_CHECK(s > 0, "augment: std values must be > 0, got ", s);
}

void augment_affine(const at::Tensor& images, const std::vector<double>& mean, const std::vector<double>& std,
                    std::vector<float>& scale, std::vector<float>& shift) {
  const int64_t channels = images.size(1);
  const double unit = images.scalar_type() == at::kByte ? 1.0 / 255.0 : 1.0;
  scale.assign(channels, static_cast<float>(unit));
  shift.assign(channels, 0.0f);
  for (size_t c = 0; c < mean.size(); ++c) {
    scale[c] = static_cast<float>(unit / std[c]);
    shift[c] = static_cast<float>(-mean[c] / std[c]);
  }
}

at::Tensor augment(const at::Tensor& images, const at::Tensor& offsets, const at::Tensor& flips,
                   const std::vector<double>& mean, const std::vector<double>& std, at::ScalarType dtype) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gpucore::augment", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                               at::ArrayRef<double>, at::ArrayRef<double>, at::ScalarType)>();
  return op.call(images, offsets, flips, mean, std, dtype);
}

// The schemas (kernels in cpu/ and cuda/; fake kernels in the Python module named here).
TORCH_LIBRARY_FRAGMENT(gpucore, m) {
  m.set_python_module("gpucore.ops");
  m.def("augment(Tensor images, Tensor offsets, Tensor flips, float[] mean, float[] std, ScalarType dtype) -> Tensor");
}

}  // namespace gpucore::ops
