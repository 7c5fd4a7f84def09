#pragma once
// The training step, kept on the device so that the host waits for it only at log intervals:
// forward under autocast, loss / window length, scaled backward; after the last micro-batch of a
// window: non-finite check and unscale, clipping, fused optimizer step that skips itself on
// non-finite gradients, scale update, schedule advanced only by taken steps. Loss and metrics
// accumulate on the device; the host reads them at log intervals.
#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpucore/batches/batches.h"
#include "gpucore/train/ema.h"
#include "gpucore/train/grad_scaler.h"
#include "gpucore/train/losses.h"
#include "gpucore/train/metrics.h"
#include "gpucore/train/mixup.h"
#include "gpucore/train/optimizer.h"
#include "gpucore/train/schedule.h"
#include "gpucore/train/step_graph.h"

namespace gpucore {

struct EngineConfig {
  at::Device device = at::kCPU;
  std::optional<at::ScalarType> autocast_dtype;  // bfloat16 or float16; nullopt: no autocast
  at::ScalarType param_dtype = at::kFloat;       // float32 or float64; floating-point inputs are cast to it
  int64_t accumulate_grad_batches = 1;           // micro-batches per optimizer step
  double clip_grad_norm = 0.0;                   // 0: off
  double clip_grad_value = 0.0;                  // 0: off
  bool channels_last = false;
  int64_t log_every_n_steps = 50;                // optimizer steps between host reads
  int64_t max_nonfinite_steps = 20;              // skipped steps in a row before a TrainingError
  int64_t top_k = 5;
  LossConfig loss;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  GradScalerConfig scaler;
  MixupConfig mixup;  // off unless mixup_alpha, cutmix_alpha or cutmix_minmax is set; cross_entropy only
  EmaConfig ema;                                 // decay 0: no weight average
  // Capture each optimizer step as a CUDA graph after graph_warmup_steps eager steps of the same shape, and
  // replay it (CUDA, one micro-batch per step; the caller rules out what cannot be captured: step_graph.h).
  bool cuda_graphs = false;
  int64_t graph_warmup_steps = 3;
};

// What cuda_graphs did: steps captured (each capture is also a step), replayed and run eagerly, and why the
// steps went eager after a capture failed (empty while none failed).
struct GraphStats {
  int64_t captured = 0;
  int64_t replays = 0;
  int64_t eager_steps = 0;
  std::string reason;
};

// The model's forward. sync_gradients is false for all but the last micro-batch of an accumulation
// window: a data-parallel model then skips the gradient all-reduce of that backward (DDP's no_sync).
using ForwardFn = std::function<at::Tensor(const at::Tensor& inputs, bool sync_gradients)>;
// A user loss (output, target) -> 0-dim loss; empty to use the built-in one.
using LossFn = std::function<at::Tensor(const at::Tensor& output, const at::Tensor& target)>;
// Called at log intervals with the running metrics of the epoch (the step count is Engine::steps_taken()).
using LogFn = std::function<void(const std::map<std::string, double>& metrics)>;
// Called after every optimizer step with the steps (windows) completed in this train_epoch, without a
// host read: where step checkpoints are decided.
using StepFn = std::function<void(int64_t windows_in_epoch)>;

struct EpochStats {
  std::map<std::string, double> metrics;  // loss, accuracy, ... (see MetricTracker), lr, loss_scale
  int64_t optimizer_steps = 0;            // windows completed this epoch (taken or skipped)
  int64_t samples = 0;
  double seconds = 0;
};

// One pass over `batches` without gradients: the metrics of config's loss and top_k (an epoch's metrics, as
// Engine::train_epoch reports them), the forward under config's autocast on config's device. Needs no optimizer,
// so evaluating a loaded model builds no Engine; Engine::evaluate is this with the engine's config.
EpochStats evaluate(BatchSource& batches, const ForwardFn& forward, const LossFn& loss, const EngineConfig& config);

class Engine {
 public:
  // With config.ema.decay > 0: ema_averages[i] (the EMA copy of the model's state, which the caller evaluates and
  // saves) follows ema_sources[i] (the model's parameters and buffers) after every taken optimizer step.
  Engine(std::vector<ParamGroup> groups, EngineConfig config, std::vector<at::Tensor> ema_averages = {},
         std::vector<at::Tensor> ema_sources = {});

  // epoch and first_batch (the batches of the epoch trained before, on a resume) place each batch in the
  // epoch for the mixup draws.
  EpochStats train_epoch(BatchSource& batches, const ForwardFn& forward, const LossFn& loss, const LogFn& on_log,
                         int64_t epoch = 0, int64_t first_batch = 0, const StepFn& on_step = {});
  EpochStats evaluate(BatchSource& batches, const ForwardFn& forward, const LossFn& loss);

  // Totals since construction (or restored from a checkpoint).
  int64_t steps_taken() const;         // host read
  int64_t steps_skipped() const;       // host read
  int64_t host_syncs() const { return host_syncs_; }
  // Optimizer steps (windows) completed in the current or last train_epoch, also after an exception:
  // where a resumed run picks the data up again.
  int64_t windows_in_epoch() const { return windows_in_epoch_; }
  // Micro-batches per step from now on (on_oom: reduce_batch doubles it as the batch halves).
  void set_accumulate_grad_batches(int64_t accumulate_grad_batches);
  double current_lr() const;           // host read
  const GraphStats& graph_stats() const { return graph_stats_; }
  double loss_scale() const;           // host read

  // The tensors every training step reads or writes besides the model's and the optimizer's (metric sums,
  // counters, found_inf, lr): allocated once, so their addresses never change (what a CUDA graph needs).
  std::vector<std::pair<std::string, at::Tensor>> step_buffers() const;

  // Everything a resumed run needs: optimizer state, scaler, step counters.
  std::vector<std::pair<std::string, at::Tensor>> state() const;
  void load_state(const std::vector<std::pair<std::string, at::Tensor>>& state);

 private:
  // Forward under autocast (mixed by the mixer's last draw, with mixup), loss, metrics and the scaled backward of one
  // micro-batch.
  void micro_batch(const at::Tensor& inputs, const at::Tensor& targets, const ForwardFn& forward, const LossFn& loss,
                   int64_t window_len, bool last_in_window);
  void optimizer_step();
  // cuda_graphs: the whole step of (inputs, targets) by replaying the captured graph, or by capturing it (then
  // replaying it); false when this step must run eagerly (warm-up, a short batch, a failed capture).
  bool graph_step(const at::Tensor& inputs, const at::Tensor& targets, const ForwardFn& forward, const LossFn& loss);
  // Forgets the captured step; the next capture follows a new warm-up.
  void drop_graph();
  std::map<std::string, double> read_metrics(const MetricTracker& tracker);

  EngineConfig config_;
  at::Device device_;
  FusedOptimizer optimizer_;
  GradScaler scaler_;
  std::vector<at::Tensor> params_;
  MetricTracker train_metrics_;  // the running metrics of the epoch, reset in place
  BatchMixer mixer_;
  at::Tensor schedule_;      // the learning_rate op's parameters, packed once (pack_schedule)
  at::Tensor counters_;      // float32 [steps taken, skipped, skipped in a row] (gpucore::count_step)
  at::Tensor step_;          // optimizer steps taken: counters_[0]
  at::Tensor skipped_;       // steps skipped: counters_[1]
  at::Tensor consecutive_;   // skipped in a row: counters_[2]
  at::Tensor found_inf_;     // float32 0-dim, zero between steps
  at::Tensor lr_;            // float32 0-dim: the schedule's rate for the next step
  int64_t host_syncs_ = 0;
  int64_t windows_in_epoch_ = 0;
  WeightAverage ema_;        // off unless config.ema.decay > 0
  StepGraph graph_;          // cuda_graphs: the captured step
  std::vector<int64_t> graph_key_;       // the captured step's input and target shapes and trainable parameters
  at::Tensor graph_inputs_, graph_targets_;  // the captured step's static inputs, refilled before each replay
  int64_t graph_warmup_left_ = 0;        // eager steps before the next capture
  int64_t graph_batch_size_ = 0;         // the captured step's batch size (while warming up: the largest seen)
  GraphStats graph_stats_;
};

}  // namespace gpucore
