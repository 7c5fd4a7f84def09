#pragma once
// The training step, kept on the device so that the host waits for it only at log intervals:
// forward under autocast, loss / window length, scaled backward; after the last micro-batch of a
// window: non-finite check and unscale, clipping, fused optimizer step that skips itself on
// non-finite gradients, scale update, schedule advanced only by taken steps. Loss and metrics
// accumulate on the device; the host reads them at log intervals.
#include <ATen/core/Tensor.h>

#include <atomic>
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

// The defaults of the settings that are config keys' values are the keys' defaults in config.py (test_engine_config
// compares every one, through _C.default_settings()).
struct EngineConfig {
  at::Device device = at::kCPU;
  std::optional<at::ScalarType> autocast_dtype;  // bfloat16 or float16; nullopt: no autocast
  at::ScalarType param_dtype = at::kFloat;       // float32 or float64; floating-point inputs are cast to it
  int64_t accumulate_grad_batches = 1;           // micro-batches per optimizer step
  double clip_grad_norm = 0.0;                   // 0: off
  double clip_grad_value = 0.0;                  // 0: off
  // channels_last and cuda_graphs are resolved here (true or false); config keys channels_last and cuda_graphs, whose
  // default auto decides them by the device and the model (engine_config.py), are a toggle. So are device and the
  // dtypes (config keys device and precision, auto) and scaler.enabled (precision 16-mixed).
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

// What cuda_graphs did: steps captured (each capture is also a step), replayed and run eagerly, and why steps run
// eagerly (empty: only warm-up and short last batches do).
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
// Called at log intervals with the running metrics of the epoch and the run's optimizer steps taken, read in the
// same copy to the host.
using LogFn = std::function<void(const std::map<std::string, double>& metrics, int64_t steps_taken)>;
// Called after an optimizer step, where StepCalls asks for it, with the optimizer steps (accumulation windows, taken
// or skipped) completed in this train_epoch and whether a step checkpoint is due after this one; no host read.
using StepFn = std::function<void(int64_t steps_in_pass, bool checkpoint_due)>;

// When train_epoch calls on_step, decided without a host read and without the caller (so a Python caller's GIL is
// taken only then): after every step with every_step (a per-step callback), else only where a step checkpoint is
// due: at a step of the epoch (steps_before + steps_in_pass) that is a multiple of every_n_steps, or once
// every_seconds have passed since the pass began or since the last due step. Never due at the epoch's last step,
// which the end-of-epoch checkpoint follows.
struct StepCalls {
  bool every_step = false;
  int64_t every_n_steps = 0;  // 0: off
  double every_seconds = 0;   // 0: off
  int64_t steps_before = 0;   // optimizer steps of the epoch trained before this pass (a resume mid-epoch)
};

struct EpochStats {
  std::map<std::string, double> metrics;  // loss, accuracy, ... (see MetricTracker), lr, loss_scale, skipped_steps
  int64_t steps_taken = 0;                // the run's optimizer steps taken, as of the epoch's end (Engine only)
  int64_t samples = 0;
  double seconds = 0;
};

// Every read of device values on the host, by what read them (training_stats.json's host_syncs): "metrics" (the
// running metrics and step counters, one copy at each log interval and each epoch's end), "evaluation" (a
// validation pass's metrics), "counters" (step_counts() called on its own) and what the caller notes of its own
// (the Python side: a checkpoint's copy to the host, ...).
class HostReads {
 public:
  void note(const std::string& source, int64_t count = 1) { counts_[source] += count; }
  int64_t total() const;
  const std::map<std::string, int64_t>& by_source() const { return counts_; }

 private:
  std::map<std::string, int64_t> counts_;
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
  // epoch for the mixup draws. continue_metrics: the epoch's training metrics go on from the sums load_state
  // restored (a pass resumed mid-epoch: the epoch's metrics are then an uninterrupted epoch's), else start over.
  EpochStats train_epoch(BatchSource& batches, const ForwardFn& forward, const LossFn& loss, const LogFn& on_log,
                         int64_t epoch = 0, int64_t first_batch = 0, const StepFn& on_step = {},
                         const StepCalls& step_calls = {}, bool continue_metrics = false);
  EpochStats evaluate(BatchSource& batches, const ForwardFn& forward, const LossFn& loss);

  // Totals since construction (or restored from a checkpoint).
  // (optimizer steps taken, steps skipped): one host read ("counters"), the two counters copied together.
  std::pair<int64_t, int64_t> step_counts() const;
  HostReads& host_reads() { return host_reads_; }
  const HostReads& host_reads() const { return host_reads_; }
  // Optimizer steps (accumulation windows, taken or skipped) completed in the current or last train_epoch (one pass
  // over what its batches held), also after an exception: where a resumed run picks the data up again. Safe to read
  // from another thread while an epoch trains.
  int64_t steps_in_pass() const { return steps_in_pass_.load(); }
  // Micro-batches per step from now on (on_oom: reduce_batch doubles it as the batch halves).
  void set_accumulate_grad_batches(int64_t accumulate_grad_batches);
  // cuda_graphs: the steps captured, replayed and run eagerly, and why steps run eagerly now (empty: they do not, or
  // cuda_graphs is off): a capture that failed, else what the engine cannot capture (accumulate_grad_batches > 1).
  GraphStats graph_stats() const;

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
  // The tracker's metrics with lr, loss_scale and skipped_steps, and the run's steps taken: one copy to the host.
  std::pair<std::map<std::string, double>, int64_t> read_metrics(const MetricTracker& tracker);

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
  mutable HostReads host_reads_;  // the const host reads count too
  std::atomic<int64_t> steps_in_pass_{0};
  WeightAverage ema_;        // off unless config.ema.decay > 0
  StepGraph graph_;          // cuda_graphs: the captured step
  std::vector<int64_t> graph_key_;       // the captured step's input and target shapes and trainable parameters
  at::Tensor graph_inputs_, graph_targets_;  // the captured step's static inputs, refilled before each replay
  int64_t graph_warmup_left_ = 0;        // eager steps before the next capture
  int64_t graph_batch_size_ = 0;         // the captured step's batch size (while warming up: the largest seen)
  GraphStats graph_stats_;               // its reason: a failed capture's (eager from then on)
};

}  // namespace gpucore
