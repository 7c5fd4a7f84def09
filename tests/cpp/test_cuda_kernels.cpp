// Every launcher of csrc/ops/cuda (declared in its *_kernels.h headers) against the CPU kernel of its op, on
// random inputs and the edge cases of a grid: sizes that are not a multiple of the block, one element, none,
// loops that go round a block or a grid more than once, every dtype a launcher takes, strides, the most channels.
// Without CUDA the kernels run on the emulated grid (csrc/ops/cuda/emulator), with CUDA on the device: the
// buffers are cudaMalloc'd either way. Bit-exact where the CPU kernel is exact to its reference; within a tolerance
// where the two compute differently: the CAM ops (float sums per block, double sums on the CPU; a multiply by the
// inverse range) within 1e-5 relative, and bilinear resized_crop (per-pixel taps in double, ATen's float upsample
// kernels on the CPU) within one intensity level for uint8 and 1e-5 (relative and absolute) for float32.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpucore/train/schedule.h"
#include "ops/augment.h"
#include "ops/color.h"
#include "ops/color_math.h"
#include "ops/cuda/augment_kernels.h"
#include "ops/cuda/cam_kernels.h"
#include "ops/cuda/color_kernels.h"
#include "ops/cuda/ema_kernels.h"
#include "ops/cuda/geometry_kernels.h"
#include "ops/cuda/kernel_launch_check.h"
#include "ops/cuda/mixup_kernels.h"
#include "ops/cuda/pool_norm_kernels.h"
#include "ops/cuda/train_step_kernels.h"
#include "ops/ema.h"
#include "ops/geometry.h"
#include "ops/mixup.h"
#include "ops/pool_norm.h"
#include "ops/resample_math.h"
#include "ops/train_step.h"

namespace gpucore::ops {
namespace {

// On the emulated grid the comparisons always run; built with CUDA they run on the device, and a machine with no GPU
// or no driver (the CUDA wheel's build, checked by scripts/check_cuda_wheel.sh on a CPU machine) skips them, saying so.
class KernelsAgainstCpu : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef GPUCORE_KERNEL_TESTS_ON_DEVICE
    int devices = 0;
    const cudaError_t status = cudaGetDeviceCount(&devices);
    if (status != cudaSuccess || devices == 0) {
      GTEST_SKIP() << "no CUDA device to run the kernels on (" << cudaGetErrorString(status)
                   << "); the CPU build runs them on the emulated grid, scripts/gpu/verify.sh on a GPU";
    }
#endif
  }
};

// A CPU tensor's bytes (dense, in its own layout) in device memory, and back as a CPU tensor of that layout.
class DeviceCopy {
 public:
  explicit DeviceCopy(const at::Tensor& host) : host_(host) {
    EXPECT_TRUE(host.is_non_overlapping_and_dense());
    EXPECT_EQ(cudaMalloc(&data_, host.nbytes()), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data_, host.data_ptr(), host.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  ~DeviceCopy() { cudaFree(data_); }

  void* get() const { return data_; }
  template <typename T>
  T* get() const {
    return static_cast<T*>(data_);
  }
  at::Tensor host() const {
    at::Tensor out = at::empty_like(host_);
    EXPECT_EQ(cudaMemcpy(out.data_ptr(), data_, host_.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }

 private:
  at::Tensor host_;
  void* data_ = nullptr;
};

// The launch was accepted and its kernels ran to the end without a failed check.
void expect_ran() {
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

void expect_bitwise_equal(const at::Tensor& actual, const at::Tensor& expected) {
  ASSERT_EQ(actual.sizes(), expected.sizes());
  ASSERT_EQ(actual.scalar_type(), expected.scalar_type());
  const at::Tensor a = actual.contiguous(), e = expected.contiguous();
  if (a.numel() == 0 || std::memcmp(a.data_ptr(), e.data_ptr(), a.nbytes()) == 0) return;
  const at::Tensor differ = a.ne(e).logical_and(a.isnan().logical_and(e.isnan()).logical_not()).flatten();
  const int64_t first = differ.nonzero().numel() > 0 ? differ.nonzero()[0].item<int64_t>() : -1;
  ADD_FAILURE() << differ.sum().item<int64_t>() << " of " << a.numel() << " values differ; first at flat index "
                << first << ": " << (first >= 0 ? a.flatten()[first].item<double>() : 0.0) << " instead of "
                << (first >= 0 ? e.flatten()[first].item<double>() : 0.0);
}

void expect_close(const at::Tensor& actual, const at::Tensor& expected, double rtol, double atol) {
  ASSERT_EQ(actual.sizes(), expected.sizes());
  if (actual.numel() == 0) return;
  const at::Tensor error = (actual.to(at::kDouble) - expected.to(at::kDouble)).abs();
  const at::Tensor allowed = expected.to(at::kDouble).abs() * rtol + atol;
  EXPECT_TRUE(error.le(allowed).all().item<bool>())
      << "largest error " << error.max().item<double>() << " (allowed " << rtol << " relative + " << atol << ")";
}

// Seeded random tensors: the same inputs on every run, different for every case.
class Random {
 public:
  explicit Random(uint64_t seed) : generator_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}
  at::Tensor uniform(at::IntArrayRef sizes, double low, double high, at::ScalarType dtype = at::kFloat) {
    return at::empty(sizes, at::kDouble).uniform_(low, high, generator_).to(dtype);
  }
  at::Tensor integers(at::IntArrayRef sizes, int64_t low, int64_t high, at::ScalarType dtype = at::kLong) {
    return at::randint(low, high, sizes, generator_, at::TensorOptions(dtype));
  }
  int64_t integer(int64_t low, int64_t high) { return integers({}, low, high).item<int64_t>(); }
  at::Tensor permutation(int64_t n) { return at::randperm(n, generator_, at::TensorOptions(at::kLong)); }
  at::Tensor images(at::IntArrayRef sizes, at::ScalarType dtype) {
    return dtype == at::kByte ? integers(sizes, 0, 256, at::kByte) : uniform(sizes, -1.0, 2.0, dtype);
  }

 private:
  at::Generator generator_;
};

// A test's dtypes: a tensor's, and the one its launcher takes (as kernel_dtype maps it).
using DtypePairs = std::vector<std::pair<at::ScalarType, cuda::KernelDtype>>;

// A launcher's test runs every dtype its header lists (KernelDtypes<...>::values), each as kernel_dtype maps it.
void expect_every_listed_dtype(const DtypePairs& tested, c10::ArrayRef<cuda::KernelDtype> listed) {
  std::set<cuda::KernelDtype> launched;
  for (const auto& [dtype, launch_type] : tested) {
    launched.insert(launch_type);
    EXPECT_EQ(kernel_dtype(dtype, listed, "op", "input"), launch_type) << dtype;
  }
  EXPECT_EQ(launched, std::set<cuda::KernelDtype>(listed.begin(), listed.end()));
}

std::string shape_name(at::IntArrayRef sizes) {
  std::ostringstream out;
  out << sizes;
  return out.str();
}

// ---- augment ------------------------------------------------------------------------------------------------

TEST_F(KernelsAgainstCpu, Augment) {
  Random random(1);
  const std::vector<std::vector<int64_t>> shapes = {{3, 3, 17, 13}, {1, 1, 1, 1}, {0, 3, 8, 8}, {2, 8, 9, 7}};
  const DtypePairs out_types = {{at::kFloat, cuda::KernelDtype::kFloat32},
                                {at::kHalf, cuda::KernelDtype::kFloat16},
                                {at::kBFloat16, cuda::KernelDtype::kBFloat16}};
  expect_every_listed_dtype(out_types, cuda::AugmentOutDtypes::values);
  for (const at::ScalarType in_type : {at::kByte, at::kFloat}) {
    for (const auto& [out_type, launch_type] : out_types) {
      for (const auto& shape : shapes) {
        SCOPED_TRACE(shape_name(shape) + " " + c10::toString(in_type) + " to " + c10::toString(out_type));
        // Crop corners up to a third of the image (at least a pixel: a 1 x 1 image shifted out entirely) away.
        const int64_t n = shape[0], channels = shape[1], reach = shape[2] / 3 + 1;
        const at::Tensor images = random.images(shape, in_type);
        const at::Tensor offsets = random.integers({n, 2}, -reach, reach + 1);
        const at::Tensor flips = random.integers({n}, 0, 2, at::kBool);
        std::vector<double> mean(channels), std(channels);
        for (int64_t c = 0; c < channels; ++c) mean[c] = 0.1 * c + 0.2, std[c] = 0.05 * c + 0.25;
        const at::Tensor expected = augment(images, offsets, flips, mean, std, out_type);
        std::vector<float> scale, shift;
        augment_affine(images, mean, std, scale, shift);
        cuda::ChannelAffine affine{};
        std::copy(scale.begin(), scale.end(), affine.scale);
        std::copy(shift.begin(), shift.end(), affine.shift);
        const DeviceCopy in(images), offset(offsets), flip(flips), out(at::empty(shape, out_type));
        cuda::launch_augment(in.get(), in_type == at::kByte, offset.get<int64_t>(), flip.get<bool>(), out.get(),
                             launch_type, n, channels, shape[2], shape[3], affine, nullptr);
        expect_ran();
        expect_bitwise_equal(out.host(), expected);
      }
    }
  }
}

// ---- Grad-CAM -----------------------------------------------------------------------------------------------

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

// ---- colour ops and erase -----------------------------------------------------------------------------------

// A valid magnitude for each code (check_color_values' ranges).
at::Tensor color_magnitudes(const at::Tensor& codes, Random& random) {
  at::Tensor magnitudes = random.uniform(codes.sizes(), 0.0, 2.0, at::kDouble);
  const at::Tensor hue = random.uniform(codes.sizes(), -0.5, 0.5, at::kDouble);
  const at::Tensor bits = random.integers(codes.sizes(), 0, 9).to(at::kDouble);
  const at::Tensor threshold = random.uniform(codes.sizes(), 0.0, 255.0, at::kDouble);
  magnitudes = at::where(codes == kColorHue, hue, magnitudes);
  magnitudes = at::where(codes == kColorPosterize, bits, magnitudes);
  return at::where(codes == kColorSolarize, threshold, magnitudes);
}

TEST_F(KernelsAgainstCpu, ColorOps) {
  Random random(6);
  struct Case {
    std::vector<int64_t> shape;
    int64_t steps;
  };
  // Planes below and past a block, 1 and 3 channels, an image too small to sharpen, one pixel, no steps, no images.
  const std::vector<Case> cases = {{{3, 3, 23, 19}, 6}, {{2, 1, 17, 31}, 5}, {{2, 3, 2, 5}, 4}, {{1, 3, 1, 1}, 4},
                                   {{2, 3, 6, 6}, 0},   {{0, 3, 4, 4}, 3},   {{1, 3, 48, 40}, 3}};
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_name(c.shape) + " steps " + std::to_string(c.steps));
    const int64_t n = c.shape[0];
    // Each image runs every op once in an order of its own, then `steps` random ones.
    at::Tensor codes = at::empty({n, 0}, at::kLong);
    if (c.steps > 0) {
      std::vector<at::Tensor> orders = {at::empty({0, kColorOpCount}, at::kLong)};
      for (int64_t i = 0; i < n; ++i) orders.push_back(random.permutation(kColorOpCount).unsqueeze(0));
      codes = at::cat({at::cat(orders), random.integers({n, c.steps}, 0, kColorOpCount)}, 1);
    }
    const at::Tensor magnitudes = color_magnitudes(codes, random);
    const at::Tensor images = random.images(c.shape, at::kByte);
    const at::Tensor expected = color_ops(images, codes, magnitudes);
    const DeviceCopy out(images), scratch(at::empty_like(images)), code(codes), magnitude(magnitudes);
    cuda::launch_color_ops(out.get<uint8_t>(), scratch.get<uint8_t>(), code.get<int64_t>(), magnitude.get<double>(), n,
                           codes.size(1), c.shape[1], c.shape[2], c.shape[3], nullptr);
    expect_ran();
    expect_bitwise_equal(out.host(), expected);
  }
}

TEST_F(KernelsAgainstCpu, Erase) {
  Random random(7);
  const std::vector<std::vector<int64_t>> shapes = {{3, 3, 13, 11}, {1, 1, 1, 1}, {2, 2, 40, 30}, {0, 3, 4, 4}};
  const DtypePairs dtypes = {{at::kFloat, cuda::KernelDtype::kFloat32},
                             {at::kDouble, cuda::KernelDtype::kFloat64},
                             {at::kHalf, cuda::KernelDtype::kFloat16},
                             {at::kBFloat16, cuda::KernelDtype::kBFloat16}};
  expect_every_listed_dtype(dtypes, cuda::EraseDtypes::values);
  for (const auto& [dtype, launch_type] : dtypes) {
    for (const bool noise : {false, true}) {
      for (const auto& shape : shapes) {
        SCOPED_TRACE(shape_name(shape) + " " + c10::toString(dtype) + (noise ? " noise" : " fill"));
        const int64_t n = shape[0], channels = shape[1], h = shape[2], w = shape[3];
        at::Tensor boxes = at::empty({n, 4}, at::kLong);
        for (int64_t i = 0; i < n; ++i) {  // the first box the whole image, the others anywhere, empty ones too
          const int64_t top = i == 0 ? 0 : random.integer(0, h + 1), left = i == 0 ? 0 : random.integer(0, w + 1);
          const int64_t height = i == 0 ? h : random.integer(0, h - top + 1);
          const int64_t width = i == 0 ? w : random.integer(0, w - left + 1);
          boxes[i] = at::tensor({top, left, height, width});
        }
        const at::Tensor images = random.images(shape, dtype);
        const std::optional<at::Tensor> fill =
            noise ? std::nullopt : std::optional<at::Tensor>(random.uniform({n, channels}, -2.0, 2.0));
        const std::optional<at::Tensor> seeds =
            noise ? std::optional<at::Tensor>(random.integers({n}, 0, int64_t{1} << 40)) : std::nullopt;
        const at::Tensor expected = erase(images, boxes, fill, seeds);
        const DeviceCopy out(images), box(boxes), fill_values(fill.value_or(at::zeros({1}))),
            seed_values(seeds.value_or(at::zeros({1}, at::kLong)));
        cuda::launch_erase(out.get(), launch_type, box.get<int64_t>(), noise ? nullptr : fill_values.get<float>(),
                           noise ? seed_values.get<int64_t>() : nullptr, n, channels, h, w, nullptr);
        expect_ran();
        expect_bitwise_equal(out.host(), expected);
      }
    }
  }
}

// ---- EMA ----------------------------------------------------------------------------------------------------

TEST_F(KernelsAgainstCpu, EmaUpdate) {
  Random random(8);
  const EmaParams params{0.9, true, 1.0, 0.75};
  // The counters after a taken step, after the first one (a copy) and after a skipped one (no change).
  const std::vector<std::vector<float>> counter_states = {{5, 1, 0}, {1, 0, 0}, {5, 2, 1}};
  struct Group {
    at::ScalarType dtype;
    cuda::KernelDtype type;
    std::vector<int64_t> sizes;
  };
  std::vector<int64_t> full_chunk(cuda::kEmaChunkSize);  // a launch of kEmaChunkSize tensors (grid.y at its most)
  for (size_t i = 0; i < full_chunk.size(); ++i) full_chunk[i] = 1 + static_cast<int64_t>(i) * 13;
  // 300,000 values: more than the 1,024 blocks of 256 threads a tensor gets, so the grid-stride loop goes round.
  const std::vector<Group> groups = {{at::kFloat, cuda::KernelDtype::kFloat32, {1, 255, 256, 257, 1000, 300000}},
                                     {at::kDouble, cuda::KernelDtype::kFloat64, {3, 700}},
                                     {at::kHalf, cuda::KernelDtype::kFloat16, {1, 513}},
                                     {at::kBFloat16, cuda::KernelDtype::kBFloat16, full_chunk},
                                     {at::kLong, cuda::KernelDtype::kBytes, {1, 33}},
                                     {at::kByte, cuda::KernelDtype::kBytes, {7, 300}}};
  DtypePairs dtypes;
  for (const Group& group : groups) dtypes.emplace_back(group.dtype, group.type);
  expect_every_listed_dtype(dtypes, cuda::EmaDtypes::values);
  for (const auto& counter_values : counter_states) {
    const at::Tensor counters = at::tensor(counter_values);
    for (const Group& group : groups) {
      if (group.sizes.back() == 300000 && counter_values != counter_states[0]) continue;  // once is enough: slow
      SCOPED_TRACE(std::string(c10::toString(group.dtype)) + " counters " + std::to_string(counter_values[0]) + "," +
                   std::to_string(counter_values[2]));
      std::vector<at::Tensor> averages, sources;
      for (const int64_t size : group.sizes) {
        averages.push_back(random.uniform({size}, -100.0, 100.0, group.dtype));
        sources.push_back(random.uniform({size}, -100.0, 100.0, group.dtype));
      }
      std::vector<std::unique_ptr<DeviceCopy>> device_averages, device_sources;
      cuda::EmaChunk chunk{};
      for (size_t i = 0; i < averages.size(); ++i) {
        device_averages.push_back(std::make_unique<DeviceCopy>(averages[i]));
        device_sources.push_back(std::make_unique<DeviceCopy>(sources[i]));
        chunk.averages[i] = device_averages[i]->get();
        chunk.sources[i] = device_sources[i]->get();
        chunk.sizes[i] = group.type == cuda::KernelDtype::kBytes ? static_cast<int64_t>(averages[i].nbytes())
                                                             : averages[i].numel();
      }
      chunk.count = static_cast<int>(averages.size());
      const DeviceCopy counter(counters);
      cuda::launch_ema_update(cuda::EmaChunk{}, group.type, counter.get<float>(), params, nullptr);  // no tensors
      expect_ran();
      cuda::launch_ema_update(chunk, group.type, counter.get<float>(), params, nullptr);
      expect_ran();
      ema_update(averages, sources, counters, params);
      for (size_t i = 0; i < averages.size(); ++i) {
        SCOPED_TRACE("tensor " + std::to_string(i));
        expect_bitwise_equal(device_averages[i]->host(), averages[i]);
      }
    }
  }
}

// ---- geometry -----------------------------------------------------------------------------------------------

cuda::ChannelFill channel_fill(const std::vector<double>& fill, int64_t channels) {
  cuda::ChannelFill values{};
  const std::vector<float> per_channel = fill_per_channel(fill, channels);
  std::copy(per_channel.begin(), per_channel.end(), values.value);
  return values;
}

struct GeometryCase {
  std::vector<int64_t> shape;  // N, C, H, W
  std::vector<int64_t> size;   // the output's H, W
};
// Outputs smaller and larger than the image, one pixel, no images, the most channels the kernels take.
const std::vector<GeometryCase> kGeometryCases = {{{3, 3, 17, 13}, {11, 15}}, {{1, 1, 1, 1}, {1, 1}},
                                                  {{2, 1, 9, 12}, {31, 29}},  {{0, 3, 5, 5}, {3, 3}},
                                                  {{1, cuda::kGeometryMaxChannels, 9, 9}, {20, 20}}};

TEST_F(KernelsAgainstCpu, Crop) {
  Random random(9);
  for (const at::ScalarType dtype : {at::kByte, at::kFloat}) {
    for (const GeometryCase& c : kGeometryCases) {
      SCOPED_TRACE(shape_name(c.shape) + " to " + shape_name(c.size) + " " + c10::toString(dtype));
      const int64_t n = c.shape[0], channels = c.shape[1], h = c.shape[2], w = c.shape[3];
      // Offsets reaching past every side, so the fill shows.
      const at::Tensor offsets =
          at::stack({random.integers({n}, -c.size[0], h + 1), random.integers({n}, -c.size[1], w + 1)}, 1);
      const at::Tensor flips = random.integers({n, 2}, 0, 2, at::kBool);
      std::vector<double> fill;
      for (int64_t i = 0; i < channels; ++i) fill.push_back(static_cast<double>(random.integer(0, 256)));
      const at::Tensor images = random.images(c.shape, dtype);
      const at::Tensor expected = crop(images, offsets, flips, c.size, fill);
      const DeviceCopy in(images), offset(offsets), flip(flips),
          out(at::empty({n, channels, c.size[0], c.size[1]}, dtype));
      cuda::launch_crop(in.get(), dtype == at::kByte, offset.get<int64_t>(), flip.get<bool>(), out.get(), n, channels,
                        h, w, c.size[0], c.size[1], channel_fill(fill, channels), nullptr);
      expect_ran();
      expect_bitwise_equal(out.host(), expected);
    }
  }
}

TEST_F(KernelsAgainstCpu, ResizedCrop) {
  Random random(10);
  for (const at::ScalarType dtype : {at::kByte, at::kFloat}) {
    for (const auto& [interpolation, antialias] :
         {std::pair{"nearest", false}, {"bilinear", false}, {"bilinear", true}}) {
      for (const GeometryCase& c : kGeometryCases) {
        SCOPED_TRACE(shape_name(c.shape) + " to " + shape_name(c.size) + " " + c10::toString(dtype) + " " +
                     interpolation + (antialias ? " antialias" : ""));
        const int64_t n = c.shape[0], channels = c.shape[1], h = c.shape[2], w = c.shape[3];
        at::Tensor boxes = at::empty({n, 4}, at::kLong);
        for (int64_t i = 0; i < n; ++i) {
          const int64_t top = random.integer(0, h), left = random.integer(0, w);
          boxes[i] = at::tensor({top, left, random.integer(1, h - top + 1), random.integer(1, w - left + 1)});
        }
        const at::Tensor images = random.images(c.shape, dtype);
        const at::Tensor expected = resized_crop(images, boxes, c.size, interpolation, antialias);
        const DeviceCopy in(images), box(boxes), out(at::empty({n, channels, c.size[0], c.size[1]}, dtype));
        cuda::launch_resized_crop(in.get(), dtype == at::kByte, box.get<int64_t>(), out.get(), n, channels, h, w,
                                  c.size[0], c.size[1], std::string(interpolation) == "bilinear", antialias, nullptr);
        expect_ran();
        if (std::string(interpolation) == "nearest") {
          expect_bitwise_equal(out.host(), expected);
        } else if (dtype == at::kByte) {
          expect_close(out.host(), expected, 0.0, 1.0);  // one intensity level, as against torchvision (README)
        } else {
          expect_close(out.host(), expected, 1e-5, 1e-5);
        }
      }
    }
  }
}

// Whether the CPU kernel's grid (torch's bmm) equals the CUDA kernel's, which rounds each product: on every CPU seen but
// those where MKL fuses a product into the sum.
bool grids_agree(const at::Tensor& matrices, int64_t h, int64_t w) {
  const at::Tensor grids = affine_grids(matrices.data_ptr<float>(), matrices.size(0), h, w);
  const float* m = matrices.data_ptr<float>();
  const float* g = grids.data_ptr<float>();
  for (int64_t i = 0; i < matrices.size(0); ++i, m += 6) {
    for (int64_t p = 0; p < h * w; ++p, g += 2) {
      const float bx = static_cast<float>(p % w) - (static_cast<float>(w) - 1.0f) * 0.5f;
      const float by = static_cast<float>(p / w) - (static_cast<float>(h) - 1.0f) * 0.5f;
      const float half_w = 0.5f * static_cast<float>(w), half_h = 0.5f * static_cast<float>(h);
      if (g[0] != resample::affine_grid_value(bx, by, m[0] / half_w, m[1] / half_w, m[2] / half_w) ||
          g[1] != resample::affine_grid_value(bx, by, m[3] / half_h, m[4] / half_h, m[5] / half_h)) {
        return false;
      }
    }
  }
  return true;
}

TEST_F(KernelsAgainstCpu, Affine) {
  Random random(11);
  for (const at::ScalarType dtype : {at::kByte, at::kFloat}) {
    for (const std::string interpolation : {"nearest", "bilinear"}) {
      for (const bool has_fill : {false, true}) {
        for (const GeometryCase& c : kGeometryCases) {
          SCOPED_TRACE(shape_name(c.shape) + " " + c10::toString(dtype) + " " + interpolation +
                       (has_fill ? " fill" : ""));
          const int64_t n = c.shape[0], channels = c.shape[1];
          // Rotation, scale, shear and translation as torchvision's inverse matrices: anything invertible.
          const at::Tensor angles = random.uniform({n}, -3.2, 3.2), scales = random.uniform({n}, 0.5, 1.6);
          const at::Tensor shear = random.uniform({n}, -0.3, 0.3);
          const at::Tensor matrices =
              at::stack({scales * angles.cos(), -scales * angles.sin() + shear, random.uniform({n}, -4.0, 4.0),
                         scales * angles.sin(), scales * angles.cos(), random.uniform({n}, -4.0, 4.0)},
                        1)
                  .contiguous();
          std::vector<double> fill;
          if (has_fill) {
            for (int64_t i = 0; i < channels; ++i) fill.push_back(static_cast<double>(random.integer(0, 256)));
          }
          const at::Tensor images = random.images(c.shape, dtype);
          const at::Tensor expected = affine(images, matrices, interpolation, fill);
          const DeviceCopy in(images), matrix(matrices), out(at::empty_like(images));
          cuda::launch_affine(in.get(), dtype == at::kByte, matrix.get<float>(), out.get(), n, channels, c.shape[2],
                              c.shape[3], interpolation == "bilinear", has_fill, channel_fill(fill, channels), nullptr);
          expect_ran();
          if (grids_agree(matrices, c.shape[2], c.shape[3])) {
            expect_bitwise_equal(out.host(), expected);
          } else if (interpolation == "bilinear") {
            // A grid a few bits apart moves each weight by a few ulps of the source coordinate, and the value by that
            // times the largest step between neighbours, the fill's included (measured on an H100: 1.5e-5 with fill).
            double low = images.min().item<double>(), high = images.max().item<double>();
            for (const double f : fill) low = std::min(low, f), high = std::max(high, f);
            const double coordinate_ulps = 4.0 * static_cast<double>(std::max(c.shape[2], c.shape[3])) * 0x1p-23;
            expect_close(out.host(), expected, 0.0, dtype == at::kByte ? 1.0 : 2.0 * coordinate_ulps * (high - low));
          } else {  // a nearest pick may flip where a source coordinate is a tie: a few values only
            EXPECT_LT(out.host().ne(expected).sum().item<int64_t>(), std::max<int64_t>(2, images.numel() / 100));
          }
        }
      }
    }
  }
}

// ---- mixup and cutmix ---------------------------------------------------------------------------------------

// Rows of mix params: weights lam and 1 - lam, boxes anywhere in (or all of) an H x W image.
at::Tensor mix_params(int64_t n, int64_t h, int64_t w, Random& random) {
  at::Tensor params = at::empty({n, kMixParams});
  for (int64_t i = 0; i < n; ++i) {
    const float lam = random.uniform({}, 0.0, 1.0).item<float>();
    const float target_lam = random.uniform({}, 0.0, 1.0).item<float>();
    const int64_t y0 = random.integer(0, h + 1), x0 = random.integer(0, w + 1);
    const bool whole = i % 3 == 0;
    params[i] = at::tensor({lam, 1.0f - lam, target_lam, 1.0f - target_lam, whole ? 0.0f : static_cast<float>(y0),
                            whole ? static_cast<float>(h) : static_cast<float>(random.integer(y0, h + 1)),
                            whole ? 0.0f : static_cast<float>(x0),
                            whole ? static_cast<float>(w) : static_cast<float>(random.integer(x0, w + 1))});
  }
  return params;
}

TEST_F(KernelsAgainstCpu, MixInputs) {
  Random random(12);
  struct Case {
    std::vector<int64_t> shape;
    bool channels_last;
  };
  // N x C x H x W in both layouts, N x D and N x H x W, one sample (its own partner), none.
  const std::vector<Case> cases = {{{4, 3, 7, 9}, false}, {{3, 3, 5, 6}, true}, {{5, 37}, false},
                                   {{2, 11, 13}, false},  {{1, 2, 3, 3}, false}, {{0, 3, 4, 4}, false}};
  const DtypePairs dtypes = {{at::kFloat, cuda::KernelDtype::kFloat32},
                             {at::kDouble, cuda::KernelDtype::kFloat64},
                             {at::kHalf, cuda::KernelDtype::kFloat16},
                             {at::kBFloat16, cuda::KernelDtype::kBFloat16}};
  expect_every_listed_dtype(dtypes, cuda::MixDtypes::values);
  for (const auto& [dtype, launch_type] : dtypes) {
    for (const Case& c : cases) {
      SCOPED_TRACE(shape_name(c.shape) + " " + c10::toString(dtype) + (c.channels_last ? " channels-last" : ""));
      at::Tensor inputs = random.uniform(c.shape, -2.0, 2.0, dtype);
      if (c.channels_last) inputs = inputs.contiguous(at::MemoryFormat::ChannelsLast);
      const at::Tensor images = mix_images_view(inputs);
      const at::Tensor params = mix_params(images.size(0), images.size(2), images.size(3), random);
      const at::Tensor expected = mix_inputs(inputs, params);
      const DeviceCopy in(inputs), out(at::empty_like(inputs)), rows(params);
      const at::Tensor out_images = mix_images_view(at::empty_like(inputs));
      cuda::MixShape shape{};
      for (int d = 0; d < 4; ++d) {
        shape.size[d] = images.size(d);
        shape.in_stride[d] = images.stride(d);
        shape.out_stride[d] = out_images.stride(d);
      }
      cuda::launch_mix_inputs(in.get(), out.get(), launch_type, shape, rows.get<float>(), nullptr);
      expect_ran();
      const at::Tensor result = out.host();
      EXPECT_EQ(result.strides(), expected.strides());
      expect_bitwise_equal(result, expected);
    }
  }
}

TEST_F(KernelsAgainstCpu, MixTargets) {
  Random random(13);
  const std::vector<std::pair<int64_t, int64_t>> cases = {{5, 10}, {1, 1}, {0, 4}, {3, 1000}};  // N, classes
  for (const double smoothing : {0.0, 0.1}) {
    for (const auto& [n, classes] : cases) {
      SCOPED_TRACE(std::to_string(n) + " x " + std::to_string(classes) + " smoothing " + std::to_string(smoothing));
      const at::Tensor labels = random.integers({n}, 0, classes), params = mix_params(n, 1, 1, random);
      const at::Tensor expected = mix_targets(labels, params, classes, smoothing);
      // on and off as the CUDA op computes them (mixup_cuda.cpp).
      const auto off = static_cast<float>(smoothing / static_cast<double>(classes));
      const auto on = static_cast<float>(1.0 - smoothing + smoothing / static_cast<double>(classes));
      const DeviceCopy label(labels), rows(params), out(at::empty({n, classes}));
      cuda::launch_mix_targets(label.get<int64_t>(), rows.get<float>(), out.get<float>(), n, classes, on, off, nullptr);
      expect_ran();
      expect_bitwise_equal(out.host(), expected);
    }
  }
}

// ---- max-pool + batch norm + ReLU ---------------------------------------------------------------------------

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

// ---- the training step --------------------------------------------------------------------------------------

TEST_F(KernelsAgainstCpu, AccumulateMetrics) {
  Random random(14);
  struct Case {
    std::vector<int64_t> output_shape;  // N, C, spatial...
    bool with_targets;
  };
  // Classification, segmentation (N x C x H x W), rows past a block, one sample, none, loss and count only.
  const std::vector<Case> cases = {{{37, 5}, true}, {{3, 4, 7, 9}, true}, {{300, 3}, true},
                                   {{1, 1}, true},  {{0, 6}, true},       {{9, 5}, false}};
  const DtypePairs dtypes = {{at::kFloat, cuda::KernelDtype::kFloat32},
                             {at::kDouble, cuda::KernelDtype::kFloat64},
                             {at::kHalf, cuda::KernelDtype::kFloat16},
                             {at::kBFloat16, cuda::KernelDtype::kBFloat16}};
  expect_every_listed_dtype(dtypes, cuda::MetricsOutputDtypes::values);
  for (const auto& [dtype, launch_type] : dtypes) {
    for (const int64_t top_k : {0, 1, 3}) {
      for (const Case& c : cases) {
        SCOPED_TRACE(shape_name(c.output_shape) + " " + c10::toString(dtype) + " top " + std::to_string(top_k) +
                     (c.with_targets ? "" : " no targets"));
        const int64_t n = c.output_shape[0], classes = c.output_shape[1];
        // Few distinct values, so ties are common, and some NaN (the largest, as torch.argmax).
        at::Tensor output = random.integers(c.output_shape, 0, 4).to(dtype);
        output = at::where(random.uniform(c.output_shape, 0.0, 1.0) < 0.05, at::full({}, NAN, dtype), output);
        std::vector<int64_t> target_shape = {n};
        target_shape.insert(target_shape.end(), c.output_shape.begin() + 2, c.output_shape.end());
        // Some outside [0, C): counted, no hit; some ignore_index (-1 here): not counted.
        const at::Tensor targets = random.integers(target_shape, -2, classes + 1);
        const int64_t ignore_index = -1;
        const std::optional<at::Tensor> target = c.with_targets ? std::optional<at::Tensor>(targets) : std::nullopt;
        const at::Tensor loss = random.uniform({}, 0.0, 3.0);
        const at::Tensor sums = random.integers({5}, 0, 100).to(at::kDouble);
        const DeviceCopy device_sums(sums), device_loss(loss), out(output.contiguous()), label(targets),
            counted(at::zeros({1}, at::kLong));
        accumulate_metrics(sums, output, target, loss, top_k, ignore_index);
        const int64_t spatial = c.with_targets && n > 0 ? targets.numel() / n : 0;
        cuda::launch_accumulate_metrics(device_sums.get<double>(), device_loss.get<float>(), out.get(), launch_type,
                                        c.with_targets ? label.get<int64_t>() : nullptr, n,
                                        c.with_targets ? classes : 0, spatial, top_k, ignore_index,
                                        c.with_targets ? counted.get<unsigned long long>() : nullptr, nullptr);
        expect_ran();
        expect_bitwise_equal(device_sums.host(), sums);
        expect_bitwise_equal(counted.host(), at::zeros({1}, at::kLong));  // left at zero for the next batch
      }
    }
  }
}

TEST_F(KernelsAgainstCpu, CountStep) {
  for (const float found_inf : {0.0f, 1.0f}) {
    SCOPED_TRACE(found_inf);
    const at::Tensor counters = at::tensor({12.0f, 3.0f, 2.0f}), found = at::full({}, found_inf);
    const DeviceCopy device_counters(counters), device_found(found);
    count_step(counters, found);
    cuda::launch_count_step(device_counters.get<float>(), device_found.get<float>(), nullptr);
    expect_ran();
    expect_bitwise_equal(device_counters.host(), counters);
    expect_bitwise_equal(device_found.host(), found);
  }
}

TEST_F(KernelsAgainstCpu, NextIndices) {
  Random random(15);
  const at::Tensor order = random.permutation(1000);
  for (const int64_t count : {0, 1, 255, 256, 600}) {  // none, one, a block, past it, three blocks
    SCOPED_TRACE(count);
    const at::Tensor cursor = at::full({1}, 37, at::kLong), index = at::full({count}, -1, at::kLong);
    const DeviceCopy device_order(order), device_cursor(cursor), device_index(index);
    next_indices(order, cursor, index);
    cuda::launch_next_indices(device_order.get<int64_t>(), device_cursor.get<int64_t>(), device_index.get<int64_t>(),
                              count, nullptr);
    expect_ran();
    expect_bitwise_equal(device_index.host(), index);
    expect_bitwise_equal(device_cursor.host(), cursor);
  }
}

TEST_F(KernelsAgainstCpu, LearningRate) {
  std::vector<ScheduleConfig> configs(5);
  configs[0] = {ScheduleKind::kConstant, 0.1, 10, 100};
  configs[1] = {ScheduleKind::kStep, 0.1, 5, 100, 30, 0.5};
  configs[2] = {ScheduleKind::kMultiStep, 0.1, 0, 100, 1, 0.2, {10, 40, 70}};
  configs[3] = {ScheduleKind::kCosine, 0.1, 8, 100, 1, 0.1, {}, 1e-4};
  configs[4] = {ScheduleKind::kOneCycle, 0.1, 0, 100};
  for (const ScheduleConfig& config : configs) {
    for (const float step : {0.0f, 1.0f, 7.0f, 8.0f, 10.0f, 29.0f, 30.0f, 55.0f, 99.0f, 150.0f}) {
      SCOPED_TRACE(to_string(config.kind) + " step " + std::to_string(step));
      const at::Tensor count = at::full({}, step), lr = at::zeros({});
      const at::Tensor schedule = pack_schedule(config);
      const ScheduleParams params = schedule_params(count, lr, schedule);
      const DeviceCopy device_count(count), device_lr(lr);
      learning_rate(count, lr, schedule);
      cuda::launch_learning_rate(device_count.get<float>(), device_lr.get<float>(), params, nullptr);
      expect_ran();
      expect_bitwise_equal(device_lr.host(), lr);
    }
  }
}

// ---- the kernels' dtypes ------------------------------------------------------------------------------------

// What KernelDtypes<...>::dispatch called: the element type's size and whether it is a float, or nothing.
template <typename Dtypes>
std::vector<std::pair<size_t, bool>> dispatched(cuda::KernelDtype dtype) {
  std::vector<std::pair<size_t, bool>> calls;
  Dtypes::dispatch(dtype, [&](auto element) {
    using T = typename decltype(element)::type;
    calls.emplace_back(sizeof(T), std::is_floating_point_v<T>);
  });
  return calls;
}

TEST(KernelDtypes, DispatchCallsOnceWithTheElementTypeOfAListedDtype) {
  using Calls = std::vector<std::pair<size_t, bool>>;
  static_assert(std::is_same_v<cuda::KernelElement<cuda::KernelDtype::kFloat16>::type, __half>);
  static_assert(std::is_same_v<cuda::KernelElement<cuda::KernelDtype::kBFloat16>::type, __nv_bfloat16>);
  EXPECT_EQ(dispatched<cuda::EmaDtypes>(cuda::KernelDtype::kFloat32), (Calls{{4, true}}));
  EXPECT_EQ(dispatched<cuda::EmaDtypes>(cuda::KernelDtype::kFloat64), (Calls{{8, true}}));
  EXPECT_EQ(dispatched<cuda::EmaDtypes>(cuda::KernelDtype::kFloat16), (Calls{{2, false}}));
  EXPECT_EQ(dispatched<cuda::EmaDtypes>(cuda::KernelDtype::kBFloat16), (Calls{{2, false}}));
  EXPECT_EQ(dispatched<cuda::EmaDtypes>(cuda::KernelDtype::kBytes), (Calls{{1, false}}));
  // A dtype the list lacks calls nothing (the launcher's callers refused it with kernel_dtype).
  EXPECT_EQ(dispatched<cuda::AugmentOutDtypes>(cuda::KernelDtype::kFloat64), Calls{});
  EXPECT_EQ(dispatched<cuda::FloatingKernelDtypes>(cuda::KernelDtype::kBytes), Calls{});
}

std::string kernel_dtype_error(at::ScalarType dtype, c10::ArrayRef<cuda::KernelDtype> valid) {
  try {
    kernel_dtype(dtype, valid, "some_op", "images");
  } catch (const c10::Error& error) {
    return error.what_without_backtrace();
  }
  return "no error";
}

TEST(KernelDtypes, KernelDtypeMapsScalarTypesAndNamesTheOpAndTheValidDtypesOtherwise) {
  EXPECT_EQ(kernel_dtype(at::kHalf, cuda::FloatingKernelDtypes::values, "op", "x"), cuda::KernelDtype::kFloat16);
  EXPECT_EQ(kernel_dtype(at::kLong, cuda::EmaDtypes::values, "op", "x"), cuda::KernelDtype::kBytes);
  EXPECT_EQ(kernel_dtype(at::kBool, cuda::EmaDtypes::values, "op", "x"), cuda::KernelDtype::kBytes);
  EXPECT_EQ(kernel_dtype(at::kComplexFloat, cuda::EmaDtypes::values, "op", "x"), cuda::KernelDtype::kBytes);
  EXPECT_EQ(kernel_dtype_error(at::kInt, cuda::FloatingKernelDtypes::values),
            "some_op on CUDA: images must be float32, float64, float16 or bfloat16, got Int");
  EXPECT_EQ(kernel_dtype_error(at::kDouble, cuda::AugmentOutDtypes::values),
            "some_op on CUDA: images must be float32, float16 or bfloat16, got Double");
  // A floating-point dtype no kernel computes in is not copied as bytes either.
  EXPECT_EQ(kernel_dtype_error(at::kFloat8_e4m3fn, cuda::EmaDtypes::values),
            "some_op on CUDA: images must be float32, float64, float16, bfloat16 or any dtype that is not "
            "floating-point (copied as bytes), got Float8_e4m3fn");
}

// ---- every launcher is tested ---------------------------------------------------------------------------------

std::set<std::string> matches(const std::string& path, const std::regex& pattern) {
  std::ifstream file(path);
  EXPECT_TRUE(file.good()) << "cannot read " << path;
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::set<std::string> names;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), pattern); it != std::sregex_iterator(); ++it) {
    names.insert((*it)[1]);
  }
  return names;
}

// A launcher declared in a csrc/ops/cuda/*_kernels.h header that no test of this file calls fails here, so a new
// kernel cannot go untested.
TEST(KernelLaunchers, EveryDeclaredLauncherHasATest) {
  std::set<std::string> declared;
  for (const auto& entry : std::filesystem::directory_iterator(GPUCORE_KERNEL_HEADERS_DIR)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 10 && name.substr(name.size() - 10) == "_kernels.h") {
      declared.merge(matches(entry.path().string(), std::regex(R"(\bvoid\s+(launch_\w+)\s*\()")));
    }
  }
  const std::set<std::string> tested = matches(GPUCORE_KERNEL_TEST_SOURCE, std::regex(R"(\bcuda::(launch_\w+)\()"));
  EXPECT_GE(declared.size(), 17u) << "fewer launchers than the headers declared: the pattern no longer reads them";
  for (const std::string& launcher : declared) EXPECT_TRUE(tested.count(launcher) > 0) << launcher << " has no test";
}

}  // namespace
}  // namespace gpucore::ops
