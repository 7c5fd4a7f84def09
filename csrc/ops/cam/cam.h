#pragma once
// Grad-CAM math as torch ops (namespace gpucore), with CPU and CUDA kernels:
//
//   cam_weights(Tensor activations, Tensor gradients, str method) -> Tensor        (N, C)
//       method gradcam: mean gradient; gradcam++: Chattopadhyay et al. eq. 19 (eps 1e-6);
//       xgradcam: sum(g * A) / (sum(A) + 1e-7), all over each channel's H x W.
//   cam_weighted_sum(Tensor activations, Tensor weights) -> Tensor                 (N, H, W)
//       ReLU(sum over channels of weights * activations); weights (N, C) or elementwise (N, C, H, W).
//   cam_normalize(Tensor cams, int[] size) -> Tensor                               (N, H', W')
//       per image (x - min) / (max - min + 1e-7), then bilinear resize (align_corners=False) to
//       size = [H', W'] (empty: no resize). The conventions of pytorch-grad-cam's scale_cam_image.
//   cam_overlay(Tensor images, Tensor cams, float alpha) -> Tensor                 uint8 (N, H, W, 3)
//       images uint8 RGB (N, H, W, 3); JET(uint8(255 * cam)) blended with weight alpha, divided by
//       each image's maximum, as pytorch-grad-cam's show_cam_on_image.
//
// All computation is float32 whatever the input dtype. Inputs are checked here, once for every device.
#include <ATen/core/Tensor.h>

#include <string>

namespace gpucore::ops {

enum class CamMethod { kGradCam, kGradCamPlusPlus, kXGradCam };
CamMethod parse_cam_method(const std::string& method);

void check_weights_inputs(const at::Tensor& activations, const at::Tensor& gradients);
void check_weighted_sum_inputs(const at::Tensor& activations, const at::Tensor& weights);
void check_normalize_inputs(const at::Tensor& cams, at::IntArrayRef size);
void check_overlay_inputs(const at::Tensor& images, const at::Tensor& cams, double alpha);

}  // namespace gpucore::ops
