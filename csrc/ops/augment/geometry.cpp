// The geometric ops' checks and their C++ entry points through the dispatcher.
#include "ops/augment/geometry.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

namespace gpucore::ops {
namespace {

void check_images(const char* op, const at::Tensor& images) {
  TORCH_CHECK(images.dim() == 4, op, ": images must be N x C x H x W, got ", images.dim(), "D");
  TORCH_CHECK(images.scalar_type() == at::kByte || images.scalar_type() == at::kFloat, op,
              ": images must be uint8 or float32, got ", images.scalar_type());
}

void check_per_sample(const char* op, const char* what, const at::Tensor& images, const at::Tensor& values,
                      at::ScalarType dtype, int64_t columns) {
  TORCH_CHECK(values.dim() == 2 && values.size(0) == images.size(0) && values.size(1) == columns &&
                  values.scalar_type() == dtype,
              op, ": ", what, " must be ", dtype, " N x ", columns, " (N = ", images.size(0), "), got ",
              values.scalar_type(), " ", values.sizes());
  TORCH_CHECK(values.device() == images.device(), op, ": images and ", what, " must be on one device");
}

void check_fill(const char* op, at::ArrayRef<double> fill, int64_t channels) {
  TORCH_CHECK(fill.size() <= 1 || static_cast<int64_t>(fill.size()) == channels, op,
              ": fill needs one value, one per channel (", channels, ") or none, got ", fill.size());
}

void check_interpolation(const char* op, const std::string& interpolation) {
  TORCH_CHECK(interpolation == "nearest" || interpolation == "bilinear", op,
              ": interpolation must be 'nearest' or 'bilinear', got '", interpolation, "'");
}

}  // namespace

void check_crop_inputs(const at::Tensor& images, const at::Tensor& offsets, const at::Tensor& flips,
                       at::IntArrayRef size, at::ArrayRef<double> fill) {
  check_images("crop", images);
  check_per_sample("crop", "offsets", images, offsets, at::kLong, 2);
  check_per_sample("crop", "flips", images, flips, at::kBool, 2);
  TORCH_CHECK(size.size() == 2 && size[0] > 0 && size[1] > 0, "crop: size must be (height, width) > 0, got ", size);
  check_fill("crop", fill, images.size(1));
}

void check_resized_crop_inputs(const at::Tensor& images, const at::Tensor& boxes, at::IntArrayRef size,
                               const std::string& interpolation) {
  check_images("resized_crop", images);
  check_per_sample("resized_crop", "boxes", images, boxes, at::kLong, 4);
  TORCH_CHECK(size.size() == 2 && size[0] > 0 && size[1] > 0, "resized_crop: size must be (height, width) > 0, got ",
              size);
  check_interpolation("resized_crop", interpolation);
}

void check_affine_inputs(const at::Tensor& images, const at::Tensor& matrices, const std::string& interpolation,
                         at::ArrayRef<double> fill) {
  check_images("affine", images);
  check_per_sample("affine", "matrices", images, matrices, at::kFloat, 6);
  check_interpolation("affine", interpolation);
  check_fill("affine", fill, images.size(1));
}

std::vector<float> fill_per_channel(at::ArrayRef<double> fill, int64_t channels) {
  std::vector<float> values(static_cast<size_t>(channels), 0.0f);
  for (int64_t c = 0; c < channels && !fill.empty(); ++c) {
    values[c] = static_cast<float>(fill.size() == 1 ? fill[0] : fill[c]);
  }
  return values;
}

at::Tensor crop(const at::Tensor& images, const at::Tensor& offsets, const at::Tensor& flips, at::IntArrayRef size,
                at::ArrayRef<double> fill) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("gpucore::crop", "").typed<at::Tensor(
      const at::Tensor&, const at::Tensor&, const at::Tensor&, at::IntArrayRef, at::ArrayRef<double>)>();
  return op.call(images, offsets, flips, size, fill);
}

at::Tensor resized_crop(const at::Tensor& images, const at::Tensor& boxes, at::IntArrayRef size,
                        const std::string& interpolation, bool antialias) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("gpucore::resized_crop", "").typed<at::Tensor(
      const at::Tensor&, const at::Tensor&, at::IntArrayRef, c10::string_view, bool)>();
  return op.call(images, boxes, size, interpolation, antialias);
}

at::Tensor affine(const at::Tensor& images, const at::Tensor& matrices, const std::string& interpolation,
                  at::ArrayRef<double> fill) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("gpucore::affine", "").typed<at::Tensor(
      const at::Tensor&, const at::Tensor&, c10::string_view, at::ArrayRef<double>)>();
  return op.call(images, matrices, interpolation, fill);
}

// The schemas (kernels in cpu/ and cuda/; fake kernels in the Python module named here).
TORCH_LIBRARY_FRAGMENT(gpucore, m) {
  m.set_python_module("gpucore.ops");
  m.def("crop(Tensor images, Tensor offsets, Tensor flips, int[] size, float[] fill) -> Tensor");
  m.def("resized_crop(Tensor images, Tensor boxes, int[] size, str interpolation, bool antialias) -> Tensor");
  m.def("affine(Tensor images, Tensor matrices, str interpolation, float[] fill) -> Tensor");
}

}  // namespace gpucore::ops
