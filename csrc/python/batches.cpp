// Batch sources: in-memory tensors, streamed image files, and any Python iterable.
#include <torch/csrc/utils/pybind.h>
#include <pybind11/stl.h>

#include <ATen/CPUGeneratorImpl.h>

#include <optional>

#include "gpucore/batches/batches.h"
#include "gpucore/batches/file_batches.h"
#include "gpucore/errors.h"
#include "python/module.h"
#include "python/python_batches.h"

namespace py = pybind11;

namespace gpucore::python {

void def_batches(py::module_& m) {
  // dtype: torch.float32, torch.float16 or torch.bfloat16 (checked when a source is built).
  // One entry of the `transforms` list (gpucore.transforms builds them from the config).
  py::class_<TransformSpec>(m, "TransformSpec")
      .def(py::init<>())
      .def_readwrite("name", &TransformSpec::name)
      .def_readwrite("numbers", &TransformSpec::numbers)
      .def_readwrite("words", &TransformSpec::words);
  m.def("transform_names", &transform_names);
  m.def("transform_arguments", &transform_arguments);  // the docs' transforms reference
  m.def("validation_form", &validation_form, py::arg("specs"));
  // Builds the list as training would (a ConfigError names a bad entry); returns the output (height, width)
  // of height x width input images, drawing one set of parameters to check they can be drawn.
  m.def("check_transforms", [](const std::vector<TransformSpec>& specs, int64_t height, int64_t width) {
    const TransformPipeline pipeline(specs, {}, {});
    if (height > 0 && width > 0) {
      at::Generator generator = at::detail::createCPUGenerator(0);
      pipeline.sample(1, height, width, generator);
    }
    const auto size = pipeline.output_size(height, width);
    return std::make_pair(size[0], size[1]);
  }, py::arg("specs"), py::arg("height") = 0, py::arg("width") = 0);
  // The parameters the list draws for `samples` height x width images (as apply_transforms draws them for a
  // batch of that many), per transform in pipeline order: tests compare their distributions with torchvision's.
  m.def("sample_transforms", [](const std::vector<TransformSpec>& specs, int64_t samples, int64_t height,
                                int64_t width, uint64_t seed, int64_t epoch) {
    const TransformPipeline pipeline(specs, {}, {});
    at::Generator generator = at::detail::createCPUGenerator(transform_seed(seed, epoch));
    return pipeline.sample(samples, height, width, generator);
  }, py::arg("specs"), py::arg("samples"), py::arg("height"), py::arg("width"), py::arg("seed") = 0,
        py::arg("epoch") = 0);
  // The list applied to N x C x H x W images as one training batch: the parameters training draws for the first N
  // samples of epoch `epoch` of a run seeded `seed`, normalised by mean/std unless the list has a Normalize, as
  // `dtype` (None: uint8 images stay uint8 unless the list normalises, then float32; float images stay float32).
  // Returns the batch and the drawn parameters (per transform, in names' order). gpucore.transforms.Compose and
  // evaluation (the list's deterministic form) use it.
  m.def("apply_transforms", [](const at::Tensor& images, const std::vector<TransformSpec>& specs,
                               std::vector<double> mean, std::vector<double> std, uint64_t seed, int64_t epoch,
                               std::optional<at::ScalarType> dtype) {
    if (images.dim() != 4) {
      throw ConfigError("transforms need N x C x H x W images, got shape " + c10::str(images.sizes()));
    }
    if (epoch < 0) throw ConfigError("transforms: epoch must be >= 0, got " + std::to_string(epoch));
    const TransformPipeline pipeline(specs, std::move(mean), std::move(std));
    at::Generator generator = at::detail::createCPUGenerator(transform_seed(seed, epoch));
    const auto drawn = pipeline.sample(images.size(0), images.size(2), images.size(3), generator);
    auto params = drawn;
    for (auto& tensors : params) {
      for (auto& tensor : tensors) tensor = tensor.to(images.device());
    }
    at::Tensor masks;
    const at::ScalarType out = dtype.value_or(images.scalar_type() == at::kByte && !pipeline.normalizes() ? at::kByte
                                                                                                      : at::kFloat);
    return std::make_pair(pipeline.apply(images, params, out, masks), drawn);
  }, py::arg("images"), py::arg("specs"), py::arg("mean"), py::arg("std"), py::arg("seed") = 0, py::arg("epoch") = 0,
        py::arg("dtype") = py::none(), py::call_guard<py::gil_scoped_release>());
  // How many of the list's first transforms run per image, at each image's own size (0: none; a data set of mixed
  // sizes needs some), and the seed sample `sample`'s draws of them come from in epoch `epoch` of a run seeded
  // `seed` (torch.manual_seed(it) and torchvision's make_params draw the same).
  m.def("per_image_count", [](const std::vector<TransformSpec>& specs) {
    return TransformPipeline(specs, {}, {}).per_image_count();
  });
  // What a data set's plan needs of its list, from one call: how many of the first transforms run per image, the
  // list's deterministic form per entry (validation_form) and how many of that form's run per image.
  m.def("transform_plan", [](const std::vector<TransformSpec>& specs) {
    const auto deterministic = validation_form(specs);
    std::vector<TransformSpec> flat;
    for (const auto& replacement : deterministic) flat.insert(flat.end(), replacement.begin(), replacement.end());
    return py::dict(py::arg("per_image_count") = TransformPipeline(specs, {}, {}).per_image_count(),
                    py::arg("validation_form") = deterministic,
                    py::arg("validation_per_image_count") = TransformPipeline(flat, {}, {}).per_image_count());
  }, py::arg("specs"));
  m.def("per_image_sample_seed", [](const std::vector<TransformSpec>& specs, uint64_t seed, int64_t epoch,
                                    int64_t sample) {
    const TransformPipeline pipeline(specs, {}, {});
    at::Generator generator = at::detail::createCPUGenerator(transform_seed(seed, epoch));
    uint64_t per_image_seed = 0;
    pipeline.sample(0, 0, 0, generator, &per_image_seed);
    return sample_seed(per_image_seed, sample);
  }, py::arg("specs"), py::arg("seed"), py::arg("epoch"), py::arg("sample"));
  // The names of the list's transforms in the order they run and draw (Normalize is not one).
  m.def("transform_order", [](const std::vector<TransformSpec>& specs) {
    return TransformPipeline(specs, {}, {}).names();
  });
  py::class_<AugmentConfig>(m, "AugmentConfig")
      .def(py::init<>())
      .def_readwrite("enabled", &AugmentConfig::enabled)
      .def_readwrite("transforms", &AugmentConfig::transforms)
      .def_readwrite("mean", &AugmentConfig::mean)
      .def_readwrite("std", &AugmentConfig::std)
      .def_readwrite("channels_last", &AugmentConfig::channels_last)
      .def_readwrite("dtype", &AugmentConfig::dtype);

  py::class_<BatchSource>(m, "BatchSource");
  // next() returns (inputs, targets) or None at the end of the epoch; it may wait for reader threads.
  py::class_<EpochBatches, BatchSource>(m, "EpochBatches")
      .def("start_epoch", &EpochBatches::start_epoch, py::arg("epoch"), py::arg("skip_batches") = 0,
           py::call_guard<py::gil_scoped_release>())
      .def("set_sampling_weights", &EpochBatches::set_sampling_weights, py::arg("weights"))
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
      .def_readwrite("skip_errors", &FileBatchesConfig::skip_errors)
      .def_readwrite("exif_orientation", &FileBatchesConfig::exif_orientation)
      .def_readwrite("own_sizes", &FileBatchesConfig::own_sizes)
      .def_property(
          "decode", [](const FileBatchesConfig& c) { return c.decode == DecodeScaling::kFast ? "fast" : "exact"; },
          [](FileBatchesConfig& c, const std::string& name) { c.decode = parse_decode_scaling(name); });
  py::class_<FileBatches, EpochBatches>(m, "FileBatches")
      .def(py::init([](std::vector<std::string> paths, const std::optional<at::Tensor>& targets, int64_t batch_size,
                       bool shuffle, bool drop_last, uint64_t seed, const at::Device& device,
                       const AugmentConfig& augment, const FileBatchesConfig& config,
                       std::vector<std::string> mask_paths, std::vector<at::Tensor> images,
                       const std::optional<at::Tensor>& mask_table) {
             py::gil_scoped_release release;
             return std::make_unique<FileBatches>(std::move(paths), targets.value_or(at::Tensor()), batch_size,
                                                  shuffle, drop_last, seed, device, augment, config,
                                                  std::move(mask_paths), std::move(images),
                                                  mask_table.value_or(at::Tensor()));
           }),
           py::arg("paths"), py::arg("targets"), py::arg("batch_size"), py::arg("shuffle"), py::arg("drop_last"),
           py::arg("seed"), py::arg("device"), py::arg("augment"), py::arg("config"),
           py::arg("mask_paths") = std::vector<std::string>{}, py::arg("images") = std::vector<at::Tensor>{},
           py::arg("mask_table") = std::nullopt)
      .def("skipped", &FileBatches::skipped)
      .def_property_readonly("height", &FileBatches::height)
      .def_property_readonly("width", &FileBatches::width)
      .def_property_readonly("per_image", &FileBatches::per_image);

  py::class_<PythonBatches, BatchSource>(m, "PythonBatches")
      .def(py::init<py::object, const at::Device&>(), py::arg("iterable"), py::arg("device"))
      .def("remaining", &PythonBatches::remaining);
}

}  // namespace gpucore::python
