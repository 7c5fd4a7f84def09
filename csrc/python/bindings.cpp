// gpucore._C: thin pybind11 bindings over the core. They convert arguments, release the GIL around
// work that does not touch Python, and call the core; nothing else lives here.
#include "python/module.h"

PYBIND11_MODULE(_C, m) {
  m.doc() = "gpucore native core";
  gpucore::python::def_errors(m);
  gpucore::python::def_device(m);
  gpucore::python::def_train(m);
  gpucore::python::def_batches(m);
  gpucore::python::def_readers(m);
}
