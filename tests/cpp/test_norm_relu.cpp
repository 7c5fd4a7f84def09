// gpucore::bn_add_relu (ops/norm_relu.h) through its C++ entry points: against ATen's batch_norm, add and relu and
// their gradients, bit for bit the same with one thread as with several (its sums go in a fixed order, which
// bitwise resumes rely on), and its refusals.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "ops/norm_relu.h"

namespace gpucore::ops {
namespace {

struct Norm {
  at::Tensor weight, bias, running_mean, running_var;
};

Norm random_norm(int64_t channels) {
  return {at::rand({channels}) + 0.5, at::rand({channels}) - 0.5, at::rand({channels}) - 0.5,
          at::rand({channels}) + 0.5};
}

TEST(NormRelu, MatchesAtenOpsAndTheirGradients) {
  at::manual_seed(7);
  for (const auto& shape : std::vector<std::vector<int64_t>>{{8, 16, 14, 14}, {3, 5, 7, 9}, {2, 33, 1, 3}}) {
    for (const bool channels_last : {false, true}) {
      for (const bool residual : {false, true}) {
        for (const bool training : {true, false}) {
          SCOPED_TRACE(std::to_string(shape[1]) + " channels" + (channels_last ? " channels-last" : "") +
                       (residual ? " residual" : "") + (training ? " training" : " eval"));
          const auto format = channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
          const at::Tensor input = (at::randn(shape) * 2 + 0.5).contiguous(format);
          const at::Tensor skip = at::randn(shape).contiguous(format);
          const Norm n = random_norm(shape[1]);
          const std::optional<at::Tensor> res = residual ? std::optional<at::Tensor>(skip) : std::nullopt;
          const auto [out, mean, invstd, new_mean, new_var] =
              bn_add_relu(input, res, n.weight, n.bias, n.running_mean, n.running_var, training, 0.1, 1e-5);
          const at::Tensor x = input.clone().set_requires_grad(true), r = skip.clone().set_requires_grad(true);
          const at::Tensor weight = n.weight.clone().set_requires_grad(true);
          const at::Tensor bias = n.bias.clone().set_requires_grad(true);
          const at::Tensor running_mean = n.running_mean.clone(), running_var = n.running_var.clone();
          const at::Tensor norm =
              at::batch_norm(x, weight, bias, running_mean, running_var, training, 0.1, 1e-5, false);
          const at::Tensor expected = at::relu(residual ? norm + r : norm);
          EXPECT_TRUE(at::allclose(out, expected, 1e-5, 1e-5)) << (out - expected).abs().max().item<double>();
          EXPECT_EQ(out.is_contiguous(format), true);
          if (training) {
            EXPECT_TRUE(at::allclose(new_mean, running_mean, 1e-5, 1e-6));
            EXPECT_TRUE(at::allclose(new_var, running_var, 1e-5, 1e-6));
          } else {
            EXPECT_EQ(new_mean.numel(), 0);
          }
          const at::Tensor grad_out = at::randn(shape);
          expected.backward(grad_out);
          const auto [grad_input, grad_residual, grad_weight, grad_bias] =
              bn_add_relu_backward(grad_out, input, out, n.weight, mean, invstd, training, residual);
          std::vector<std::pair<at::Tensor, at::Tensor>> pairs{
              {grad_input, x.grad()}, {grad_weight, weight.grad()}, {grad_bias, bias.grad()}};
          if (residual) pairs.emplace_back(grad_residual, r.grad());
          else EXPECT_EQ(grad_residual.numel(), 0);
          for (const auto& [got, want] : pairs) {
            const double scale = want.abs().max().item<double>();
            EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-4 * scale)) << (got - want).abs().max().item<double>();
          }
        }
      }
    }
  }
}

TEST(NormRelu, OneThreadGivesWhatSeveralGive) {
  at::manual_seed(9);
  const at::Tensor input = at::randn({16, 64, 20, 20}).contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor skip = at::randn_like(input), grad_out = at::randn_like(input);
  const Norm n = random_norm(64);
  std::vector<std::vector<at::Tensor>> runs;
  const int threads = at::get_num_threads();
  for (const int count : {1, 4}) {
    at::set_num_threads(count);
    const auto [out, mean, invstd, new_mean, new_var] =
        bn_add_relu(input, skip, n.weight, n.bias, n.running_mean, n.running_var, true, 0.1, 1e-5);
    const auto [grad_input, grad_residual, grad_weight, grad_bias] =
        bn_add_relu_backward(grad_out, input, out, n.weight, mean, invstd, true, true);
    runs.push_back({out, new_mean, new_var, grad_input, grad_residual, grad_weight, grad_bias});
  }
  at::set_num_threads(threads);
  for (size_t i = 0; i < runs[0].size(); ++i) EXPECT_TRUE(at::equal(runs[0][i], runs[1][i])) << "output " << i;
}

TEST(NormRelu, RefusesWhatIsNotItsInput) {
  const at::Tensor input = at::randn({2, 4, 3, 3});
  const Norm n = random_norm(4);
  const auto call = [&](const at::Tensor& x, const std::optional<at::Tensor>& residual, const at::Tensor& weight) {
    bn_add_relu(x, residual, weight, n.bias, n.running_mean, n.running_var, true, 0.1, 1e-5);
  };
  const auto message = [&](const auto& f) {
    try {
      f();
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { call(input, at::randn({2, 4, 3, 4}), n.weight); }).find("residual must be the input's size"),
            std::string::npos);
  EXPECT_NE(message([&] { call(input, at::randn({2, 4, 3, 3}, at::kDouble), n.weight); }).find("residual is Double"),
            std::string::npos);
  EXPECT_NE(message([&] { call(input, std::nullopt, at::rand({5})); }).find("one value per channel (4)"),
            std::string::npos);
  EXPECT_NE(message([&] { call(at::randn({1, 4, 1, 1}), std::nullopt, n.weight); }).find("more than 1 value"),
            std::string::npos);
}

}  // namespace
}  // namespace gpucore::ops
