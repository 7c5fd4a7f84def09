// CPU kernels of the mix ops: one pass per output plane for the inputs (any strides, so channels-last batches
// stay channels-last), one per row for the targets; arithmetic as timm's (x * lam + x.flip(0) * (1 - lam)).
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include "ops/augment/mixup.h"

namespace gpucore::ops {
namespace {

template <typename T>
void mix_planes(const at::Tensor& in, const at::Tensor& out, const float* params) {
  using Math = at::opmath_type<T>;
  const int64_t n = in.size(0), channels = in.size(1), h = in.size(2), w = in.size(3);
  const auto is = in.strides(), os = out.strides();
  const T* src = in.const_data_ptr<T>();
  T* dst = out.mutable_data_ptr<T>();
  at::parallel_for(0, n * channels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t i = plane / channels, c = plane % channels, p = n - 1 - i;
      const float* row = params + i * kMixParams;
      const Math self_weight = row[kInputSelf], partner_weight = row[kInputPartner];
      const auto y0 = static_cast<int64_t>(row[kBoxY0]), y1 = static_cast<int64_t>(row[kBoxY1]);
      const auto x0 = static_cast<int64_t>(row[kBoxX0]), x1 = static_cast<int64_t>(row[kBoxX1]);
      for (int64_t y = 0; y < h; ++y) {
        for (int64_t x = 0; x < w; ++x) {
          const Math value = src[i * is[0] + c * is[1] + y * is[2] + x * is[3]];
          const bool inside = y >= y0 && y < y1 && x >= x0 && x < x1;
          dst[i * os[0] + c * os[1] + y * os[2] + x * os[3]] = static_cast<T>(
              inside ? value * self_weight + static_cast<Math>(src[p * is[0] + c * is[1] + y * is[2] + x * is[3]]) *
                                                 partner_weight
                     : value);
        }
      }
    }
  });
}

at::Tensor mix_inputs_cpu(const at::Tensor& inputs, const at::Tensor& params) {
  const at::Tensor images = mix_images_view(inputs);
  check_mix_params(inputs, params, "mix_inputs");
  at::Tensor out = at::empty_like(inputs);
  const at::Tensor rows = params.contiguous();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, inputs.scalar_type(), "mix_inputs_cpu", [&] {
    mix_planes<scalar_t>(images, mix_images_view(out), rows.const_data_ptr<float>());
  });
  return out;
}

at::Tensor mix_targets_cpu(const at::Tensor& targets, const at::Tensor& params, int64_t num_classes,
                           double smoothing) {
  check_mix_targets(targets, params, num_classes, smoothing);
  const at::Tensor labels = targets.to(at::kLong).contiguous(), rows = params.contiguous();
  const int64_t n = labels.size(0);
  const int64_t* label = labels.const_data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK(label[i] >= 0 && label[i] < num_classes, "mix_targets: class ", label[i], " of sample ", i,
                " is outside [0, ", num_classes, ")");
  }
  // As timm: the one-hot values are Python floats made float32, each term rounded before the sum.
  const auto off = static_cast<float>(smoothing / static_cast<double>(num_classes));
  const auto on = static_cast<float>(1.0 - smoothing + smoothing / static_cast<double>(num_classes));
  at::Tensor out = at::empty({n, num_classes}, targets.options().dtype(at::kFloat));
  float* dst = out.mutable_data_ptr<float>();
  const float* param = rows.const_data_ptr<float>();
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t own = label[i], partner = label[n - 1 - i];
      const float self_weight = param[i * kMixParams + kTargetSelf];
      const float partner_weight = param[i * kMixParams + kTargetPartner];
      for (int64_t c = 0; c < num_classes; ++c) {
        dst[i * num_classes + c] = (c == own ? on : off) * self_weight + (c == partner ? on : off) * partner_weight;
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(gpucore, CPU, m) {
  m.impl("mix_inputs", &mix_inputs_cpu);
  m.impl("mix_targets", &mix_targets_cpu);
}

}  // namespace gpucore::ops
