// Bindings of everything that takes or returns tensors (the training core, the data readers). The
// only translation unit that includes torch's Python headers (for the Tensor type casters), so the
// rest of the build stays fast.
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "gpucore/data/file_batches.h"
#include "gpucore/data/readers.h"
#include "gpucore/errors.h"
#include "gpucore/train/batches.h"
#include "gpucore/train/engine.h"
#include "gpucore/train/losses.h"
#include "gpucore/train/metrics.h"
#include "gpucore/train/schedule.h"

namespace py = pybind11;
using namespace gpucore;

namespace {

// Batches from any Python iterable of (inputs, targets) with a len(): a torch DataLoader, a list.
class PythonBatches : public BatchSource {
 public:
  PythonBatches(py::object iterable, const std::string& device)
      : iterable_(std::move(iterable)), device_(device) {
    remaining_ = static_cast<int64_t>(py::len(iterable_));
    iterator_ = py::iter(iterable_);
  }
  int64_t remaining() const override { return remaining_; }
  bool next(at::Tensor& inputs, at::Tensor& targets) override {
    py::gil_scoped_acquire gil;
    if (remaining_ <= 0) return false;
    auto item = py::reinterpret_steal<py::object>(PyIter_Next(iterator_.ptr()));
    if (!item) {
      if (PyErr_Occurred()) throw py::error_already_set();
      remaining_ = 0;
      return false;
    }
    py::sequence pair = item.cast<py::sequence>();
    if (pair.size() < 2) throw ConfigError("each batch must be (inputs, targets), got " + std::to_string(pair.size()) + " item(s)");
    inputs = pair[0].cast<at::Tensor>().to(device_, /*non_blocking=*/true);
    targets = pair[1].cast<at::Tensor>().to(device_, /*non_blocking=*/true);
    --remaining_;
    return true;
  }

 private:
  py::object iterable_, iterator_;
  at::Device device_;
  int64_t remaining_ = 0;
};

at::Tensor as_tensor(const py::object& value, const char* what) {
  if (!THPVariable_Check(value.ptr())) {
    throw ConfigError(std::string(what) + " must return a torch.Tensor, got " +
                      py::str(py::type::of(value).attr("__name__")).cast<std::string>());
  }
  return value.cast<at::Tensor>();
}

// Calls a Python nn.Module (or any callable) with the GIL held for the call only. For a
// DistributedDataParallel model, require_backward_grad_sync is what its no_sync() context toggles.
ForwardFn python_forward(const py::object& model) {
  const bool data_parallel = py::hasattr(model, "require_backward_grad_sync");
  return [model, data_parallel](const at::Tensor& inputs, bool sync_gradients) {
    py::gil_scoped_acquire gil;
    if (data_parallel) model.attr("require_backward_grad_sync") = sync_gradients;
    return as_tensor(model(inputs), "the model");
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
  return [on_log](const std::map<std::string, double>& metrics) {
    py::gil_scoped_acquire gil;
    on_log(metrics);
  };
}

py::dict stats_dict(const EpochStats& stats) {
  py::dict out;
  out["metrics"] = stats.metrics;
  out["optimizer_steps"] = stats.optimizer_steps;
  out["samples"] = stats.samples;
  out["seconds"] = stats.seconds;
  return out;
}

std::optional<at::ScalarType> parse_autocast(const std::string& name) {
  if (name.empty()) return std::nullopt;
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  throw ConfigError("autocast dtype '" + name + "' is not one of bfloat16, float16 or empty");
}

}  // namespace

void bind_tensor_api(py::module_& m) {
  py::register_exception<TrainingError>(m, "TrainingError", PyExc_RuntimeError);

  py::class_<LossConfig>(m, "LossConfig")
      .def(py::init<>())
      .def_property("kind", [](const LossConfig&) { return py::none(); },
                    [](LossConfig& c, const std::string& name) { c.kind = parse_loss(name); })
      .def_readwrite("label_smoothing", &LossConfig::label_smoothing)
      .def_readwrite("heads", &LossConfig::heads);
  m.def("reported_metrics", &reported_metrics, py::arg("loss"), py::arg("top_k"));

  py::class_<OptimizerConfig>(m, "OptimizerConfig")
      .def(py::init<>())
      .def_property("kind", [](const OptimizerConfig&) { return py::none(); },
                    [](OptimizerConfig& c, const std::string& name) { c.kind = parse_optimizer(name); })
      .def_readwrite("momentum", &OptimizerConfig::momentum)
      .def_readwrite("nesterov", &OptimizerConfig::nesterov)
      .def_readwrite("beta1", &OptimizerConfig::beta1)
      .def_readwrite("beta2", &OptimizerConfig::beta2)
      .def_readwrite("eps", &OptimizerConfig::eps);

  py::class_<ScheduleConfig>(m, "ScheduleConfig")
      .def(py::init<>())
      .def_property("kind", [](const ScheduleConfig&) { return py::none(); },
                    [](ScheduleConfig& c, const std::string& name) { c.kind = parse_schedule(name); })
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
  m.def("learning_rate", [](const ScheduleConfig& c, const at::Tensor& step) {
    validate(c);
    return learning_rate(c, step);
  });

  py::class_<GradScalerConfig>(m, "GradScalerConfig")
      .def(py::init<>())
      .def_readwrite("enabled", &GradScalerConfig::enabled)
      .def_readwrite("init_scale", &GradScalerConfig::init_scale)
      .def_readwrite("growth_factor", &GradScalerConfig::growth_factor)
      .def_readwrite("backoff_factor", &GradScalerConfig::backoff_factor)
      .def_readwrite("growth_interval", &GradScalerConfig::growth_interval);

  py::class_<EngineConfig>(m, "EngineConfig")
      .def(py::init<>())
      .def_readwrite("device", &EngineConfig::device)
      .def_property("autocast_dtype", [](const EngineConfig&) { return py::none(); },
                    [](EngineConfig& c, const std::string& name) { c.autocast_dtype = parse_autocast(name); })
      .def_property("param_dtype", [](const EngineConfig&) { return py::none(); },
                    [](EngineConfig& c, const std::string& name) {
                      c.param_dtype = name == "float64" ? at::kDouble : at::kFloat;
                    })
      .def_readwrite("accumulate", &EngineConfig::accumulate)
      .def_readwrite("clip_grad_norm", &EngineConfig::clip_grad_norm)
      .def_readwrite("clip_grad_value", &EngineConfig::clip_grad_value)
      .def_readwrite("channels_last", &EngineConfig::channels_last)
      .def_readwrite("log_every", &EngineConfig::log_every)
      .def_readwrite("max_consecutive_nonfinite", &EngineConfig::max_consecutive_nonfinite)
      .def_readwrite("top_k", &EngineConfig::top_k)
      .def_readwrite("loss", &EngineConfig::loss)
      .def_readwrite("optimizer", &EngineConfig::optimizer)
      .def_readwrite("schedule", &EngineConfig::schedule)
      .def_readwrite("scaler", &EngineConfig::scaler);

  py::class_<AugmentConfig>(m, "AugmentConfig")
      .def(py::init<>())
      .def_readwrite("enabled", &AugmentConfig::enabled)
      .def_readwrite("crop_padding", &AugmentConfig::crop_padding)
      .def_readwrite("hflip", &AugmentConfig::hflip)
      .def_readwrite("mean", &AugmentConfig::mean)
      .def_readwrite("std", &AugmentConfig::std)
      .def_readwrite("channels_last", &AugmentConfig::channels_last)
      .def_property(
          "dtype",
          [](const AugmentConfig& c) {
            return std::string(c.dtype == at::kHalf ? "float16" : c.dtype == at::kBFloat16 ? "bfloat16" : "float32");
          },
          [](AugmentConfig& c, const std::string& name) {
            if (name == "float32") c.dtype = at::kFloat;
            else if (name == "float16") c.dtype = at::kHalf;
            else if (name == "bfloat16") c.dtype = at::kBFloat16;
            else throw ConfigError("batch dtype must be float32, float16 or bfloat16, got '" + name + "'");
          });

  py::class_<BatchSource>(m, "BatchSource");
  // next() returns (inputs, targets) or None at the end of the epoch; it may wait for reader threads.
  py::class_<EpochBatches, BatchSource>(m, "EpochBatches")
      .def("start_epoch", &EpochBatches::start_epoch, py::arg("epoch"), py::arg("skip_batches") = 0,
           py::call_guard<py::gil_scoped_release>())
      .def("set_shard", &EpochBatches::set_shard, py::arg("rank"), py::arg("world_size"))
      .def("remaining", &EpochBatches::remaining)
      .def("total_batches", &EpochBatches::total_batches)
      .def("position", &EpochBatches::position)
      .def("__len__", &EpochBatches::total_batches)
      .def("next", [](EpochBatches& self) -> py::object {
        at::Tensor inputs, targets;
        bool more;
        {
          py::gil_scoped_release release;
          more = self.next(inputs, targets);
        }
        if (!more) return py::none();
        return py::make_tuple(inputs, targets);
      });
  py::class_<TensorBatches, EpochBatches>(m, "TensorBatches")
      .def(py::init([](at::Tensor inputs, at::Tensor targets, int64_t batch_size, bool shuffle, bool drop_last,
                       uint64_t seed, const std::string& device, const AugmentConfig& augment, bool resident) {
             return std::make_unique<TensorBatches>(std::move(inputs), std::move(targets), batch_size, shuffle,
                                                    drop_last, seed, c10::Device(device), augment, resident);
           }),
           py::arg("inputs"), py::arg("targets"), py::arg("batch_size"), py::arg("shuffle"), py::arg("drop_last"),
           py::arg("seed"), py::arg("device"), py::arg("augment") = AugmentConfig{}, py::arg("resident") = true);

  py::class_<FileBatchesConfig>(m, "FileBatchesConfig")
      .def(py::init<>())
      .def_readwrite("channels", &FileBatchesConfig::channels)
      .def_readwrite("height", &FileBatchesConfig::height)
      .def_readwrite("width", &FileBatchesConfig::width)
      .def_readwrite("resize", &FileBatchesConfig::resize)
      .def_readwrite("threads", &FileBatchesConfig::threads)
      .def_readwrite("prefetch", &FileBatchesConfig::prefetch)
      .def_readwrite("skip_errors", &FileBatchesConfig::skip_errors);
  py::class_<FileBatches, EpochBatches>(m, "FileBatches")
      .def(py::init([](std::vector<std::string> paths, const std::optional<at::Tensor>& targets, int64_t batch_size,
                       bool shuffle, bool drop_last, uint64_t seed, const std::string& device,
                       const AugmentConfig& augment, const FileBatchesConfig& config,
                       std::vector<std::string> mask_paths) {
             py::gil_scoped_release release;
             return std::make_unique<FileBatches>(std::move(paths), targets.value_or(at::Tensor()), batch_size,
                                                  shuffle, drop_last, seed, c10::Device(device), augment, config,
                                                  std::move(mask_paths));
           }),
           py::arg("paths"), py::arg("targets"), py::arg("batch_size"), py::arg("shuffle"), py::arg("drop_last"),
           py::arg("seed"), py::arg("device"), py::arg("augment"), py::arg("config"),
           py::arg("mask_paths") = std::vector<std::string>{})
      .def("skipped", &FileBatches::skipped)
      .def_property_readonly("height", &FileBatches::height)
      .def_property_readonly("width", &FileBatches::width);

  py::class_<PythonBatches, BatchSource>(m, "PythonBatches")
      .def(py::init<py::object, const std::string&>(), py::arg("iterable"), py::arg("device"))
      .def("remaining", &PythonBatches::remaining);

  py::class_<Engine>(m, "Engine")
      .def(py::init([](const std::vector<std::pair<std::vector<at::Tensor>, double>>& groups, const EngineConfig& config) {
             std::vector<ParamGroup> param_groups;
             for (const auto& [params, weight_decay] : groups) param_groups.push_back({params, weight_decay});
             return std::make_unique<Engine>(std::move(param_groups), config);
           }),
           py::arg("param_groups"), py::arg("config"))
      .def(
          "train_epoch",
          [](Engine& self, BatchSource& batches, const py::object& model, const py::object& loss, const py::object& on_log) {
            const ForwardFn forward = python_forward(model);
            const LossFn loss_fn = python_loss(loss);
            const LogFn log_fn = python_log(on_log);
            EpochStats stats;
            {
              py::gil_scoped_release release;
              stats = self.train_epoch(batches, forward, loss_fn, log_fn);
            }
            return stats_dict(stats);
          },
          py::arg("batches"), py::arg("model"), py::arg("loss") = py::none(), py::arg("on_log") = py::none())
      .def(
          "evaluate",
          [](Engine& self, BatchSource& batches, const py::object& model, const py::object& loss) {
            const ForwardFn forward = python_forward(model);
            const LossFn loss_fn = python_loss(loss);
            EpochStats stats;
            {
              py::gil_scoped_release release;
              stats = self.evaluate(batches, forward, loss_fn);
            }
            return stats_dict(stats);
          },
          py::arg("batches"), py::arg("model"), py::arg("loss") = py::none())
      .def("steps_taken", &Engine::steps_taken)
      .def("steps_skipped", &Engine::steps_skipped)
      .def("host_syncs", &Engine::host_syncs)
      .def("windows_in_epoch", &Engine::windows_in_epoch)
      .def("set_accumulate", &Engine::set_accumulate, py::arg("accumulate"))
      .def("current_lr", &Engine::current_lr)
      .def("loss_scale", &Engine::loss_scale)
      .def("state", [](const Engine& self) {
        py::dict out;
        for (const auto& [name, tensor] : self.state()) out[py::str(name)] = tensor.detach().clone();
        return out;
      })
      .def("load_state", [](Engine& self, const std::map<std::string, at::Tensor>& state) {
        self.load_state(std::vector<std::pair<std::string, at::Tensor>>(state.begin(), state.end()));
      });

  m.def("read_idx", &read_idx, py::arg("path"), py::call_guard<py::gil_scoped_release>());
  m.def("read_npy", &read_npy, py::arg("path"), py::call_guard<py::gil_scoped_release>());
  m.def(
      "read_npz",
      [](const std::string& path) {
        std::vector<std::pair<std::string, at::Tensor>> arrays;
        {
          py::gil_scoped_release release;
          arrays = read_npz(path);
        }
        py::dict named;
        for (const auto& [name, array] : arrays) named[py::str(name)] = array;
        return named;
      },
      py::arg("path"));
  m.def("decode_image", &decode_image, py::arg("path"), py::arg("channels"), py::call_guard<py::gil_scoped_release>());
  m.def(
      "decode_images",
      [](const std::vector<std::string>& paths, int64_t channels, int64_t threads, bool skip_errors, int64_t height,
         int64_t width, bool nearest) {
        DecodedImages decoded;
        {
          py::gil_scoped_release release;
          decoded = decode_images(paths, channels, threads, skip_errors, height, width, nearest);
        }
        return py::make_tuple(decoded.images, decoded.kept, decoded.skipped);
      },
      py::arg("paths"), py::arg("channels"), py::arg("threads"), py::arg("skip_errors"), py::arg("height") = 0,
      py::arg("width") = 0, py::arg("nearest") = false);
  m.def("mask_classes", &mask_classes, py::arg("masks"));
  m.def("missing_reader_message", &missing_reader_message, py::arg("format"));
  m.def("set_max_image_pixels", &set_max_image_pixels, py::arg("pixels"));
  m.def("max_image_pixels", &max_image_pixels);
}
