// The checks shared by the CPU and CUDA kernels of the CAM ops.
#include "ops/cam/cam.h"

#include <c10/util/Exception.h>
#include <torch/library.h>

#include "gpucore/choices.h"
#include "gpucore/errors.h"

namespace gpucore::ops {

CamMethod parse_cam_method(const std::string& method) {
  return parse_choice<CamMethod>("cam_weights method", method,
                                 {{"gradcam", CamMethod::kGradCam},
                                  {"gradcam++", CamMethod::kGradCamPlusPlus},
                                  {"xgradcam", CamMethod::kXGradCam}});
}

void check_weights_inputs(const at::Tensor& activations, const at::Tensor& gradients) {
  TORCH_CHECK(activations.dim() == 4, "cam_weights: activations must be N x C x H x W, got ", activations.dim(), "D");
  TORCH_CHECK(activations.sizes() == gradients.sizes(), "cam_weights: gradients ", gradients.sizes(),
              " must match activations ", activations.sizes());
  TORCH_CHECK(activations.device() == gradients.device(), "cam_weights: activations on ", activations.device(),
              ", gradients on ", gradients.device());
  TORCH_CHECK(activations.is_floating_point() && gradients.is_floating_point(),
              "cam_weights: activations and gradients must be floating point");
}

void check_weighted_sum_inputs(const at::Tensor& activations, const at::Tensor& weights) {
  TORCH_CHECK(activations.dim() == 4, "cam_weighted_sum: activations must be N x C x H x W, got ", activations.dim(), "D");
  const bool per_channel = weights.dim() == 2 && weights.size(0) == activations.size(0) &&
                           weights.size(1) == activations.size(1);
  TORCH_CHECK(per_channel || weights.sizes() == activations.sizes(), "cam_weighted_sum: weights must be N x C (",
              activations.size(0), " x ", activations.size(1), ") or match activations ", activations.sizes(), ", got ",
              weights.sizes());
  TORCH_CHECK(activations.device() == weights.device(), "cam_weighted_sum: activations on ", activations.device(),
              ", weights on ", weights.device());
}

void check_normalize_inputs(const at::Tensor& cams, at::IntArrayRef size) {
  TORCH_CHECK(cams.dim() == 3, "cam_normalize: cams must be N x H x W, got ", cams.dim(), "D");
  TORCH_CHECK(cams.size(1) > 0 && cams.size(2) > 0, "cam_normalize: empty cams ", cams.sizes());
  TORCH_CHECK(size.empty() || (size.size() == 2 && size[0] > 0 && size[1] > 0),
              "cam_normalize: size must be [] or [height, width] > 0, got ", size);
}

void check_overlay_inputs(const at::Tensor& images, const at::Tensor& cams, double alpha) {
  TORCH_CHECK(images.dim() == 4 && images.size(3) == 3 && images.scalar_type() == at::kByte,
              "cam_overlay: images must be uint8 N x H x W x 3 (RGB), got ", images.scalar_type(), " ", images.sizes());
  TORCH_CHECK(cams.dim() == 3 && cams.size(0) == images.size(0) && cams.size(1) == images.size(1) &&
                  cams.size(2) == images.size(2),
              "cam_overlay: cams ", cams.sizes(), " must be N x H x W of the images ", images.sizes());
  TORCH_CHECK(images.device() == cams.device(), "cam_overlay: images on ", images.device(), ", cams on ", cams.device());
  TORCH_CHECK(alpha >= 0.0 && alpha <= 1.0, "cam_overlay: alpha must be in [0, 1], got ", alpha);
}

// The schemas (kernels in cpu/ and cuda/; fake kernels in the Python module named here).
TORCH_LIBRARY_FRAGMENT(gpucore, m) {
  m.set_python_module("gpucore.ops");
  m.def("cam_weights(Tensor activations, Tensor gradients, str method) -> Tensor");
  m.def("cam_weighted_sum(Tensor activations, Tensor weights) -> Tensor");
  m.def("cam_normalize(Tensor cams, int[] size) -> Tensor");
  m.def("cam_overlay(Tensor images, Tensor cams, float alpha) -> Tensor");
}

}  // namespace gpucore::ops
