// The color ops' checks and their C++ entry points through the dispatcher.
#include "ops/augment/color.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "ops/color_math.h"

namespace gpucore::ops {

void check_color_ops_inputs(const at::Tensor& images, const at::Tensor& codes, const at::Tensor& magnitudes) {
  TORCH_CHECK(images.dim() == 4 && images.scalar_type() == at::kByte,
              "color_ops: images must be uint8 N x C x H x W, got ", images.scalar_type(), " ", images.sizes());
  TORCH_CHECK(images.size(1) == 1 || images.size(1) == 3, "color_ops: images must have 1 or 3 channels, got ",
              images.size(1));
  const int64_t n = images.size(0);
  TORCH_CHECK(codes.dim() == 2 && codes.size(0) == n && codes.scalar_type() == at::kLong,
              "color_ops: codes must be int64 N x K (N = ", n, "), got ", codes.scalar_type(), " ", codes.sizes());
  TORCH_CHECK(magnitudes.sizes() == codes.sizes() && magnitudes.scalar_type() == at::kDouble,
              "color_ops: magnitudes must be float64 of the codes' shape ", codes.sizes(), ", got ",
              magnitudes.scalar_type(), " ", magnitudes.sizes());
  TORCH_CHECK(codes.device() == images.device() && magnitudes.device() == images.device(),
              "color_ops: images, codes and magnitudes must be on one device");
}

void check_color_values(const at::Tensor& codes, const at::Tensor& magnitudes) {
  const at::Tensor code = codes.contiguous(), magnitude = magnitudes.contiguous();
  const int64_t* c = code.data_ptr<int64_t>();
  const double* m = magnitude.data_ptr<double>();
  for (int64_t i = 0; i < code.numel(); ++i) {
    TORCH_CHECK(c[i] >= 0 && c[i] < kColorOpCount, "color_ops: code ", c[i], " is not one of 0..",
                kColorOpCount - 1);
    const double v = m[i];
    switch (c[i]) {
      case kColorBrightness:
      case kColorContrast:
      case kColorSaturation:
      case kColorSharpness:
        TORCH_CHECK(v >= 0.0, "color_ops: the factor of code ", c[i], " must be >= 0, got ", v);
        break;
      case kColorHue:
        TORCH_CHECK(v >= -0.5 && v <= 0.5, "color_ops: the hue factor must be in [-0.5, 0.5], got ", v);
        break;
      case kColorPosterize:
        TORCH_CHECK(v >= 0.0 && v <= 8.0 && v == static_cast<double>(static_cast<int>(v)),
                    "color_ops: posterize's bits must be an integer in 0..8, got ", v);
        break;
      case kColorSolarize:
        TORCH_CHECK(v <= 255.0, "color_ops: solarize's threshold must be <= 255, got ", v);
        break;
      default:
        break;
    }
  }
}

void check_erase_inputs(const at::Tensor& images, const at::Tensor& boxes, const std::optional<at::Tensor>& fill,
                        const std::optional<at::Tensor>& noise_seeds) {
  TORCH_CHECK(images.dim() == 4 && images.is_floating_point(), "erase: images must be floating point N x C x H x W, got ",
              images.scalar_type(), " ", images.sizes());
  const int64_t n = images.size(0), channels = images.size(1);
  TORCH_CHECK(boxes.dim() == 2 && boxes.size(0) == n && boxes.size(1) == 4 && boxes.scalar_type() == at::kLong,
              "erase: boxes must be int64 N x 4 (N = ", n, "), got ", boxes.scalar_type(), " ", boxes.sizes());
  TORCH_CHECK(fill.has_value() != noise_seeds.has_value(), "erase: give exactly one of fill and noise_seeds");
  if (fill) {
    TORCH_CHECK(fill->dim() == 2 && fill->size(0) == n && fill->size(1) == channels && fill->scalar_type() == at::kFloat,
                "erase: fill must be float32 N x C (", n, " x ", channels, "), got ", fill->scalar_type(), " ",
                fill->sizes());
  }
  if (noise_seeds) {
    TORCH_CHECK(noise_seeds->dim() == 1 && noise_seeds->size(0) == n && noise_seeds->scalar_type() == at::kLong,
                "erase: noise_seeds must be int64 of length ", n, ", got ", noise_seeds->scalar_type(), " ",
                noise_seeds->sizes());
  }
  const at::Tensor& values = fill ? *fill : *noise_seeds;
  TORCH_CHECK(boxes.device() == images.device() && values.device() == images.device(),
              "erase: images, boxes and fill or noise_seeds must be on one device");
}

at::Tensor color_ops(const at::Tensor& images, const at::Tensor& codes, const at::Tensor& magnitudes) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gpucore::color_ops", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>();
  return op.call(images, codes, magnitudes);
}

at::Tensor erase(const at::Tensor& images, const at::Tensor& boxes, const std::optional<at::Tensor>& fill,
                 const std::optional<at::Tensor>& noise_seeds) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("gpucore::erase", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                            const std::optional<at::Tensor>&)>();
  return op.call(images, boxes, fill, noise_seeds);
}

// The schemas (kernels in cpu/ and cuda/; fake kernels in the Python module named here).
TORCH_LIBRARY_FRAGMENT(gpucore, m) {
  m.set_python_module("gpucore.ops");
  m.def("color_ops(Tensor images, Tensor codes, Tensor magnitudes) -> Tensor");
  m.def("erase(Tensor images, Tensor boxes, Tensor? fill, Tensor? noise_seeds) -> Tensor");
}

}  // namespace gpucore::ops
