#include "gpucore/train/optimizer.h"

#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/_fused_sgd.h>
#include <ATen/ops/rsub.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "gpucore/choices.h"
#include "gpucore/errors.h"

namespace gpucore {

namespace {

const Choices<OptimizerKind> kOptimizers = {
    {"sgd", OptimizerKind::kSGD}, {"adam", OptimizerKind::kAdam}, {"adamw", OptimizerKind::kAdamW}};

}  // namespace

OptimizerKind parse_optimizer(const std::string& name) { return parse_choice("optimizer", name, kOptimizers); }
std::string to_string(OptimizerKind kind) { return choice_name(kind, kOptimizers); }
std::vector<std::string> optimizer_names() { return choice_names(kOptimizers); }

FusedOptimizer::FusedOptimizer(std::vector<ParamGroup> groups, OptimizerConfig config)
    : groups_(std::move(groups)), config_(config) {
  const bool adam = config_.kind != OptimizerKind::kSGD;
  std::optional<at::Device> device;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const double lr_scale = groups_[g].lr_scale;
    if (!(lr_scale > 0.0) || !std::isfinite(lr_scale)) {
      throw ConfigError("optimizer: parameter group " + std::to_string(g) + " has lr_scale " + c10::str(lr_scale) +
                        "; it must be a finite number > 0");
    }
    std::vector<ParamState> states;
    for (const auto& param : groups_[g].params) {
      if (!param.is_floating_point()) {
        throw ConfigError("optimizer: parameter group " + std::to_string(g) + " holds a non-floating-point tensor (" +
                          std::string(c10::toString(param.scalar_type())) + ")");
      }
      if (device && *device != param.device()) {
        throw ConfigError("optimizer: parameters live on several devices (" + device->str() + " and " +
                          param.device().str() + "); move the model to one device");
      }
      device = param.device();
      ParamState state;
      if (adam) {
        state.exp_avg = at::zeros_like(param, at::MemoryFormat::Preserve);
        state.exp_avg_sq = at::zeros_like(param, at::MemoryFormat::Preserve);
        // The fused kernels read the step count from a float32 tensor next to the parameter.
        state.step = at::zeros({}, param.options().dtype(at::kFloat));
      } else if (config_.momentum != 0.0) {
        state.momentum_buffer = at::zeros_like(param, at::MemoryFormat::Preserve);
      }
      states.push_back(std::move(state));
    }
    state_.push_back(std::move(states));
  }
}

void FusedOptimizer::step(const at::Tensor& lr, const at::Tensor& found_inf) {
  // Groups with the same weight decay and lr scale go through one fused call: fewer ops per step.
  struct Batch {
    double weight_decay, lr_scale;
    std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps, buffers;
  };
  std::vector<Batch> batches;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const double weight_decay = groups_[g].weight_decay, lr_scale = groups_[g].lr_scale;
    auto batch = std::find_if(batches.begin(), batches.end(), [&](const Batch& b) {
      return b.weight_decay == weight_decay && b.lr_scale == lr_scale;
    });
    if (batch == batches.end()) {
      batch = batches.insert(batches.end(), Batch());
      batch->weight_decay = weight_decay;
      batch->lr_scale = lr_scale;
    }
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const at::Tensor& param = groups_[g].params[i];
      if (!param.grad().defined()) continue;
      const ParamState& state = state_[g][i];
      batch->params.push_back(param);
      batch->grads.push_back(param.grad());
      if (state.exp_avg.defined()) {
        batch->exp_avgs.push_back(state.exp_avg);
        batch->exp_avg_sqs.push_back(state.exp_avg_sq);
        batch->steps.push_back(state.step);
      }
      if (state.momentum_buffer.defined()) batch->buffers.push_back(state.momentum_buffer);
    }
  }
  at::Tensor taken;  // 1 when the step happens, 0 when skipped (Adam's step counts)
  for (Batch& batch : batches) {
    if (batch.params.empty()) continue;
    const at::Tensor group_lr = batch.lr_scale == 1.0 ? lr : at::mul(lr, batch.lr_scale);
    switch (config_.kind) {
      case OptimizerKind::kAdamW:
      case OptimizerKind::kAdam: {
        if (!taken.defined()) taken = at::rsub(found_inf, 1);
        at::_foreach_add_(batch.steps, taken);  // a skipped step leaves the bias correction as it was
        using FusedAdam = void (*)(at::TensorList, at::TensorList, at::TensorList, at::TensorList, at::TensorList,
                                   at::TensorList, const at::Tensor&, double, double, double, double, bool, bool,
                                   const std::optional<at::Tensor>&, const std::optional<at::Tensor>&);
        const FusedAdam fused = config_.kind == OptimizerKind::kAdamW ? FusedAdam(&at::_fused_adamw_) : FusedAdam(&at::_fused_adam_);
        fused(batch.params, batch.grads, batch.exp_avgs, batch.exp_avg_sqs, {}, batch.steps, group_lr, config_.beta1,
              config_.beta2, batch.weight_decay, config_.eps, /*amsgrad=*/false, /*maximize=*/false,
              /*grad_scale=*/std::nullopt, found_inf);
        break;
      }
      case OptimizerKind::kSGD:
        // Buffers start at zero, so with no dampening the first step gives buffer = grad, exactly
        // what is_first_step would do, and a skipped first step needs no special case.
        at::_fused_sgd_(batch.params, batch.grads, batch.buffers, batch.weight_decay, config_.momentum, group_lr,
                        /*dampening=*/0.0, config_.nesterov, /*maximize=*/false, /*is_first_step=*/false, std::nullopt,
                        found_inf);
        break;
    }
  }
}

std::vector<std::pair<std::string, at::Tensor>> FusedOptimizer::state() const {
  std::vector<std::pair<std::string, at::Tensor>> entries;
  size_t index = 0;
  for (const auto& group : state_) {
    for (const auto& state : group) {
      const std::string prefix = std::to_string(index++) + ".";
      if (state.exp_avg.defined()) {
        entries.emplace_back(prefix + "exp_avg", state.exp_avg);
        entries.emplace_back(prefix + "exp_avg_sq", state.exp_avg_sq);
        entries.emplace_back(prefix + "step", state.step);
      }
      if (state.momentum_buffer.defined()) entries.emplace_back(prefix + "momentum_buffer", state.momentum_buffer);
    }
  }
  return entries;
}

void FusedOptimizer::load_state(const std::vector<std::pair<std::string, at::Tensor>>& saved) {
  std::map<std::string, at::Tensor> by_name(saved.begin(), saved.end());
  for (auto& [name, live] : state()) {
    const auto it = by_name.find(name);
    if (it == by_name.end()) {
      throw ConfigError("optimizer state has no entry '" + name +
                        "': the checkpoint was written for another model or optimizer");
    }
    if (it->second.sizes() != live.sizes()) {
      throw ConfigError("optimizer state '" + name + "' has shape " + c10::str(it->second.sizes()) +
                        " in the checkpoint but " + c10::str(live.sizes()) + " here: another model?");
    }
    at::Tensor target = live;
    target.copy_(it->second);
  }
}

}  // namespace gpucore
