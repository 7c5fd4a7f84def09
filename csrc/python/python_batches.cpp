#include "python/python_batches.h"

#include <string>

#include "gpucore/errors.h"

namespace py = pybind11;

namespace gpucore::python {

PythonBatches::PythonBatches(py::object iterable, const at::Device& device)
    : iterable_(std::move(iterable)), device_(device) {
  remaining_ = static_cast<int64_t>(py::len(iterable_));
  iterator_ = py::iter(iterable_);
}

bool PythonBatches::next(at::Tensor& inputs, at::Tensor& targets) {
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

}  // namespace gpucore::python
