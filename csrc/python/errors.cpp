#include <pybind11/pybind11.h>

#include "gpucore/errors.h"
#include "python/module.h"

namespace py = pybind11;

namespace gpucore::python {

// MissingReaderError is a ConfigError, so it reaches Python as gpucore.ConfigError too.
void def_errors(py::module_& m) {
  py::register_exception<ConfigError>(m, "ConfigError", PyExc_ValueError);
  py::register_exception<DeviceUnavailableError>(m, "DeviceUnavailableError", PyExc_RuntimeError);
  py::register_exception<TrainingError>(m, "TrainingError", PyExc_RuntimeError);
}

}  // namespace gpucore::python
