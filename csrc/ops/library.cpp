// The gpucore op library: every schema, in the one TORCH_LIBRARY block the dispatcher allows per
// namespace. What each op computes is documented in cam.h, augment.h, color.h, geometry.h, mixup.h,
// train_step.h and ema.h; the CPU and CUDA kernels register themselves with TORCH_LIBRARY_IMPL in cpu/ and cuda/.
#include <torch/library.h>

TORCH_LIBRARY(gpucore, m) {
  m.def("augment(Tensor images, Tensor offsets, Tensor flips, int padding, float[] mean, float[] std, "
        "ScalarType dtype) -> Tensor");
  m.def("mix_inputs(Tensor inputs, Tensor params) -> Tensor");
  m.def("mix_targets(Tensor targets, Tensor params, int num_classes, float smoothing) -> Tensor");
  m.def("color_ops(Tensor images, Tensor codes, Tensor magnitudes) -> Tensor");
  m.def("erase(Tensor images, Tensor boxes, Tensor? fill, Tensor? noise_seeds) -> Tensor");
  m.def("crop(Tensor images, Tensor offsets, Tensor flips, int[] size, float[] fill) -> Tensor");
  m.def("resized_crop(Tensor images, Tensor boxes, int[] size, str interpolation, bool antialias) -> Tensor");
  m.def("affine(Tensor images, Tensor matrices, str interpolation, float[] fill) -> Tensor");
  m.def("cam_weights(Tensor activations, Tensor gradients, str method) -> Tensor");
  m.def("cam_weighted_sum(Tensor activations, Tensor weights) -> Tensor");
  m.def("cam_normalize(Tensor cams, int[] size) -> Tensor");
  m.def("cam_overlay(Tensor images, Tensor cams, float alpha) -> Tensor");
  m.def("accumulate_metrics(Tensor(a!) sums, Tensor output, Tensor? target, Tensor loss, int top_k) -> ()");
  m.def("count_step(Tensor(a!) counters, Tensor(b!) found_inf) -> ()");
  m.def("learning_rate(Tensor step, Tensor(a!) lr, str schedule, float base_lr, int warmup_steps, int total_steps, "
        "int step_size, float gamma, int[] milestones, float min_lr, float pct_start, float div_factor, "
        "float final_div_factor) -> ()");
  m.def("next_indices(Tensor order, Tensor(a!) cursor, Tensor(b!) index) -> ()");
  m.def("ema_update(Tensor(a!)[] averages, Tensor[] sources, Tensor counters, float decay, bool warmup, "
        "float warmup_gamma, float warmup_power) -> ()");
}
