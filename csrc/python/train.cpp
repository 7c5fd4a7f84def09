// The training engine and the configs it takes: loss, optimizer, schedule, loss scaling.
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "gpucore/batches/file_batches.h"
#include "gpucore/device/precision.h"
#include "gpucore/errors.h"
#include "gpucore/train/ema.h"
#include "gpucore/train/engine.h"
#include "gpucore/train/losses.h"
#include "gpucore/train/metrics.h"
#include "gpucore/train/mixup.h"
#include "gpucore/train/optimizer.h"
#include "gpucore/train/schedule.h"
#include "gpucore/train/settings.h"
#include "python/module.h"

namespace py = pybind11;

namespace gpucore::python {

namespace {

at::Tensor as_tensor(const py::object& value, const char* what) {
  if (!THPVariable_Check(value.ptr())) {
    throw ConfigError(std::string(what) + " must return a torch.Tensor, got " +
                      py::str(py::type::of(value).attr("__name__")).cast<std::string>());
  }
  return value.cast<at::Tensor>();
}

// The DistributedDataParallel module `model` calls, or None. torch.compile wraps a module in an OptimizedModule
// that keeps it as `_orig_mod`; torch documents compiling the DDP module (torch.compile(DDP(model))), whose
// forward dynamo runs eagerly, so its no_sync() still decides the backward's sync when entered on `_orig_mod`.
py::object data_parallel_module(py::object model) {
  const py::object ddp = py::module_::import("torch.nn.parallel").attr("DistributedDataParallel");
  while (!py::isinstance(model, ddp)) {
    if (!py::hasattr(model, "_orig_mod")) return py::none();
    model = model.attr("_orig_mod");
  }
  return model;
}

// Calls a Python nn.Module (or any callable) with the GIL held for the call only. DistributedDataParallel
// decides in its forward whether the backward that follows all-reduces, so a forward without gradient sync
// runs inside the public no_sync() context of the DDP module, compiled or not; the engine's backward after it
// then stays local.
ForwardFn python_forward(const py::object& model) {
  const py::object data_parallel = data_parallel_module(model);
  return [model, data_parallel](const at::Tensor& inputs, bool sync_gradients) {
    py::gil_scoped_acquire gil;
    if (sync_gradients || data_parallel.is_none()) return as_tensor(model(inputs), "the model");
    const py::object no_sync = data_parallel.attr("no_sync")();
    no_sync.attr("__enter__")();
    py::object output;
    try {
      output = model(inputs);
    } catch (...) {
      no_sync.attr("__exit__")(py::none(), py::none(), py::none());
      throw;
    }
    no_sync.attr("__exit__")(py::none(), py::none(), py::none());
    return as_tensor(output, "the model");
  };
}

LossFn python_loss(const py::object& loss) {
  if (loss.is_none()) return {};
  return [loss](const at::Tensor& output, const at::Tensor& target) {
    py::gil_scoped_acquire gil;
    return as_tensor(loss(output, target), "the loss callable");
  };
}

LogFn python_log(const py::object& on_log) {
  if (on_log.is_none()) return {};
  return [on_log](const std::map<std::string, double>& metrics, int64_t steps_taken) {
    py::gil_scoped_acquire gil;
    on_log(metrics, steps_taken);
  };
}

py::dict stats_dict(const EpochStats& stats) {
  py::dict out;
  out["metrics"] = stats.metrics;
  out["steps_taken"] = stats.steps_taken;
  out["samples"] = stats.samples;
  out["seconds"] = stats.seconds;
  return out;
}

// An evaluation pass with the GIL released (the model's forward and the loss take it back).
template <typename Evaluate>
py::dict evaluation(const py::object& model, const py::object& loss, Evaluate&& evaluate) {
  const ForwardFn forward = python_forward(model);
  const LossFn loss_fn = python_loss(loss);
  EpochStats stats;
  {
    py::gil_scoped_release release;
    stats = evaluate(forward, loss_fn);
  }
  return stats_dict(stats);
}

// The `kind` of a config, read and written by its name.
template <typename Config, typename Kind>
void def_kind(py::class_<Config>& config, Kind Config::*kind, Kind (*parse)(const std::string&)) {
  config.def_property(
      "kind", [kind](const Config& c) { return to_string(c.*kind); },
      [kind, parse](Config& c, const std::string& name) { c.*kind = parse(name); });
}

// The fields of a bound settings object (its def_readwrite and read-only properties) into `out` by dotted name
// ("schedule.kind"), a nested *Config opened in turn.
void add_settings(py::dict& out, const py::object& settings, const std::string& prefix) {
  for (const py::handle name : py::module_::import("builtins").attr("dir")(settings)) {
    const std::string field = py::str(name);
    if (field.rfind('_', 0) == 0 || field == "params") continue;  // a ParamGroup's parameters are no setting
    const py::object value = settings.attr(name);
    if (PyCallable_Check(value.ptr())) continue;
    const std::string type = py::str(py::type::of(value).attr("__name__"));
    if (type.size() > 6 && type.compare(type.size() - 6, 6, "Config") == 0) {
      add_settings(out, value, prefix + field + ".");
    } else {
      out[py::str(prefix + field)] = value;
    }
  }
}

}  // namespace

void def_train(py::module_& m) {
  py::class_<LossConfig> loss(m, "LossConfig");
  loss.def(py::init<>())
      .def_readwrite("label_smoothing", &LossConfig::label_smoothing)
      .def_readwrite("ignore_index", &LossConfig::ignore_index)
      .def_readwrite("heads", &LossConfig::heads)
      .def_readwrite("class_weights", &LossConfig::class_weights)
      .def_readwrite("sequence_lengths", &LossConfig::sequence_lengths)
      .def_readwrite("temporal_stride", &LossConfig::temporal_stride)
      .def_readwrite("undecoded_class", &LossConfig::undecoded_class);
  def_kind(loss, &LossConfig::kind, &parse_loss);
  m.def(
      "word_edits",
      [](const std::vector<int64_t>& reference, const std::vector<int64_t>& hypothesis) {
        std::vector<std::tuple<std::string, int64_t, int64_t>> edits;
        for (const WordEdit& edit : word_edits(reference, hypothesis)) {
          edits.emplace_back(std::string(1, edit.kind), edit.reference, edit.hypothesis);
        }
        return edits;
      },
      py::arg("reference"), py::arg("hypothesis"),
      "A minimal alignment's edits of hypothesis against reference (lists of ints): (kind, reference position, "
      "hypothesis position) with kind 's', 'd' or 'i' (-1: no position); matches are not listed.");
  m.def("reported_metrics", &reported_metrics, py::arg("loss"), py::arg("top_k"), py::arg("training") = false);
  // The choices of the config keys whose values the core parses, from the core's own tables: config.py offers these.
  m.def("config_choices", [] {
    return std::map<std::string, std::vector<std::string>>{
        {"loss", loss_names()},           {"mixup_mode", mix_mode_names()}, {"optimizer", optimizer_names()},
        {"schedule", schedule_names()},   {"precision", precision_names()}, {"tf32", toggle_names()},
        {"cudnn_benchmark", toggle_names()}, {"channels_last", toggle_names()}, {"cuda_graphs", toggle_names()}};
  });
  // The valid values of the numeric config keys the core checks too, and the core's defaults of them: config.py
  // checks those keys against these ranges and gives the one message a user sees.
  py::class_<Range>(m, "Range")
      .def("__contains__", &Range::contains)
      .def("__str__", &Range::describe)
      .def("__repr__", [](const Range& range) { return "Range(" + range.describe() + ")"; });
  m.def("config_ranges", [] {
    std::map<std::string, Range> ranges;
    for (const NumericSetting& setting : numeric_settings()) ranges.emplace(setting.key, setting.range);
    return ranges;
  });
  m.def("config_defaults", [] {
    py::dict defaults;
    for (const NumericSetting& setting : numeric_settings()) {
      if (!setting.default_value) continue;
      defaults[py::str(setting.key)] = setting.integer ? py::object(py::int_(static_cast<int64_t>(*setting.default_value)))
                                                      : py::object(py::float_(*setting.default_value));
    }
    return defaults;
  });

  // Every setting of a default-constructed EngineConfig (with its loss, optimizer, schedule, ... configs:
  // "schedule.kind"), ParamGroup ("param_group.weight_decay") and FileBatchesConfig ("file_batches.prefetch"), as the
  // bindings read them: test_engine_config compares them with config.py's defaults, the keys' truth, so that they
  // cannot drift apart.
  m.def("default_settings", [] {
    py::dict out;
    add_settings(out, py::cast(EngineConfig{}), "");
    add_settings(out, py::cast(ParamGroup{}), "param_group.");
    add_settings(out, py::cast(FileBatchesConfig{}), "file_batches.");
    return out;
  });

  py::class_<OptimizerConfig> optimizer(m, "OptimizerConfig");
  optimizer.def(py::init<>())
      .def_readwrite("momentum", &OptimizerConfig::momentum)
      .def_readwrite("nesterov", &OptimizerConfig::nesterov)
      .def_readwrite("beta1", &OptimizerConfig::beta1)
      .def_readwrite("beta2", &OptimizerConfig::beta2)
      .def_readwrite("eps", &OptimizerConfig::eps);
  def_kind(optimizer, &OptimizerConfig::kind, &parse_optimizer);

  py::class_<ScheduleConfig> schedule(m, "ScheduleConfig");
  schedule.def(py::init<>())
      .def_readwrite("base_lr", &ScheduleConfig::base_lr)
      .def_readwrite("warmup_steps", &ScheduleConfig::warmup_steps)
      .def_readwrite("total_steps", &ScheduleConfig::total_steps)
      .def_readwrite("step_size", &ScheduleConfig::step_size)
      .def_readwrite("gamma", &ScheduleConfig::gamma)
      .def_readwrite("milestones", &ScheduleConfig::milestones)
      .def_readwrite("min_lr", &ScheduleConfig::min_lr)
      .def_readwrite("pct_start", &ScheduleConfig::pct_start)
      .def_readwrite("div_factor", &ScheduleConfig::div_factor)
      .def_readwrite("final_div_factor", &ScheduleConfig::final_div_factor);
  def_kind(schedule, &ScheduleConfig::kind, &parse_schedule);
  m.def("pack_schedule", &pack_schedule);
  m.def("learning_rate", &learning_rate);

  py::class_<GradScalerConfig>(m, "GradScalerConfig")
      .def(py::init<>())
      .def_readwrite("enabled", &GradScalerConfig::enabled)
      .def_readwrite("init_scale", &GradScalerConfig::init_scale)
      .def_readwrite("growth_factor", &GradScalerConfig::growth_factor)
      .def_readwrite("backoff_factor", &GradScalerConfig::backoff_factor)
      .def_readwrite("growth_interval", &GradScalerConfig::growth_interval);

  py::class_<MixupConfig>(m, "MixupConfig")
      .def(py::init<>())
      .def_readwrite("mixup_alpha", &MixupConfig::mixup_alpha)
      .def_readwrite("cutmix_alpha", &MixupConfig::cutmix_alpha)
      .def_readwrite("cutmix_minmax", &MixupConfig::cutmix_minmax)
      .def_readwrite("prob", &MixupConfig::prob)
      .def_readwrite("switch_prob", &MixupConfig::switch_prob)
      .def_property(
          "mode", [](const MixupConfig& c) { return to_string(c.mode); },
          [](MixupConfig& c, const std::string& name) { c.mode = parse_mix_mode(name); })
      .def_readwrite("correct_lam", &MixupConfig::correct_lam)
      .def_readwrite("seed", &MixupConfig::seed)
      .def_property_readonly("enabled", &MixupConfig::enabled);
  m.def(
      "draw_mix",
      [](const MixupConfig& config, int64_t epoch, int64_t batch, int64_t n, int64_t h, int64_t w) {
        validate(config);
        return draw_mix(config, epoch, batch, n, h, w);
      },
      py::arg("config"), py::arg("epoch"), py::arg("batch"), py::arg("n"), py::arg("h"), py::arg("w"),
      "The mix rows (gpucore::mix_inputs' params) of batch `batch` of `epoch`: n samples of h x w pixels.");
  py::class_<EmaConfig>(m, "EmaConfig")
      .def(py::init<>())
      .def_readwrite("decay", &EmaConfig::decay)
      .def_readwrite("warmup", &EmaConfig::warmup)
      .def_readwrite("warmup_gamma", &EmaConfig::warmup_gamma)
      .def_readwrite("warmup_power", &EmaConfig::warmup_power);

  // device: a torch.device; autocast_dtype: torch.bfloat16, torch.float16 or None; param_dtype:
  // torch.float32 or torch.float64 (checked when the Engine is built).
  py::class_<EngineConfig>(m, "EngineConfig")
      .def(py::init<>())
      .def_readwrite("device", &EngineConfig::device)
      .def_readwrite("autocast_dtype", &EngineConfig::autocast_dtype)
      .def_readwrite("param_dtype", &EngineConfig::param_dtype)
      .def_readwrite("accumulate_grad_batches", &EngineConfig::accumulate_grad_batches)
      .def_readwrite("clip_grad_norm", &EngineConfig::clip_grad_norm)
      .def_readwrite("clip_grad_value", &EngineConfig::clip_grad_value)
      .def_readwrite("channels_last", &EngineConfig::channels_last)
      .def_readwrite("log_every_n_steps", &EngineConfig::log_every_n_steps)
      .def_readwrite("max_nonfinite_steps", &EngineConfig::max_nonfinite_steps)
      .def_readwrite("top_k", &EngineConfig::top_k)
      .def_readwrite("loss", &EngineConfig::loss)
      .def_readwrite("optimizer", &EngineConfig::optimizer)
      .def_readwrite("schedule", &EngineConfig::schedule)
      .def_readwrite("scaler", &EngineConfig::scaler)
      .def_readwrite("mixup", &EngineConfig::mixup)
      .def_readwrite("ema", &EngineConfig::ema)
      .def_readwrite("cuda_graphs", &EngineConfig::cuda_graphs)
      .def_readwrite("graph_warmup_steps", &EngineConfig::graph_warmup_steps);

  py::class_<ParamGroup>(m, "ParamGroup")
      .def(py::init([](std::vector<at::Tensor> params, double weight_decay, double lr_scale) {
             return ParamGroup{std::move(params), weight_decay, lr_scale};
           }),
           py::arg("params"), py::arg("weight_decay") = ParamGroup{}.weight_decay,
           py::arg("lr_scale") = ParamGroup{}.lr_scale)
      .def_readonly("params", &ParamGroup::params)
      .def_readonly("weight_decay", &ParamGroup::weight_decay)
      .def_readonly("lr_scale", &ParamGroup::lr_scale)
      .def("__repr__", [](const ParamGroup& self) {
        return "ParamGroup(" + std::to_string(self.params.size()) + " params, weight_decay=" +
               c10::str(self.weight_decay) + ", lr_scale=" + c10::str(self.lr_scale) + ")";
      });

  m.def(
      "evaluate",
      [](BatchSource& batches, const py::object& model, const EngineConfig& config, const py::object& loss) {
        return evaluation(model, loss, [&](const ForwardFn& forward, const LossFn& loss_fn) {
          return evaluate(batches, forward, loss_fn, config);
        });
      },
      py::arg("batches"), py::arg("model"), py::arg("config"), py::arg("loss") = py::none(),
      "One pass without gradients and without an Engine: the metrics of config's loss and top_k.");
  py::class_<StepCalls>(m, "StepCalls", "When Engine.train_epoch calls on_step (engine.h)")
      .def(py::init<>())
      .def(py::init([](bool every_step, int64_t every_n_steps, double every_seconds, int64_t steps_before) {
             return StepCalls{every_step, every_n_steps, every_seconds, steps_before};
           }),
           py::arg("every_step") = false, py::arg("every_n_steps") = 0, py::arg("every_seconds") = 0.0,
           py::arg("steps_before") = 0)
      .def_readwrite("every_step", &StepCalls::every_step)
      .def_readwrite("every_n_steps", &StepCalls::every_n_steps)
      .def_readwrite("every_seconds", &StepCalls::every_seconds)
      .def_readwrite("steps_before", &StepCalls::steps_before);
  py::class_<Engine>(m, "Engine")
      .def(py::init<std::vector<ParamGroup>, EngineConfig, std::vector<at::Tensor>, std::vector<at::Tensor>>(),
           py::arg("param_groups"), py::arg("config"), py::arg("ema_averages") = std::vector<at::Tensor>{},
           py::arg("ema_sources") = std::vector<at::Tensor>{})
      .def(
          "train_epoch",
          [](Engine& self, BatchSource& batches, const py::object& model, const py::object& loss, const py::object& on_log,
             int64_t epoch, int64_t first_batch, const py::object& on_step, const StepCalls& step_calls,
             bool continue_metrics) {
            const ForwardFn forward = python_forward(model);
            const LossFn loss_fn = python_loss(loss);
            const LogFn log_fn = python_log(on_log);
            StepFn step_fn;
            if (!on_step.is_none()) {
              step_fn = [on_step](int64_t windows, bool checkpoint_due) {
                py::gil_scoped_acquire gil;
                on_step(windows, checkpoint_due);
              };
            }
            EpochStats stats;
            {
              py::gil_scoped_release release;
              stats = self.train_epoch(batches, forward, loss_fn, log_fn, epoch, first_batch, step_fn, step_calls,
                                       continue_metrics);
            }
            return stats_dict(stats);
          },
          py::arg("batches"), py::arg("model"), py::arg("loss") = py::none(), py::arg("on_log") = py::none(),
          py::arg("epoch") = 0, py::arg("first_batch") = 0, py::arg("on_step") = py::none(),
          py::arg("step_calls") = StepCalls{}, py::arg("continue_metrics") = false,
          "One pass over `batches`. on_log(metrics, steps_taken) at log intervals; on_step(steps_in_pass, "
          "checkpoint_due) after the optimizer steps step_calls asks for. continue_metrics: the epoch's training "
          "metrics go on from the sums load_state restored (a pass resumed mid-epoch), else start over.")
      .def(
          "evaluate",
          [](Engine& self, BatchSource& batches, const py::object& model, const py::object& loss) {
            return evaluation(model, loss, [&](const ForwardFn& forward, const LossFn& loss_fn) {
              return self.evaluate(batches, forward, loss_fn);
            });
          },
          py::arg("batches"), py::arg("model"), py::arg("loss") = py::none())
      .def("step_counts", &Engine::step_counts, "(optimizer steps taken, steps skipped), read together")
      .def("host_syncs", [](const Engine& self) { return self.host_reads().by_source(); },
           "Every host read of device values so far, by what read them (HostReads in engine.h)")
      .def("note_host_read", [](Engine& self, const std::string& source) { self.host_reads().note(source); },
           py::arg("source"), "Counts a host read of device values made outside the engine (a checkpoint's copy)")
      .def("graph_stats",
           [](const Engine& self) {
             const GraphStats g = self.graph_stats();
             py::dict stats;
             stats["captured"] = g.captured;
             stats["replays"] = g.replays;
             stats["eager_steps"] = g.eager_steps;
             stats["reason"] = g.reason.empty() ? py::object(py::none()) : py::object(py::str(g.reason));
             return stats;
           },
           "cuda_graphs: steps captured, replayed and run eagerly, and why steps run eagerly (None: they do not)")
      .def("steps_in_pass", &Engine::steps_in_pass,
           "Optimizer steps completed in the current or last train_epoch, also after an exception")
      .def("set_accumulate_grad_batches", &Engine::set_accumulate_grad_batches, py::arg("accumulate_grad_batches"))
      .def("step_buffers", [](const Engine& self) {  // the live tensors, for address checks
        py::dict out;
        for (const auto& [name, tensor] : self.step_buffers()) out[py::str(name)] = tensor;
        return out;
      })
      .def("state", [](const Engine& self) {
        py::dict out;
        for (const auto& [name, tensor] : self.state()) out[py::str(name)] = tensor.detach().clone();
        return out;
      })
      .def("load_state", [](Engine& self, const std::map<std::string, at::Tensor>& state) {
        self.load_state(std::vector<std::pair<std::string, at::Tensor>>(state.begin(), state.end()));
      });
}

}  // namespace gpucore::python
