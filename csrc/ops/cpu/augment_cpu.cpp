// CPU kernel of the augment op: one pass per output plane, crop + flip + scale/shift computed in float and
// written in the requested dtype.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <type_traits>

#include "ops/augment/augment.h"
#include "ops/cpu/batch_memory.h"
#include "ops/cpu/shifted_plane.h"
#include "ops/cpu/vector_clones.h"
#include "ops/float_contiguous.h"

namespace gpucore::ops {
namespace {

// row[x] = from[x] * a + b for x in [0, count), or from[-x] for a flipped row. uint8 -> float32, the common case,
// runs in the two cloned functions (32-byte vectors, reversed loads); the other dtypes in plain loops.
GPUCORE_VECTOR_CLONES void scale_bytes(const uint8_t* __restrict from, float* __restrict row, int64_t count, float a,
                                          float b) {
  for (int64_t x = 0; x < count; ++x) row[x] = static_cast<float>(from[x]) * a + b;
}

GPUCORE_VECTOR_CLONES void scale_bytes_reversed(const uint8_t* __restrict from, float* __restrict row, int64_t count,
                                                   float a, float b) {
  for (int64_t x = 0; x < count; ++x) row[x] = static_cast<float>(from[-x]) * a + b;
}

template <typename In, typename Out>
void scale_run(const In* from, Out* row, int64_t count, float a, float b, bool reversed) {
  if constexpr (std::is_same_v<In, uint8_t> && std::is_same_v<Out, float>) {
    reversed ? scale_bytes_reversed(from, row, count, a, b) : scale_bytes(from, row, count, a, b);
  } else {
    for (int64_t x = 0; x < count; ++x) row[x] = static_cast<Out>(static_cast<float>(from[reversed ? -x : x]) * a + b);
  }
}

template <typename In, typename Out>
void augment_planes(const at::Tensor& images, const int64_t* offsets, const bool* flips,
                    const std::vector<float>& scale, const std::vector<float>& shift, Out* out) {
  const int64_t n = images.size(0), channels = images.size(1), h = images.size(2), w = images.size(3);
  const In* in = images.data_ptr<In>();
  at::parallel_for(0, n * channels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t image = plane / channels, c = plane % channels;
      const int64_t dy = offsets[image * 2], dx = offsets[image * 2 + 1];
      const bool flip = flips[image];
      const In* src = in + plane * h * w;
      Out* dst = out + plane * h * w;
      const float a = scale[c], b = shift[c];
      const Out padded = static_cast<Out>(0.0f * a + b);  // what a pixel outside the image becomes
      write_shifted_plane(h, w, h, w, dy, dx, false, flip, padded, dst, [&](int64_t offset, Out* row, int64_t count) {
        scale_run(src + offset, row, count, a, b, flip);
      });
    }
  });
}

at::Tensor augment_cpu(const at::Tensor& images, const at::Tensor& offsets, const at::Tensor& flips,
                       at::ArrayRef<double> mean, at::ArrayRef<double> std, at::ScalarType dtype) {
  const std::vector<double> mean_values(mean.begin(), mean.end()), std_values(std.begin(), std.end());
  check_augment_inputs(images, offsets, flips, mean_values, std_values);
  std::vector<float> scale, shift;
  augment_affine(images, mean_values, std_values, scale, shift);
  const at::Tensor in = images.scalar_type() == at::kByte ? images.contiguous() : float_contiguous(images);
  const at::Tensor off = offsets.contiguous(), flip = flips.contiguous();
  at::Tensor out = empty_batch(images.sizes(), images.options().dtype(dtype));
  const int64_t* off_data = off.data_ptr<int64_t>();
  const bool* flip_data = flip.data_ptr<bool>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "augment_cpu", [&] {
    if (in.scalar_type() == at::kByte) {
      augment_planes<uint8_t>(in, off_data, flip_data, scale, shift, out.data_ptr<scalar_t>());
    } else {
      augment_planes<float>(in, off_data, flip_data, scale, shift, out.data_ptr<scalar_t>());
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(gpucore, CPU, m) { m.impl("augment", &augment_cpu); }

}  // namespace gpucore::ops
