#include "gpucore/device/probe.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/conv2d.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/randn.h>
#include <c10/core/Device.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <sstream>

#include "device/cuda/kernel_probe.h"

namespace gpucore {

namespace {

// c10::Error carries a C++ backtrace in what(), and dispatcher errors list every backend;
// users need the first sentence.
std::string error_message(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string message = c10_error ? c10_error->what_without_backtrace() : e.what();
  message = message.substr(0, message.find('\n'));
  const auto sentence_end = message.find(". ");
  if (message.size() > 200 && sentence_end != std::string::npos) message = message.substr(0, sentence_end + 1);
  return message;
}

double relative_error(const at::Tensor& value, const at::Tensor& reference) {
  const double scale = reference.abs().max().item<double>();
  const double error = value.to(at::kCPU, at::kDouble).sub(reference).abs().max().item<double>();
  return scale > 0 ? error / scale : error;
}

template <typename Fn>
double mean_ms(int iterations, Fn&& fn) {
  fn().sum().template item<double>();  // warm-up: kernel selection, allocator, cuDNN plans
  const auto start = std::chrono::steady_clock::now();
  at::Tensor last;
  for (int i = 0; i < iterations; ++i) last = fn();
  last.sum().template item<double>();  // one host sync covers the queued calls
  const std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / iterations;
}

}  // namespace

ProbeResult probe_device(const std::string& device) {
  try {
    const c10::Device target(device);
    const auto values = at::arange(64, at::TensorOptions().dtype(at::kFloat).device(target));
    const double sum = values.mul(2).add(1).sum().item<double>();  // sum of 2i+1 for i < 64 is 64^2
    if (sum != 4096.0) {
      std::ostringstream message;
      message << device << " computed " << sum << " for a sum whose value is 4096";
      return {false, message.str()};
    }
    return {true, ""};
  } catch (const std::exception& e) {
    return {false, error_message(e)};
  }
}

ProbeResult probe_gpucore_kernels(const std::string& device) {
  try {
    const c10::Device target(device);
    if (!target.is_cuda()) return {false, "gpucore's own kernels are CUDA kernels; " + device + " is not a CUDA device"};
    return cuda::run_kernel_probe(target.has_index() ? target.index() : 0);
  } catch (const std::exception& e) {
    return {false, error_message(e)};
  }
}

std::vector<std::string> gpucore_cuda_arch_list() { return cuda::compiled_arch_list(); }

SmokeResult smoke_test(const std::string& device) {
  SmokeResult result;
  result.device = device;
  // float32 on the device may use TF32 (10-bit mantissa) or MPS's reduced-precision paths;
  // garbage from a broken device is off by far more than this.
  result.tolerance = 1e-2;
  try {
    const c10::Device target(device);
    // A private generator: the smoke test must not move the user's global RNG stream.
    const at::Generator generator = at::detail::createCPUGenerator(/*seed_in=*/0);
    const auto random = [&](at::IntArrayRef shape) { return at::randn(shape, generator, at::TensorOptions().dtype(at::kDouble)); };
    const at::Tensor a = random({512, 512}), b = random({512, 512});
    const at::Tensor images = random({16, 16, 32, 32}), weight = random({32, 16, 3, 3});

    const auto on_device = [&](const at::Tensor& t) { return t.to(target, at::kFloat); };
    const at::Tensor da = on_device(a), db = on_device(b), dimages = on_device(images), dweight = on_device(weight);
    const auto matmul = [&] { return at::matmul(da, db); };
    const auto conv = [&] { return at::conv2d(dimages, dweight, {}, 1, 1); };

    result.matmul_rel_error = relative_error(matmul(), at::matmul(a, b));
    result.conv_rel_error = relative_error(conv(), at::conv2d(images, weight, {}, 1, 1));
    result.matmul_ms = mean_ms(10, matmul);
    result.conv_ms = mean_ms(10, conv);
    result.ok = result.matmul_rel_error <= result.tolerance && result.conv_rel_error <= result.tolerance;
    if (!result.ok) {
      std::ostringstream message;
      message << device << " computed wrong results: relative error " << result.matmul_rel_error << " (matmul), "
              << result.conv_rel_error << " (conv2d), allowed " << result.tolerance;
      result.error = message.str();
    }
  } catch (const std::exception& e) {
    result.ok = false;
    result.error = error_message(e);
  }
  return result;
}

}  // namespace gpucore
