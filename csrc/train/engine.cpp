#include "gpucore/train/engine.h"

#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/_foreach_clamp_max.h>
#include <ATen/ops/_foreach_clamp_min.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_norm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/autograd.h>

#include <chrono>
#include <map>
#include <tuple>

#include "gpucore/errors.h"
#include "gpucore/ranges.h"
#include "gpucore/train/autocast.h"
#include "ops/train_step/train_step.h"

namespace gpucore {

namespace {

// The state entry of the epoch's running training metrics (MetricTracker's sums).
constexpr const char* kTrainMetricSums = "train_metrics.sums";

std::vector<at::Tensor> flatten(const std::vector<ParamGroup>& groups) {
  std::vector<at::Tensor> params;
  for (const auto& group : groups) params.insert(params.end(), group.params.begin(), group.params.end());
  return params;
}

void check_config(const EngineConfig& c) {
  if (c.autocast_dtype && *c.autocast_dtype != at::kBFloat16 && *c.autocast_dtype != at::kHalf) {
    throw ConfigError("autocast_dtype must be bfloat16, float16 or None, got '" +
                      std::string(c10::getDtypeNames(*c.autocast_dtype).first) + "'");
  }
  if (c.param_dtype != at::kFloat && c.param_dtype != at::kDouble) {
    throw ConfigError("param_dtype must be float32 or float64, got '" +
                      std::string(c10::getDtypeNames(c.param_dtype).first) + "'");
  }
  ranges::kAccumulateGradBatches.check(c.accumulate_grad_batches);
  ranges::kClipGradNorm.check(c.clip_grad_norm);
  ranges::kClipGradValue.check(c.clip_grad_value);
  ranges::kLogEveryNSteps.check(c.log_every_n_steps);
  ranges::kMaxNonfiniteSteps.check(c.max_nonfinite_steps);
  validate(c.schedule);
  if (c.schedule.total_steps > ops::kMaxCountedSteps) {
    throw ConfigError("a run of " + std::to_string(c.schedule.total_steps) +
                      " optimizer steps (epochs x steps per epoch) is longer than the engine counts exactly: at most " +
                      std::to_string(ops::kMaxCountedSteps) +
                      " (2^24; its step counters are float32). Train fewer epochs, or fewer steps per epoch (a "
                      "larger batch_size or accumulate_grad_batches)");
  }
  if (c.mixup.enabled() && (c.loss.kind != LossKind::kCrossEntropy || c.loss.heads != 0)) {
    const std::string key = c.mixup.mixup_alpha > 0    ? ranges::kMixupAlpha.key
                            : c.mixup.cutmix_alpha > 0 ? ranges::kCutmixAlpha.key
                                                       : ranges::kCutmixMinmax.key;
    throw ConfigError("config key '" + key + "' mixes one-hot class targets, for single-label classification (loss "
                      "cross_entropy without heads); this run's loss is " + to_string(c.loss.kind) +
                      (c.loss.heads != 0 ? " with " + std::to_string(c.loss.heads) + " heads" : std::string()) +
                      ": set " + key + " to its default");
  }
  validate(c.ema);
  if (c.cuda_graphs) {
    if (c.device.type() != at::kCUDA) {
      throw ConfigError("cuda_graphs captures CUDA steps; this engine's device is " + c.device.str());
    }
    ranges::kGraphWarmupSteps.check(c.graph_warmup_steps);
  }
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Engine::Engine(std::vector<ParamGroup> groups, EngineConfig config, std::vector<at::Tensor> ema_averages,
               std::vector<at::Tensor> ema_sources)
    : config_((check_config(config), std::move(config))),
      device_(config_.device),
      optimizer_(groups, config_.optimizer),
      scaler_(config_.scaler, device_),
      params_(flatten(groups)),
      train_metrics_(config_.loss, config_.top_k, device_),
      mixer_(config_.mixup, config_.loss.label_smoothing, device_),
      schedule_(pack_schedule(config_.schedule)),
      graph_warmup_left_(config_.graph_warmup_steps) {
  if (params_.empty()) throw ConfigError("the model has no trainable parameters (all requires_grad=False?)");
  const auto counter = at::TensorOptions().dtype(at::kFloat).device(device_);
  counters_ = at::zeros({3}, counter);
  step_ = counters_.select(0, 0);
  skipped_ = counters_.select(0, 1);
  consecutive_ = counters_.select(0, 2);
  found_inf_ = at::zeros({}, counter);
  lr_ = at::empty({}, counter);
  ops::learning_rate(step_, lr_, schedule_);
  ema_ = WeightAverage(config_.ema, std::move(ema_averages), std::move(ema_sources), counters_);
}

namespace {

at::Tensor prepare_inputs(const at::Tensor& inputs, const EngineConfig& config) {
  at::Tensor x = inputs;
  if (x.is_floating_point() && x.scalar_type() != config.param_dtype) x = x.to(config.param_dtype);
  if (config.channels_last && x.dim() == 4) x = x.contiguous(at::MemoryFormat::ChannelsLast);
  return x;
}

// The built-in loss of `config`, or the user's checked to be one value. Both run outside autocast on float32
// outputs (a bfloat16 output, cast, as the built-in losses take it), so a user's loss with float32 tensors of its
// own (class weights) works under mixed precision as in float32.
at::Tensor loss_of(const LossConfig& config, const at::Tensor& output, const at::Tensor& target, const LossFn& loss) {
  if (!loss) return compute_loss(config, output, target);
  at::Tensor value = loss(output.to(at::kFloat), target);
  if (!value.defined() || value.numel() != 1) {
    throw ConfigError("the loss callable must return a single-element tensor, got " +
                      (value.defined() ? "shape " + c10::str(value.sizes()) : std::string("nothing")));
  }
  return value.reshape({}).to(at::kFloat);
}

at::Tensor checked_output(const at::Tensor& output) {
  if (!output.defined() || !output.is_floating_point()) {
    throw ConfigError("the model must return a floating-point tensor, got " +
                      (output.defined() ? std::string(c10::toString(output.scalar_type())) : std::string("nothing")));
  }
  return output;
}

}  // namespace

void Engine::micro_batch(const at::Tensor& inputs, const at::Tensor& targets, const ForwardFn& forward,
                         const LossFn& loss, int64_t window_len, bool last_in_window) {
  const bool mixing = mixer_.enabled();  // by the draw made for this batch before (outside a captured step)
  at::Tensor output;
  {
    AutocastGuard autocast(device_.type(), config_.autocast_dtype);
    const at::Tensor x = prepare_inputs(inputs, config_);
    output = checked_output(forward(mixing ? mixer_.mix(x) : x, last_in_window));
  }
  at::Tensor value;
  if (mixing) {
    LossConfig soft_loss = config_.loss;
    soft_loss.label_smoothing = 0.0;  // the mixed targets carry it
    value = loss_of(soft_loss, output, mixer_.targets(targets, output), loss);
  } else {
    value = loss_of(config_.loss, output, targets, loss);
  }
  train_metrics_.update(output, targets, value);  // accuracy on the hard labels, also when mixed
  torch::autograd::backward({scaler_.scale(window_len == 1 ? value : value / static_cast<double>(window_len))});
}

EpochStats Engine::train_epoch(BatchSource& batches, const ForwardFn& forward, const LossFn& loss, const LogFn& on_log,
                               int64_t epoch, int64_t first_batch, const StepFn& on_step, const StepCalls& step_calls,
                               bool continue_metrics) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto last_due = start;  // step_calls.every_seconds counts from here
  MetricTracker& tracker = train_metrics_;
  if (continue_metrics) {
    tracker.continue_sums();
  } else {
    tracker.reset();
  }
  EpochStats stats;
  const int64_t total = batches.remaining();
  const int64_t k = config_.accumulate_grad_batches;
  steps_in_pass_ = 0;
  at::Tensor inputs, targets;
  for (int64_t index = 0; index < total && batches.next(inputs, targets); ++index) {
    // The last window of an epoch may be short; dividing by its real length keeps the step equal
    // to one big batch of the same samples.
    const int64_t window_len = std::min(k, total - (index / k) * k);
    const bool last_in_window = (index + 1) % k == 0 || index + 1 == total;
    // Mixup draws on the host, outside a captured step, into the buffer the step (eager or replayed) reads.
    if (mixer_.enabled()) mixer_.draw(inputs, epoch, first_batch + index);
    const bool graphed = config_.cuda_graphs && k == 1 && graph_step(inputs, targets, forward, loss);
    if (!graphed) {
      micro_batch(inputs, targets, forward, loss, window_len, last_in_window);
      if (last_in_window) optimizer_step();
      if (last_in_window && config_.cuda_graphs) ++graph_stats_.eager_steps;
    }
    if (!last_in_window) continue;
    const int64_t steps_in_pass = ++steps_in_pass_;
    if (on_step) {
      bool due = false;
      if (index + 1 < total) {  // the epoch's last step: its end-of-epoch checkpoint follows
        const int64_t step_of_epoch = step_calls.steps_before + steps_in_pass;
        due = (step_calls.every_n_steps > 0 && step_of_epoch % step_calls.every_n_steps == 0) ||
              (step_calls.every_seconds > 0 &&
               std::chrono::duration<double>(Clock::now() - last_due).count() >= step_calls.every_seconds);
        if (due) last_due = Clock::now();
      }
      if (due || step_calls.every_step) on_step(steps_in_pass, due);  // first: a callback that stops the run in on_log keeps this step
    }
    if (on_log && steps_in_pass % config_.log_every_n_steps == 0) {
      const auto [metrics, steps_taken] = read_metrics(tracker);
      on_log(metrics, steps_taken);
    }
  }
  std::tie(stats.metrics, stats.steps_taken) = read_metrics(tracker);
  stats.samples = tracker.samples_seen_on_host();
  stats.seconds = seconds_since(start);
  return stats;
}

namespace {

// What a captured step depends on besides the batch size: the shapes past the first, dtypes and memory layout of
// inputs and targets, and which parameters train (freezing changes the gradients the optimizer steps).
std::vector<int64_t> graph_key(const at::Tensor& inputs, const at::Tensor& targets, const std::vector<at::Tensor>& params) {
  std::vector<int64_t> key;
  for (const at::Tensor& t : {inputs, targets}) {
    key.push_back(t.dim());
    key.insert(key.end(), t.sizes().begin() + std::min<int64_t>(t.dim(), 1), t.sizes().end());
    key.push_back(static_cast<int64_t>(t.scalar_type()));
    key.push_back(static_cast<int64_t>(t.suggest_memory_format()));
  }
  for (const at::Tensor& param : params) key.push_back(param.requires_grad());
  return key;
}

}  // namespace

bool Engine::graph_step(const at::Tensor& inputs, const at::Tensor& targets, const ForwardFn& forward,
                        const LossFn& loss) {
  if (!graph_stats_.reason.empty()) return false;  // a capture failed: eager from then on
  const std::vector<int64_t> key = graph_key(inputs, targets, params_);
  const int64_t batch_size = inputs.dim() > 0 ? inputs.size(0) : 1;
  if (graph_.captured() && key == graph_key_) {
    if (batch_size < graph_batch_size_) return false;  // the short last batch of an epoch runs eagerly
    if (batch_size == graph_batch_size_) {
      graph_inputs_.copy_(inputs);
      graph_targets_.copy_(targets);
      const int64_t seen = train_metrics_.samples_seen_on_host();
      graph_.replay();
      train_metrics_.set_samples_seen_on_host(seen + batch_size);
      ++graph_stats_.replays;
      return true;
    }
  }
  if (graph_.captured()) drop_graph();  // what the step does changed (frozen parameters, another shape)
  // Warm-up: eager steps of the shape to capture (cuDNN's autotuning, lazily made handles and state); a batch
  // smaller than one seen before is an epoch's short last batch, never the one to capture.
  if (graph_warmup_left_ > 0 || batch_size < graph_batch_size_) {
    if (batch_size >= graph_batch_size_) --graph_warmup_left_;
    graph_batch_size_ = std::max(graph_batch_size_, batch_size);
    return false;
  }
  graph_inputs_ = inputs.clone();
  graph_targets_ = targets.clone();
  const int64_t seen = train_metrics_.samples_seen_on_host();
  const std::string failure = graph_.capture([&] {
    micro_batch(graph_inputs_, graph_targets_, forward, loss, 1, true);
    optimizer_step();
  });
  if (!failure.empty()) {  // nothing ran: undo what the recording did on the host, and step eagerly
    train_metrics_.set_samples_seen_on_host(seen);
    for (auto& param : params_) param.mutable_grad().reset();
    graph_stats_.reason = "the step could not be captured: " + failure;
    graph_inputs_ = graph_targets_ = at::Tensor();
    return false;
  }
  graph_key_ = key;
  graph_batch_size_ = batch_size;
  ++graph_stats_.captured;
  graph_.replay();  // the captured step itself
  return true;
}

EpochStats Engine::evaluate(BatchSource& batches, const ForwardFn& forward, const LossFn& loss) {
  host_reads_.note("evaluation");  // the metrics' read at the end
  return gpucore::evaluate(batches, forward, loss, config_);
}

EpochStats evaluate(BatchSource& batches, const ForwardFn& forward, const LossFn& loss, const EngineConfig& config) {
  const auto start = std::chrono::steady_clock::now();
  at::NoGradGuard no_grad;
  MetricTracker tracker(config.loss, config.top_k, config.device, /*per_class=*/true);
  at::Tensor inputs, targets;
  while (batches.next(inputs, targets)) {
    at::Tensor output;
    {
      AutocastGuard autocast(config.device.type(), config.autocast_dtype);
      output = checked_output(forward(prepare_inputs(inputs, config), /*sync_gradients=*/true));
    }
    tracker.update(output, targets, loss_of(config.loss, output, targets, loss));
  }
  EpochStats stats;
  stats.metrics = tracker.read();
  stats.samples = tracker.samples_seen_on_host();
  stats.seconds = seconds_since(start);
  return stats;
}

void Engine::optimizer_step() {
  std::vector<at::Tensor> grads;
  for (const auto& param : params_) {
    if (param.grad().defined()) grads.push_back(param.grad());
  }
  if (grads.empty()) {
    throw ConfigError("no parameter received a gradient: does the loss depend on the model's output?");
  }
  scaler_.unscale_and_check(grads, found_inf_);  // found_inf_ is zero here; clipping must see unscaled gradients
  if (config_.clip_grad_norm > 0) {
    const at::Tensor total_norm = at::stack(at::_foreach_norm(grads, 2)).norm();
    // Non-finite norms are already in found_inf, which skips the step.
    at::_foreach_mul_(grads, (config_.clip_grad_norm / (total_norm + 1e-6)).clamp_max(1.0));
  }
  if (config_.clip_grad_value > 0) {
    at::_foreach_clamp_min_(grads, -config_.clip_grad_value);
    at::_foreach_clamp_max_(grads, config_.clip_grad_value);
  }
  optimizer_.step(lr_, found_inf_);
  scaler_.update(found_inf_);
  ops::count_step(counters_, found_inf_);  // also zeroes found_inf_ for the next step
  ema_.update();                           // reads the counters: a skipped step leaves the average
  ops::learning_rate(step_, lr_, schedule_);
  for (auto& param : params_) param.mutable_grad().reset();
}

std::pair<std::map<std::string, double>, int64_t> Engine::read_metrics(const MetricTracker& tracker) {
  host_reads_.note("metrics");
  const at::Tensor counters = at::stack({lr_, scaler_.scale_tensor(), consecutive_, skipped_, step_}).to(at::kDouble);
  const at::Tensor host = at::cat({tracker.sums(), counters}).cpu();
  const double* values = host.data_ptr<double>() + tracker.sums().numel();
  std::map<std::string, double> metrics = tracker.read(host.data_ptr<double>());
  metrics["lr"] = values[0];
  metrics["loss_scale"] = scaler_.enabled() ? values[1] : 1.0;
  metrics["skipped_steps"] = values[3];
  if (values[2] >= static_cast<double>(config_.max_nonfinite_steps)) {
    throw TrainingError("training stopped: the last " + std::to_string(static_cast<int64_t>(values[2])) +
                        " optimizer steps had non-finite gradients (inf/NaN) and were skipped (max_nonfinite_steps " +
                        std::to_string(config_.max_nonfinite_steps) +
                        "). The weights are those of the last good step. Lower lr, set clip_grad_norm, check the "
                        "data for NaN, or use precision bf16-mixed or 32.");
  }
  return {metrics, static_cast<int64_t>(values[4])};
}

void Engine::set_accumulate_grad_batches(int64_t accumulate_grad_batches) {
  ranges::kAccumulateGradBatches.check(accumulate_grad_batches);
  config_.accumulate_grad_batches = accumulate_grad_batches;
  drop_graph();  // the captured step took one micro-batch of the old size
}

void Engine::drop_graph() {
  graph_.reset();
  graph_warmup_left_ = config_.graph_warmup_steps;
  graph_batch_size_ = 0;
}

int64_t HostReads::total() const {
  int64_t total = 0;
  for (const auto& [source, count] : counts_) total += count;
  return total;
}

std::pair<int64_t, int64_t> Engine::step_counts() const {
  host_reads_.note("counters");
  const at::Tensor taken_skipped = counters_.narrow(0, 0, 2).to(at::kCPU);
  const float* values = taken_skipped.const_data_ptr<float>();
  return {static_cast<int64_t>(values[0]), static_cast<int64_t>(values[1])};
}

GraphStats Engine::graph_stats() const {
  GraphStats stats = graph_stats_;
  if (stats.reason.empty() && config_.cuda_graphs && config_.accumulate_grad_batches > 1)
    stats.reason = "accumulate_grad_batches > 1 (a captured step holds one micro-batch so far)";
  return stats;
}

std::vector<std::pair<std::string, at::Tensor>> Engine::step_buffers() const {
  return {{"metric_sums", train_metrics_.sums()}, {"counters", counters_}, {"found_inf", found_inf_}, {"lr", lr_}};
}

std::vector<std::pair<std::string, at::Tensor>> Engine::state() const {
  std::vector<std::pair<std::string, at::Tensor>> entries;
  for (auto& [name, tensor] : optimizer_.state()) entries.emplace_back("optimizer." + name, tensor);
  entries.emplace_back("scaler.scale", scaler_.scale_tensor());
  entries.emplace_back("scaler.growth_tracker", scaler_.growth_tracker());
  entries.emplace_back("counters.step", step_);
  entries.emplace_back("counters.skipped", skipped_);
  entries.emplace_back("counters.consecutive_nonfinite", consecutive_);
  // The epoch's running training metrics (a checkpoint mid-epoch: a resume goes on with them).
  entries.emplace_back(kTrainMetricSums, train_metrics_.sums());
  return entries;
}

void Engine::load_state(const std::vector<std::pair<std::string, at::Tensor>>& saved) {
  std::vector<std::pair<std::string, at::Tensor>> optimizer_state;
  std::map<std::string, at::Tensor> rest;
  const std::string prefix = "optimizer.";
  for (const auto& [name, tensor] : saved) {
    if (name.rfind(prefix, 0) == 0) {
      optimizer_state.emplace_back(name.substr(prefix.size()), tensor);
    } else {
      rest[name] = tensor;
    }
  }
  optimizer_.load_state(optimizer_state);
  for (auto& [name, live] : state()) {
    if (name.rfind(prefix, 0) == 0) continue;
    const auto it = rest.find(name);
    if (it == rest.end() && name == kTrainMetricSums) {  // a checkpoint from before they were kept
      train_metrics_.reset();
      continue;
    }
    if (it == rest.end()) throw ConfigError("training state has no entry '" + name + "': not a gpucore checkpoint?");
    at::Tensor target = live;
    target.copy_(it->second);
  }
  found_inf_.zero_();  // a step that failed part-way may have left it set
  ops::learning_rate(step_, lr_, schedule_);
}

}  // namespace gpucore
