// The batch cursor's launcher (ops/cuda/batch_cursor_kernels.h) against the CPU kernel of its op
// (kernels_against_cpu.h).
#include <gtest/gtest.h>

#include "kernels_against_cpu.h"
#include "ops/train_step/batch_cursor.h"
#include "ops/cuda/batch_cursor_kernels.h"

namespace gpucore::ops {
namespace {

TEST_F(KernelsAgainstCpu, NextIndices) {
  Random random(15);
  const at::Tensor order = random.permutation(1000);
  for (const int64_t count : {0, 1, 255, 256, 600}) {  // none, one, a block, past it, three blocks
    SCOPED_TRACE(count);
    const at::Tensor cursor = at::full({1}, 37, at::kLong), index = at::full({count}, -1, at::kLong);
    const DeviceCopy device_order(order), device_cursor(cursor), device_index(index);
    next_indices(order, cursor, index);
    cuda::launch_next_indices(device_order.get<int64_t>(), device_cursor.get<int64_t>(), device_index.get<int64_t>(),
                              count, nullptr);
    expect_ran();
    expect_bitwise_equal(device_index.host(), index);
    expect_bitwise_equal(device_cursor.host(), cursor);
  }
}

}  // namespace
}  // namespace gpucore::ops
