#pragma once
// Mixup and CutMix of a batch with its reversed order (timm's x.flip(0)) as two torch ops (namespace gpucore),
// CPU and CUDA kernels:
//
//   mix_inputs(Tensor inputs, Tensor params) -> Tensor
//   mix_targets(Tensor targets, Tensor params, int num_classes, float smoothing) -> Tensor
//
// params: float32 (N, kMixParams) on the batch's device, one row per sample i, whose partner is p = N - 1 - i:
//   [input weight of i, input weight of p, target weight of i, target weight of p, y0, y1, x0, x1].
// mix_inputs: floating-point inputs N x C x H x W (N x H x W and N x D count as C = 1 and H = 1), any memory
// format; out[i] = in[i] * w_i + in[p] * w_p inside the box [y0, y1) x [x0, x1), in[i] outside; the result in
// the inputs' dtype and layout. Mixup is the whole image as the box, CutMix weights 0 and 1 inside its box.
// mix_targets: integer class indices (N) in [0, num_classes); out (N, num_classes) float32 =
//   one_hot(t_i) * tw_i + one_hot(t_p) * tw_p, with one_hot's on = 1 - smoothing + smoothing / num_classes and
//   off = smoothing / num_classes (timm's mixup_target). A class outside the range is an error on the CPU and
//   a row without its share on CUDA (checking there would cost a host sync).
// The draws come in as a tensor (gpucore::MixupConfig draws them on the host), so both ops are pure functions.
#include <ATen/core/Tensor.h>

#include "ops/mix_params.h"

namespace gpucore::ops {

void check_mix_params(const at::Tensor& batch, const at::Tensor& params, const char* op);
// The inputs as N x C x H x W: a view with the missing dims of size 1.
at::Tensor mix_images_view(const at::Tensor& inputs);
void check_mix_targets(const at::Tensor& targets, const at::Tensor& params, int64_t num_classes, double smoothing);

// Call the ops through the dispatcher (CPU or CUDA kernel by the batch's device).
at::Tensor mix_inputs(const at::Tensor& inputs, const at::Tensor& params);
at::Tensor mix_targets(const at::Tensor& targets, const at::Tensor& params, int64_t num_classes, double smoothing);

}  // namespace gpucore::ops
