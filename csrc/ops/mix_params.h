#pragma once
// The columns of the mix ops' params rows (ops/augment/mixup.h), free of torch headers for the CUDA kernels.
#include <cstdint>

namespace gpucore::ops {

constexpr int64_t kMixParams = 8;
enum MixParam { kInputSelf, kInputPartner, kTargetSelf, kTargetPartner, kBoxY0, kBoxY1, kBoxX0, kBoxX1 };

}  // namespace gpucore::ops
