// The Grad-CAM launchers (ops/cuda/cam_kernels.h) against the CPU kernels of their ops (kernels_against_cpu.h).
#include <gtest/gtest.h>

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>
#include <utility>
#include <vector>

#include "kernels_against_cpu.h"
#include "ops/cuda/cam_kernels.h"

namespace gpucore::ops {
namespace {

template <typename Signature, typename... Args>
auto call_op(const char* name, Args&&... args) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>().call(std::forward<Args>(args)...);
}

// Areas below, at and past the block of 256 threads, and past four blocks' worth (each thread loops).
const std::vector<std::vector<int64_t>> kCamShapes = {{2, 3, 7, 9}, {1, 1, 1, 1}, {2, 2, 16, 16}, {1, 2, 33, 33},
                                                      {0, 3, 4, 4}};

TEST_F(KernelsAgainstCpu, CamWeights) {
  Random random(2);
  const std::vector<std::string> methods = {"gradcam", "gradcam++", "xgradcam"};  // CamMethod's order
  for (size_t method = 0; method < methods.size(); ++method) {
    for (const auto& shape : kCamShapes) {
      SCOPED_TRACE(methods[method] + " " + shape_name(shape));
      const at::Tensor activations = random.uniform(shape, 0.0, 2.0), gradients = random.uniform(shape, -1.0, 1.0);
      const at::Tensor expected = call_op<at::Tensor(const at::Tensor&, const at::Tensor&, c10::string_view)>(
          "gpucore::cam_weights", activations, gradients, methods[method]);
      const DeviceCopy a(activations), g(gradients), out(at::empty({shape[0], shape[1]}));
      cuda::launch_cam_weights(a.get<float>(), g.get<float>(), out.get<float>(), shape[0] * shape[1],
                               shape[2] * shape[3], static_cast<int>(method), nullptr);
      expect_ran();
      expect_close(out.host(), expected, 1e-5, 1e-6);
    }
  }
}

TEST_F(KernelsAgainstCpu, CamWeightedSum) {
  Random random(3);
  for (const bool elementwise : {false, true}) {
    for (const auto& shape : kCamShapes) {
      SCOPED_TRACE(shape_name(shape) + (elementwise ? " elementwise" : " per channel"));
      const at::Tensor activations = random.uniform(shape, -1.0, 2.0);
      const at::Tensor weights =
          elementwise ? random.uniform(shape, -1.0, 1.0) : random.uniform({shape[0], shape[1]}, -1.0, 1.0);
      const at::Tensor expected = call_op<at::Tensor(const at::Tensor&, const at::Tensor&)>(
          "gpucore::cam_weighted_sum", activations, weights);
      const DeviceCopy a(activations), w(weights), out(at::empty({shape[0], shape[2], shape[3]}));
      cuda::launch_cam_weighted_sum(a.get<float>(), w.get<float>(), out.get<float>(), shape[0], shape[1],
                                    shape[2] * shape[3], elementwise, nullptr);
      expect_ran();
      expect_close(out.host(), expected, 1e-5, 1e-6);
    }
  }
}

TEST_F(KernelsAgainstCpu, CamNormalize) {
  Random random(4);
  struct Case {
    std::vector<int64_t> shape, size;
  };
  const std::vector<Case> cases = {{{2, 7, 9}, {}},         {{2, 7, 9}, {13, 11}}, {{3, 9, 8}, {3, 4}},
                                   {{1, 1, 1}, {5, 5}},     {{1, 40, 40}, {64, 64}}, {{0, 4, 4}, {6, 6}},
                                   {{2, 5, 5}, {1, 1}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_name(c.shape) + " to " + shape_name(c.size));
    const at::Tensor cams = random.uniform(c.shape, -3.0, 5.0);
    const at::Tensor expected =
        call_op<at::Tensor(const at::Tensor&, at::IntArrayRef)>("gpucore::cam_normalize", cams, c.size);
    const int64_t out_h = c.size.empty() ? c.shape[1] : c.size[0], out_w = c.size.empty() ? c.shape[2] : c.size[1];
    const DeviceCopy in(cams), out(at::empty({c.shape[0], out_h, out_w}));
    cuda::launch_cam_normalize(in.get<float>(), out.get<float>(), c.shape[0], c.shape[1], c.shape[2], out_h, out_w,
                               nullptr);
    expect_ran();
    expect_close(out.host(), expected, 1e-5, 1e-6);
  }
}

TEST_F(KernelsAgainstCpu, CamOverlay) {
  Random random(5);
  const std::vector<std::vector<int64_t>> shapes = {{2, 7, 9}, {1, 1, 1}, {1, 30, 31}, {0, 3, 3}};
  for (const double alpha : {0.5, 0.0, 1.0}) {
    for (const auto& shape : shapes) {
      SCOPED_TRACE(shape_name(shape) + " alpha " + std::to_string(alpha));
      const at::Tensor images = random.integers({shape[0], shape[1], shape[2], 3}, 0, 256, at::kByte);
      const at::Tensor cams = random.uniform(shape, 0.0, 1.0);
      const at::Tensor expected = call_op<at::Tensor(const at::Tensor&, const at::Tensor&, double)>(
          "gpucore::cam_overlay", images, cams, alpha);
      const DeviceCopy in(images), cam(cams), out(at::empty_like(images));
      cuda::launch_cam_overlay(in.get<uint8_t>(), cam.get<float>(), out.get<uint8_t>(), shape[0],
                               shape[1] * shape[2], static_cast<float>(alpha), nullptr);
      expect_ran();
      expect_bitwise_equal(out.host(), expected);
    }
  }
}

}  // namespace
}  // namespace gpucore::ops
