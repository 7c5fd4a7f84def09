// CPU kernel of the batch cursor op: a copy of the order's next indices, then the cursor moved past them.
#include <torch/library.h>

#include <algorithm>

#include "ops/train_step/batch_cursor.h"

namespace gpucore::ops {
namespace {

void next_indices_cpu(const at::Tensor& order, const at::Tensor& cursor, const at::Tensor& index) {
  check_next_indices_inputs(order, cursor, index);
  int64_t* position = cursor.data_ptr<int64_t>();
  const int64_t count = index.numel();
  TORCH_CHECK(*position >= 0 && *position + count <= order.numel(), "next_indices: a batch of ", count, " at ",
              *position, " runs past the order's ", order.numel(), " samples");
  std::copy_n(order.data_ptr<int64_t>() + *position, count, index.data_ptr<int64_t>());
  *position += count;
}

}  // namespace

TORCH_LIBRARY_IMPL(gpucore, CPU, m) { m.impl("next_indices", &next_indices_cpu); }

}  // namespace gpucore::ops
