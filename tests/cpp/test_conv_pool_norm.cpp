// gpucore::conv3x3_maxpool_bn_relu (ops/fused/conv_pool_norm.h) through its C++ entry points: against ATen's conv2d,
// max_pool2d, batch_norm and relu and their gradients, and bit for bit the same with one thread as with several
// (its sums go in a fixed order, which bitwise resumes rely on).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <vector>

#include "ops/fused/conv_pool_norm.h"

namespace gpucore::ops {
namespace {

struct Block {
  at::Tensor input, conv_weight, weight, bias, running_mean, running_var;
};

Block random_block(int64_t batch, int64_t in_channels, int64_t channels, int64_t height, int64_t width) {
  return {at::randn({batch, in_channels, height, width}), at::randn({channels, in_channels, 3, 3}) * 0.4,
          at::rand({channels}) + 0.5, at::rand({channels}) - 0.5, at::rand({channels}) - 0.5,
          at::rand({channels}) + 0.5};
}

TEST(ConvPoolNorm, MatchesAtenOpsAndTheirGradients) {
  at::manual_seed(3);
  for (const auto& [n, cin, c, h, w] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>>{
           {8, 1, 32, 28, 28}, {3, 3, 5, 7, 9}, {2, 2, 17, 6, 11}}) {
    for (const bool training : {true, false}) {
      SCOPED_TRACE(std::to_string(cin) + " -> " + std::to_string(c) + (training ? " training" : " eval"));
      const Block b = random_block(n, cin, c, h, w);
      const auto [out, pooled, window, mean, invstd, new_mean, new_var] = conv3x3_maxpool_bn_relu(
          b.input, b.conv_weight, b.weight, b.bias, b.running_mean, b.running_var, training, 0.1, 1e-5);
      const at::Tensor conv_weight = b.conv_weight.clone().set_requires_grad(true);
      const at::Tensor weight = b.weight.clone().set_requires_grad(true);
      const at::Tensor bias = b.bias.clone().set_requires_grad(true);
      const at::Tensor running_mean = b.running_mean.clone(), running_var = b.running_var.clone();
      const at::Tensor conv = at::conv2d(b.input, conv_weight, {}, 1, 1);
      const at::Tensor expected = at::relu(at::batch_norm(at::max_pool2d(conv, {2, 2}), weight, bias, running_mean,
                                                          running_var, training, 0.1, 1e-5, false));
      EXPECT_TRUE(at::allclose(out, expected, 1e-4, 1e-5));
      EXPECT_TRUE(at::allclose(pooled, at::max_pool2d(conv, {2, 2}), 1e-5, 1e-5));
      if (training) {
        EXPECT_TRUE(at::allclose(new_mean, running_mean, 1e-5, 1e-6));
        EXPECT_TRUE(at::allclose(new_var, running_var, 1e-5, 1e-6));
      }
      const at::Tensor grad_out = at::randn(out.sizes());
      expected.backward(grad_out);
      const auto [grad_conv, grad_weight, grad_bias] = conv3x3_maxpool_bn_relu_backward(
          grad_out, b.input, b.conv_weight, pooled, window, out, b.weight, mean, invstd, training);
      for (const auto& [got, want] : {std::pair{grad_conv, conv_weight.grad()}, {grad_weight, weight.grad()},
                                      {grad_bias, bias.grad()}}) {
        const double scale = want.abs().max().item<double>();
        EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-4 * scale)) << (got - want).abs().max().item<double>();
      }
    }
  }
}

TEST(ConvPoolNorm, OneThreadGivesWhatSeveralGive) {
  at::manual_seed(5);
  const Block b = random_block(32, 1, 32, 28, 28);
  const at::Tensor grad_out = at::randn({32, 32, 14, 14});
  std::vector<std::vector<at::Tensor>> runs;
  const int threads = at::get_num_threads();
  for (const int count : {1, 4}) {
    at::set_num_threads(count);
    const auto [out, pooled, window, mean, invstd, new_mean, new_var] = conv3x3_maxpool_bn_relu(
        b.input, b.conv_weight, b.weight, b.bias, b.running_mean, b.running_var, true, 0.1, 1e-5);
    const auto [grad_conv, grad_weight, grad_bias] = conv3x3_maxpool_bn_relu_backward(
        grad_out, b.input, b.conv_weight, pooled, window, out, b.weight, mean, invstd, true);
    runs.push_back({out, window, new_mean, new_var, grad_conv, grad_weight, grad_bias});
  }
  at::set_num_threads(threads);
  for (size_t i = 0; i < runs[0].size(); ++i) EXPECT_TRUE(at::equal(runs[0][i], runs[1][i])) << "output " << i;
}

TEST(ConvPoolNorm, RefusesWhatIsNotItsBlock) {
  const Block b = random_block(2, 1, 4, 6, 6);
  EXPECT_THROW(conv3x3_maxpool_bn_relu(b.input, at::randn({4, 1, 5, 5}), b.weight, b.bias, b.running_mean,
                                       b.running_var, true, 0.1, 1e-5),
               c10::Error);
  EXPECT_THROW(conv3x3_maxpool_bn_relu(b.input, b.conv_weight, at::rand({3}), b.bias, b.running_mean, b.running_var,
                                       true, 0.1, 1e-5),
               c10::Error);
  EXPECT_THROW(conv3x3_maxpool_bn_relu(at::randn({1, 1, 2, 2}), b.conv_weight, b.weight, b.bias, b.running_mean,
                                       b.running_var, true, 0.1, 1e-5),
               c10::Error);
}

}  // namespace
}  // namespace gpucore::ops
