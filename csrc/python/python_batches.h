#pragma once
// Batches from any Python iterable of (inputs, targets) with a len(): a torch DataLoader, a list.
// The engine pulls them with the GIL released; next() takes it for the Python iteration only.
#include <torch/csrc/utils/pybind.h>

#include <cstdint>

#include "gpucore/batches/batches.h"

namespace gpucore::python {

class PythonBatches : public BatchSource {
 public:
  PythonBatches(pybind11::object iterable, const at::Device& device);
  int64_t remaining() const override { return remaining_; }
  bool next(at::Tensor& inputs, at::Tensor& targets) override;

 private:
  pybind11::object iterable_, iterator_;
  at::Device device_;
  int64_t remaining_ = 0;
};

}  // namespace gpucore::python
