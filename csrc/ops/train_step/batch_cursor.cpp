// The batch cursor op's checks and its C++ entry point through the dispatcher.
#include "ops/train_step/batch_cursor.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

namespace gpucore::ops {

void check_next_indices_inputs(const at::Tensor& order, const at::Tensor& cursor, const at::Tensor& index) {
  TORCH_CHECK(order.scalar_type() == at::kLong && order.dim() == 1 && order.is_contiguous(),
              "next_indices: order must be a contiguous int64 vector, got ", order.scalar_type(), " ", order.sizes());
  TORCH_CHECK(cursor.scalar_type() == at::kLong && cursor.numel() == 1,
              "next_indices: cursor must be one int64 value, got ", cursor.scalar_type(), " ", cursor.sizes());
  TORCH_CHECK(index.scalar_type() == at::kLong && index.dim() == 1 && index.is_contiguous(),
              "next_indices: index must be a contiguous int64 vector, got ", index.scalar_type(), " ", index.sizes());
  TORCH_CHECK(index.numel() <= order.numel(), "next_indices: a batch of ", index.numel(), " from an order of ",
              order.numel());
  TORCH_CHECK(cursor.device() == order.device() && index.device() == order.device(),
              "next_indices: order, cursor and index must be on one device");
}

void next_indices(const at::Tensor& order, const at::Tensor& cursor, const at::Tensor& index) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gpucore::next_indices", "")
                             .typed<void(const at::Tensor&, const at::Tensor&, const at::Tensor&)>();
  op.call(order, cursor, index);
}

// The schema (kernels in cpu/ and cuda/; the fake kernel in the Python module named here).
TORCH_LIBRARY_FRAGMENT(gpucore, m) {
  m.set_python_module("gpucore.ops");
  m.def("next_indices(Tensor order, Tensor(a!) cursor, Tensor(b!) index) -> ()");
}

}  // namespace gpucore::ops
