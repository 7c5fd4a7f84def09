// Batch sources: in-memory tensors, streamed image files, and any Python iterable.
#include <torch/csrc/utils/pybind.h>
#include <pybind11/stl.h>

#include "gpucore/data/file_batches.h"
#include "gpucore/train/batches.h"
#include "python/module.h"
#include "python/python_batches.h"

namespace py = pybind11;

namespace gpucore::python {

void def_batches(py::module_& m) {
  // dtype: torch.float32, torch.float16 or torch.bfloat16 (checked when a source is built).
  py::class_<AugmentConfig>(m, "AugmentConfig")
      .def(py::init<>())
      .def_readwrite("enabled", &AugmentConfig::enabled)
      .def_readwrite("crop_padding", &AugmentConfig::crop_padding)
      .def_readwrite("hflip", &AugmentConfig::hflip)
      .def_readwrite("mean", &AugmentConfig::mean)
      .def_readwrite("std", &AugmentConfig::std)
      .def_readwrite("channels_last", &AugmentConfig::channels_last)
      .def_readwrite("dtype", &AugmentConfig::dtype);

  py::class_<BatchSource>(m, "BatchSource");
  // next() returns (inputs, targets) or None at the end of the epoch; it may wait for reader threads.
  py::class_<EpochBatches, BatchSource>(m, "EpochBatches")
      .def("start_epoch", &EpochBatches::start_epoch, py::arg("epoch"), py::arg("skip_batches") = 0,
           py::call_guard<py::gil_scoped_release>())
      .def("set_shard", &EpochBatches::set_shard, py::arg("rank"), py::arg("world_size"), py::arg("first_sample") = 0)
      .def("remaining", &EpochBatches::remaining)
      .def("total_batches", &EpochBatches::total_batches)
      .def("position", &EpochBatches::position)
      .def("step_buffers", [](const EpochBatches& self) {  // the live tensors, for address checks
        py::dict out;
        for (const auto& [name, tensor] : self.step_buffers()) out[py::str(name)] = tensor;
        return out;
      })
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
      .def(py::init<at::Tensor, at::Tensor, int64_t, bool, bool, uint64_t, const at::Device&, AugmentConfig, bool>(),
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
                       bool shuffle, bool drop_last, uint64_t seed, const at::Device& device,
                       const AugmentConfig& augment, const FileBatchesConfig& config,
                       std::vector<std::string> mask_paths) {
             py::gil_scoped_release release;
             return std::make_unique<FileBatches>(std::move(paths), targets.value_or(at::Tensor()), batch_size,
                                                  shuffle, drop_last, seed, device, augment, config,
                                                  std::move(mask_paths));
           }),
           py::arg("paths"), py::arg("targets"), py::arg("batch_size"), py::arg("shuffle"), py::arg("drop_last"),
           py::arg("seed"), py::arg("device"), py::arg("augment"), py::arg("config"),
           py::arg("mask_paths") = std::vector<std::string>{})
      .def("skipped", &FileBatches::skipped)
      .def_property_readonly("height", &FileBatches::height)
      .def_property_readonly("width", &FileBatches::width);

  py::class_<PythonBatches, BatchSource>(m, "PythonBatches")
      .def(py::init<py::object, const at::Device&>(), py::arg("iterable"), py::arg("device"))
      .def("remaining", &PythonBatches::remaining);
}

}  // namespace gpucore::python
