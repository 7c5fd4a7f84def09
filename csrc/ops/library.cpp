// The gpucore op library: every schema, in the one TORCH_LIBRARY block the dispatcher allows per
// namespace. What each op computes is documented in cam.h and augment.h; the CPU and CUDA kernels
// register themselves with TORCH_LIBRARY_IMPL in cpu/ and cuda/.
#include <torch/library.h>

TORCH_LIBRARY(gpucore, m) {
  m.def("augment(Tensor images, Tensor offsets, Tensor flips, int padding, float[] mean, float[] std, "
        "ScalarType dtype) -> Tensor");
  m.def("cam_weights(Tensor activations, Tensor gradients, str method) -> Tensor");
  m.def("cam_weighted_sum(Tensor activations, Tensor weights) -> Tensor");
  m.def("cam_normalize(Tensor cams, int[] size) -> Tensor");
  m.def("cam_overlay(Tensor images, Tensor cams, float alpha) -> Tensor");
}
