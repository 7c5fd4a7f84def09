// The mix ops' checks and their C++ entry points through the dispatcher.
#include "ops/augment/mixup.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "gpucore/ranges.h"

namespace gpucore::ops {

void check_mix_params(const at::Tensor& batch, const at::Tensor& params, const char* op) {
  TORCH_CHECK(batch.dim() >= 1, op, ": the batch needs a batch dimension");
  TORCH_CHECK(params.dim() == 2 && params.size(0) == batch.size(0) && params.size(1) == kMixParams &&
                  params.scalar_type() == at::kFloat,
              op, ": params must be float32 N x ", kMixParams, " (N = ", batch.size(0), "), got ",
              params.scalar_type(), " ", params.sizes());
  TORCH_CHECK(params.device() == batch.device(), op, ": the batch and params must be on one device");
}

at::Tensor mix_images_view(const at::Tensor& inputs) {
  TORCH_CHECK(inputs.is_floating_point(), "mix_inputs: inputs must be floating point, got ", inputs.scalar_type());
  TORCH_CHECK(inputs.dim() >= 1 && inputs.dim() <= 4, "mix_inputs: inputs must be N x C x H x W, N x H x W, N x D "
              "or N, got ", inputs.dim(), "D");
  at::Tensor images = inputs;
  while (images.dim() < 4) images = images.unsqueeze(1);
  return images;
}

void check_mix_targets(const at::Tensor& targets, const at::Tensor& params, int64_t num_classes, double smoothing) {
  TORCH_CHECK(targets.dim() == 1 && !targets.is_floating_point() && targets.scalar_type() != at::kBool,
              "mix_targets: targets must be N integer class indices, got ", targets.scalar_type(), " ",
              targets.sizes());
  check_mix_params(targets, params, "mix_targets");
  TORCH_CHECK(num_classes >= 1, "mix_targets: num_classes must be >= 1, got ", num_classes);
  ranges::kLabelSmoothing.range.check("mix_targets: smoothing", smoothing);
}

at::Tensor mix_inputs(const at::Tensor& inputs, const at::Tensor& params) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gpucore::mix_inputs", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
  return op.call(inputs, params);
}

at::Tensor mix_targets(const at::Tensor& targets, const at::Tensor& params, int64_t num_classes, double smoothing) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gpucore::mix_targets", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, double)>();
  return op.call(targets, params, num_classes, smoothing);
}

// The schemas (kernels in cpu/ and cuda/; fake kernels in the Python module named here).
TORCH_LIBRARY_FRAGMENT(gpucore, m) {
  m.set_python_module("gpucore.ops");
  m.def("mix_inputs(Tensor inputs, Tensor params) -> Tensor");
  m.def("mix_targets(Tensor targets, Tensor params, int num_classes, float smoothing) -> Tensor");
}

}  // namespace gpucore::ops
