#pragma once
// SGD (momentum, Nesterov), Adam and AdamW on the fused ATen kernels (CPU and CUDA). A step takes
// the learning rate and found_inf as device tensors, so it never synchronises with the host and
// skips itself when found_inf is 1.
#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace gpucore {

enum class OptimizerKind { kSGD, kAdam, kAdamW };
std::vector<std::string> optimizer_names();
OptimizerKind parse_optimizer(const std::string& name);  // "sgd", "adam", "adamw"
std::string to_string(OptimizerKind kind);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kAdamW;
  double momentum = 0.9;  // SGD
  bool nesterov = false;  // SGD
  double beta1 = 0.9;     // Adam(W)
  double beta2 = 0.999;
  double eps = 1e-8;
};

struct ParamGroup {
  std::vector<at::Tensor> params;
  double weight_decay = 0.01;  // config key weight_decay's default; the group without decay sets 0
  // The group's learning rate is the step's lr times this (> 0): a fine-tuned backbone trains slower
  // than its new head. Applied on the device, so a step still never synchronises with the host.
  double lr_scale = 1.0;
};

class FusedOptimizer {
 public:
  FusedOptimizer(std::vector<ParamGroup> groups, OptimizerConfig config);

  // Updates every parameter that has a gradient (a frozen one, requires_grad=False, has none and keeps
  // its value and state). lr: 0-dim float32 on the parameters' device, scaled by each group's lr_scale;
  // found_inf: 0-dim float32, 1 to skip the step (state untouched).
  void step(const at::Tensor& lr, const at::Tensor& found_inf);

  // Optimizer state by flat parameter index: "{i}.exp_avg", "{i}.exp_avg_sq", "{i}.step",
  // "{i}.momentum_buffer". Tensors are the live ones (clone to snapshot).
  std::vector<std::pair<std::string, at::Tensor>> state() const;
  // Copies saved state in; throws ConfigError naming a missing or mis-shaped entry.
  void load_state(const std::vector<std::pair<std::string, at::Tensor>>& state);

  const std::vector<ParamGroup>& groups() const { return groups_; }

 private:
  struct ParamState {
    at::Tensor exp_avg, exp_avg_sq, step, momentum_buffer;
  };
  std::vector<ParamGroup> groups_;
  OptimizerConfig config_;
  std::vector<std::vector<ParamState>> state_;  // per group, per parameter
};

}  // namespace gpucore
