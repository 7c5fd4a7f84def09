// The max-pool + batch norm + ReLU launchers (ops/cuda/pool_norm_kernels.h) against the CPU kernels of their op
// (kernels_against_cpu.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "kernels_against_cpu.h"
#include "ops/cuda/pool_norm_kernels.h"
#include "ops/fused/pool_norm.h"

namespace gpucore::ops {
namespace {

// Both launchers against the CPU op, training and evaluation, every dtype, contiguous and channels-last: odd sizes
// (the last row and column in no window), N = 1, the smallest input, ties (integer values), a grid of several
// blocks. The pooled values are exact; the rest within rounding (the sums add in another order). The gradient
// buffer starts as NaN, so an element the kernels leave unwritten fails.
TEST_F(KernelsAgainstCpu, MaxPoolBatchNormRelu) {
  Random random(21);
  const std::vector<std::vector<int64_t>> shapes = {{3, 5, 7, 9}, {1, 4, 6, 6}, {2, 3, 2, 3}, {2, 6, 34, 33}};
  const DtypePairs dtypes = {{at::kFloat, cuda::KernelDtype::kFloat32},
                             {at::kDouble, cuda::KernelDtype::kFloat64},
                             {at::kHalf, cuda::KernelDtype::kFloat16},
                             {at::kBFloat16, cuda::KernelDtype::kBFloat16}};
  expect_every_listed_dtype(dtypes, cuda::PoolNormDtypes::values);
  for (const auto& [dtype, launch_type] : dtypes) {
    const at::ScalarType math = pool_norm_math_type(dtype);
    const bool exact = dtype == at::kDouble;
    const double rtol = exact ? 1e-12 : (dtype == at::kFloat ? 1e-5 : 1e-2), atol = exact ? 1e-12 : 1e-5;
    for (const bool channels_last : {false, true}) {
      for (const bool training : {true, false}) {
        for (const auto& shape : shapes) {
          for (const bool ties : {false, true}) {
            if (ties && dtype != at::kFloat) continue;  // the routing is the dtype's comparisons alike
            SCOPED_TRACE(shape_name(shape) + " " + c10::toString(dtype) + (channels_last ? " channels-last" : "") +
                         (training ? " training" : " eval") + (ties ? " ties" : ""));
            const int64_t channels = shape[1];
            at::Tensor input = ties ? random.integers(shape, 0, 3).to(dtype) : random.uniform(shape, -2, 2, dtype);
            input = pool_norm_layout(input, channels_last);
            const at::Tensor weight = random.uniform({channels}, 0.5, 1.5, math);
            const at::Tensor bias = random.uniform({channels}, -0.5, 0.5, math);
            const at::Tensor running_mean = random.uniform({channels}, -0.5, 0.5, math);
            const at::Tensor running_var = random.uniform({channels}, 0.5, 2.0, math);
            const auto [out, pooled, mean, invstd, new_mean, new_var] =
                maxpool_bn_relu(input, weight, bias, running_mean, running_var, training, 0.1, 1e-5);
            const cuda::PoolNormDims dims{shape[0], channels, shape[2], shape[3], shape[2] / 2, shape[3] / 2,
                                          channels_last};
            const DeviceCopy in(input), w(weight), b(bias), rm(running_mean), rv(running_var);
            const DeviceCopy pooled_out(at::empty_like(pooled)), out_out(at::empty_like(out));
            const DeviceCopy mean_out(at::empty_like(mean)), invstd_out(at::empty_like(invstd));
            const DeviceCopy new_mean_out(at::empty({channels}, math)), new_var_out(at::empty({channels}, math));
            const cuda::PoolNormChannels per_channel{w.get(), b.get(), rm.get(), rv.get(), mean_out.get(),
                                                     invstd_out.get(), new_mean_out.get(), new_var_out.get()};
            cuda::launch_maxpool_bn_relu(in.get(), pooled_out.get(), out_out.get(), per_channel, training, 0.1, 1e-5,
                                         dims, launch_type, nullptr);
            expect_ran();
            expect_bitwise_equal(pooled_out.host(), pooled);
            expect_close(mean_out.host(), mean, rtol, atol);
            expect_close(invstd_out.host(), invstd, rtol, atol);
            expect_close(out_out.host(), out, rtol, atol);
            if (training) {
              expect_close(new_mean_out.host(), new_mean, rtol, atol);
              expect_close(new_var_out.host(), new_var, rtol, atol);
            }
            // The backward from the CPU forward's outputs, on both.
            const at::Tensor grad_out = pool_norm_layout(random.uniform(out.sizes(), -1, 1, dtype), channels_last);
            const auto [grad_input, grad_weight, grad_bias] =
                maxpool_bn_relu_backward(grad_out, input, pooled, out, weight, mean, invstd, training);
            const DeviceCopy g(grad_out), p(pooled), o(out), m(mean), s(invstd);
            const DeviceCopy grad_in(at::full_like(input, std::numeric_limits<double>::quiet_NaN()));
            const DeviceCopy grad_w(at::empty_like(grad_weight)), grad_b(at::empty_like(grad_bias));
            cuda::launch_maxpool_bn_relu_backward(g.get(), in.get(), p.get(), o.get(), w.get(), m.get(), s.get(),
                                                  grad_in.get(), grad_w.get(), grad_b.get(), training, dims,
                                                  launch_type, nullptr);
            expect_ran();
            const at::Tensor device_grad = grad_in.host();
            EXPECT_FALSE(device_grad.isnan().any().item<bool>()) << "an input gradient left unwritten";
            expect_close(grad_w.host(), grad_weight, rtol, atol + rtol * grad_weight.abs().max().item<double>());
            expect_close(grad_b.host(), grad_bias, rtol, atol + rtol * grad_bias.abs().max().item<double>());
            const double scale = std::max(1.0, grad_input.abs().max().item<double>());
            expect_close(device_grad, grad_input, rtol, atol * scale + (exact ? 0.0 : rtol * scale));
            if (!training || shape[0] * (shape[2] / 2) * (shape[3] / 2) > 2) {  // routed to the same elements
              EXPECT_TRUE(device_grad.ne(0).equal(grad_input.ne(0)));
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace gpucore::ops
