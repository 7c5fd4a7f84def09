// pooled_norm.h's channels-last row passes for float32, compiled also for AVX2 and AVX-512 (vector_clones.h) in
// one place for both ops that use them; -ffp-contract=off (CMakeLists.txt): every version gives the same values.
#include "ops/cpu/pooled_norm.h"
#include "ops/cpu/vector_clones.h"

namespace gpucore::ops::pooled_norm {

GPUCORE_VECTOR_CLONES void row_pass_float(RowPass pass, const Row<float>& r) { row_pass<float>(pass, r); }

}  // namespace gpucore::ops::pooled_norm
