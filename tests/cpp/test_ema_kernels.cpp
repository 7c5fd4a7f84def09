// The EMA launcher (ops/cuda/ema_kernels.h) against the CPU kernel of its op (kernels_against_cpu.h).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels_against_cpu.h"
#include "ops/cuda/ema_kernels.h"
#include "ops/train_step/ema.h"

namespace gpucore::ops {
namespace {

TEST_F(KernelsAgainstCpu, EmaUpdate) {
  Random random(8);
  const EmaParams params{0.9, true, 1.0, 0.75};
  // The counters after a taken step, after the first one (a copy) and after a skipped one (no change).
  const std::vector<std::vector<float>> counter_states = {{5, 1, 0}, {1, 0, 0}, {5, 2, 1}};
  struct Group {
    at::ScalarType dtype;
    cuda::KernelDtype type;
    std::vector<int64_t> sizes;
  };
  std::vector<int64_t> full_chunk(cuda::kEmaChunkSize);  // a launch of kEmaChunkSize tensors (grid.y at its most)
  for (size_t i = 0; i < full_chunk.size(); ++i) full_chunk[i] = 1 + static_cast<int64_t>(i) * 13;
  // 300,000 values: more than the 1,024 blocks of 256 threads a tensor gets, so the grid-stride loop goes round.
  const std::vector<Group> groups = {{at::kFloat, cuda::KernelDtype::kFloat32, {1, 255, 256, 257, 1000, 300000}},
                                     {at::kDouble, cuda::KernelDtype::kFloat64, {3, 700}},
                                     {at::kHalf, cuda::KernelDtype::kFloat16, {1, 513}},
                                     {at::kBFloat16, cuda::KernelDtype::kBFloat16, full_chunk},
                                     {at::kLong, cuda::KernelDtype::kBytes, {1, 33}},
                                     {at::kByte, cuda::KernelDtype::kBytes, {7, 300}}};
  DtypePairs dtypes;
  for (const Group& group : groups) dtypes.emplace_back(group.dtype, group.type);
  expect_every_listed_dtype(dtypes, cuda::EmaDtypes::values);
  for (const auto& counter_values : counter_states) {
    const at::Tensor counters = at::tensor(counter_values);
    for (const Group& group : groups) {
      if (group.sizes.back() == 300000 && counter_values != counter_states[0]) continue;  // once is enough: slow
      SCOPED_TRACE(std::string(c10::toString(group.dtype)) + " counters " + std::to_string(counter_values[0]) + "," +
                   std::to_string(counter_values[2]));
      std::vector<at::Tensor> averages, sources;
      for (const int64_t size : group.sizes) {
        averages.push_back(random.uniform({size}, -100.0, 100.0, group.dtype));
        sources.push_back(random.uniform({size}, -100.0, 100.0, group.dtype));
      }
      std::vector<std::unique_ptr<DeviceCopy>> device_averages, device_sources;
      cuda::EmaChunk chunk{};
      for (size_t i = 0; i < averages.size(); ++i) {
        device_averages.push_back(std::make_unique<DeviceCopy>(averages[i]));
        device_sources.push_back(std::make_unique<DeviceCopy>(sources[i]));
        chunk.averages[i] = device_averages[i]->get();
        chunk.sources[i] = device_sources[i]->get();
        chunk.sizes[i] = group.type == cuda::KernelDtype::kBytes ? static_cast<int64_t>(averages[i].nbytes())
                                                             : averages[i].numel();
      }
      chunk.count = static_cast<int>(averages.size());
      const DeviceCopy counter(counters);
      cuda::launch_ema_update(cuda::EmaChunk{}, group.type, counter.get<float>(), params, nullptr);  // no tensors
      expect_ran();
      cuda::launch_ema_update(chunk, group.type, counter.get<float>(), params, nullptr);
      expect_ran();
      ema_update(averages, sources, counters, params);
      for (size_t i = 0; i < averages.size(); ++i) {
        SCOPED_TRACE("tensor " + std::to_string(i));
        expect_bitwise_equal(device_averages[i]->host(), averages[i]);
      }
    }
  }
}

}  // namespace
}  // namespace gpucore::ops
