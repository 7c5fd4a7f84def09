// CUDA side of the CAM ops: checks, float32 contiguous inputs, outputs, device guard and stream,
// then the kernels of cam_kernels.cu.
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "ops/cam/cam.h"
#include "ops/float_contiguous.h"
#include "ops/cuda/cam_kernels.h"
#include "ops/cuda/kernel_launch_check.h"

namespace gpucore::ops {
namespace {

cudaStream_t current_stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

at::Tensor cam_weights_cuda(const at::Tensor& activations, const at::Tensor& gradients, c10::string_view method) {
  check_weights_inputs(activations, gradients);
  const int method_index = static_cast<int>(parse_cam_method(std::string(method)));
  const c10::cuda::CUDAGuard guard(activations.device());
  const at::Tensor a = float_contiguous(activations), g = float_contiguous(gradients);
  at::Tensor out = at::empty({a.size(0), a.size(1)}, a.options());
  cuda::launch_cam_weights(a.data_ptr<float>(), g.data_ptr<float>(), out.data_ptr<float>(), a.size(0) * a.size(1),
                           a.size(2) * a.size(3), method_index, current_stream());
  check_kernel_launch("gpucore::cam_weights");
  return out;
}

at::Tensor cam_weighted_sum_cuda(const at::Tensor& activations, const at::Tensor& weights) {
  check_weighted_sum_inputs(activations, weights);
  const c10::cuda::CUDAGuard guard(activations.device());
  const at::Tensor a = float_contiguous(activations), w = float_contiguous(weights);
  at::Tensor out = at::empty({a.size(0), a.size(2), a.size(3)}, a.options());
  cuda::launch_cam_weighted_sum(a.data_ptr<float>(), w.data_ptr<float>(), out.data_ptr<float>(), a.size(0), a.size(1),
                                a.size(2) * a.size(3), w.dim() == 4, current_stream());
  check_kernel_launch("gpucore::cam_weighted_sum");
  return out;
}

at::Tensor cam_normalize_cuda(const at::Tensor& cams, at::IntArrayRef size) {
  check_normalize_inputs(cams, size);
  const c10::cuda::CUDAGuard guard(cams.device());
  const at::Tensor c = float_contiguous(cams);
  const int64_t out_h = size.empty() ? c.size(1) : size[0], out_w = size.empty() ? c.size(2) : size[1];
  at::Tensor out = at::empty({c.size(0), out_h, out_w}, c.options());
  cuda::launch_cam_normalize(c.data_ptr<float>(), out.data_ptr<float>(), c.size(0), c.size(1), c.size(2), out_h, out_w,
                             current_stream());
  check_kernel_launch("gpucore::cam_normalize");
  return out;
}

at::Tensor cam_overlay_cuda(const at::Tensor& images, const at::Tensor& cams, double alpha) {
  check_overlay_inputs(images, cams, alpha);
  const c10::cuda::CUDAGuard guard(images.device());
  const at::Tensor img = images.contiguous();
  const at::Tensor c = float_contiguous(cams);
  at::Tensor out = at::empty_like(img);
  cuda::launch_cam_overlay(img.data_ptr<uint8_t>(), c.data_ptr<float>(), out.data_ptr<uint8_t>(), img.size(0),
                           img.size(1) * img.size(2), static_cast<float>(alpha), current_stream());
  check_kernel_launch("gpucore::cam_overlay");
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(gpucore, CUDA, m) {
  m.impl("cam_weights", &cam_weights_cuda);
  m.impl("cam_weighted_sum", &cam_weighted_sum_cuda);
  m.impl("cam_normalize", &cam_normalize_cuda);
  m.impl("cam_overlay", &cam_overlay_cuda);
}

}  // namespace gpucore::ops
