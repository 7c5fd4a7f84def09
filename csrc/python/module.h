#pragma once
// gpucore._C is bound by area, one file each; bindings.cpp is the module that calls them all.
// Files that bind tensors, dtypes or devices include torch/csrc/utils/pybind.h, so that these cross
// as torch.Tensor, torch.dtype and torch.device; the others leave it out and compile faster.
#include <pybind11/pybind11.h>

namespace gpucore::python {

void def_errors(pybind11::module_& m);   // errors.cpp: the exceptions of errors.h
void def_device(pybind11::module_& m);   // device.cpp: facts, selection, precision, probes
void def_train(pybind11::module_& m);    // train.cpp: engine, optimizer, schedule, loss and scaler configs
void def_batches(pybind11::module_& m);  // batches.cpp: batch sources
void def_readers(pybind11::module_& m);  // readers.cpp: IDX, .npy/.npz and image readers

}  // namespace gpucore::python
