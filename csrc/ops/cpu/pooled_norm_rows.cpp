// pooled_norm.h's channels-last row passes, compiled also for AVX2 and AVX-512 (vector_clones.h) for each floating
// type, in one place for both ops that use them; -ffp-contract=off (CMakeLists.txt): every version gives the same
// values.
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "ops/cpu/pooled_norm.h"
#include "ops/cpu/vector_clones.h"

namespace gpucore::ops::pooled_norm {

template <typename T>
GPUCORE_VECTOR_CLONES void run_row_pass(RowPass pass, const Row<T>& r) {
  row_pass<T>(pass, r);
}

template void run_row_pass<float>(RowPass, const Row<float>&);
template void run_row_pass<double>(RowPass, const Row<double>&);
template void run_row_pass<c10::BFloat16>(RowPass, const Row<c10::BFloat16>&);
template void run_row_pass<c10::Half>(RowPass, const Row<c10::Half>&);

}  // namespace gpucore::ops::pooled_norm
