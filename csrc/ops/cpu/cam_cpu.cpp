// CPU kernels of the CAM ops: plain loops over float32, parallel over images (and channels).
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/cam/cam.h"
#include "ops/float_contiguous.h"
#include "ops/jet_colormap.h"

namespace gpucore::ops {
namespace {

at::Tensor cam_weights_cpu(const at::Tensor& activations, const at::Tensor& gradients, c10::string_view method_name) {
  check_weights_inputs(activations, gradients);
  const CamMethod method = parse_cam_method(std::string(method_name));
  const at::Tensor a = float_contiguous(activations), g = float_contiguous(gradients);
  const int64_t channels = a.size(0) * a.size(1), area = a.size(2) * a.size(3);
  at::Tensor out = at::empty({a.size(0), a.size(1)}, a.options());
  const float* ap = a.data_ptr<float>();
  const float* gp = g.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, channels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t nc = begin; nc < end; ++nc) {
      const float* act = ap + nc * area;
      const float* grad = gp + nc * area;
      double sum_a = 0, weight = 0;
      if (method != CamMethod::kGradCam) {
        for (int64_t i = 0; i < area; ++i) sum_a += act[i];
      }
      for (int64_t i = 0; i < area; ++i) {
        const double gi = grad[i];
        switch (method) {
          case CamMethod::kGradCam:
            weight += gi;
            break;
          case CamMethod::kGradCamPlusPlus:
            if (gi != 0) {
              const double g2 = gi * gi;
              weight += std::max(gi, 0.0) * g2 / (2 * g2 + sum_a * g2 * gi + 1e-6);
            }
            break;
          case CamMethod::kXGradCam:
            weight += gi * act[i] / (sum_a + 1e-7);
            break;
        }
      }
      op[nc] = static_cast<float>(method == CamMethod::kGradCam ? weight / area : weight);
    }
  });
  return out;
}

at::Tensor cam_weighted_sum_cpu(const at::Tensor& activations, const at::Tensor& weights) {
  check_weighted_sum_inputs(activations, weights);
  const at::Tensor a = float_contiguous(activations), w = float_contiguous(weights);
  const int64_t n = a.size(0), channels = a.size(1), area = a.size(2) * a.size(3);
  const bool elementwise = w.dim() == 4;
  at::Tensor out = at::empty({n, a.size(2), a.size(3)}, a.options());
  const float* ap = a.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    std::vector<double> sums(area);
    for (int64_t image = begin; image < end; ++image) {
      std::fill(sums.begin(), sums.end(), 0.0);
      for (int64_t c = 0; c < channels; ++c) {
        const float* act = ap + (image * channels + c) * area;
        if (elementwise) {
          const float* weight = wp + (image * channels + c) * area;
          for (int64_t i = 0; i < area; ++i) sums[i] += static_cast<double>(weight[i]) * act[i];
        } else {
          const double weight = wp[image * channels + c];
          for (int64_t i = 0; i < area; ++i) sums[i] += weight * act[i];
        }
      }
      for (int64_t i = 0; i < area; ++i) op[image * area + i] = static_cast<float>(std::max(sums[i], 0.0));
    }
  });
  return out;
}

// Source index and weights of bilinear interpolation with align_corners=False (half-pixel centres).
struct Taps {
  int64_t low, high;
  float low_weight, high_weight;
};

Taps bilinear_taps(int64_t out_index, int64_t in_size, int64_t out_size) {
  const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
  const float source = std::max(scale * (static_cast<float>(out_index) + 0.5f) - 0.5f, 0.0f);
  const int64_t low = std::min(static_cast<int64_t>(source), in_size - 1);
  const int64_t high = low + (low < in_size - 1 ? 1 : 0);
  const float high_weight = source - static_cast<float>(low);
  return {low, high, 1.0f - high_weight, high_weight};
}

at::Tensor cam_normalize_cpu(const at::Tensor& cams, at::IntArrayRef size) {
  check_normalize_inputs(cams, size);
  const at::Tensor c = float_contiguous(cams);
  const int64_t n = c.size(0), h = c.size(1), w = c.size(2);
  const int64_t out_h = size.empty() ? h : size[0], out_w = size.empty() ? w : size[1];
  at::Tensor out = at::empty({n, out_h, out_w}, c.options());
  const float* cp = c.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> normalized(h * w);
    for (int64_t image = begin; image < end; ++image) {
      const float* in = cp + image * h * w;
      const auto [min_it, max_it] = std::minmax_element(in, in + h * w);
      const float low = *min_it, range = *max_it - *min_it;
      for (int64_t i = 0; i < h * w; ++i) normalized[i] = (in[i] - low) / (range + 1e-7f);
      float* dst = op + image * out_h * out_w;
      for (int64_t y = 0; y < out_h; ++y) {
        const Taps ty = bilinear_taps(y, h, out_h);
        for (int64_t x = 0; x < out_w; ++x) {
          const Taps tx = bilinear_taps(x, w, out_w);
          dst[y * out_w + x] = ty.low_weight * (tx.low_weight * normalized[ty.low * w + tx.low] +
                                                tx.high_weight * normalized[ty.low * w + tx.high]) +
                               ty.high_weight * (tx.low_weight * normalized[ty.high * w + tx.low] +
                                                 tx.high_weight * normalized[ty.high * w + tx.high]);
        }
      }
    }
  });
  return out;
}

at::Tensor cam_overlay_cpu(const at::Tensor& images, const at::Tensor& cams, double alpha) {
  check_overlay_inputs(images, cams, alpha);
  const at::Tensor img = images.contiguous();
  const at::Tensor c = float_contiguous(cams);
  const int64_t n = img.size(0), pixels = img.size(1) * img.size(2);
  at::Tensor out = at::empty_like(img);
  const uint8_t* ip = img.data_ptr<uint8_t>();
  const float* cp = c.data_ptr<float>();
  uint8_t* op = out.data_ptr<uint8_t>();
  const float heat_weight = static_cast<float>(alpha), image_weight = 1.0f - heat_weight;
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> blended(pixels * 3);
    for (int64_t image = begin; image < end; ++image) {
      float peak = 0;
      for (int64_t p = 0; p < pixels; ++p) {
        const float scaled = std::clamp(255.0f * cp[image * pixels + p], 0.0f, 255.0f);
        const uint8_t* colour = kJetRGB[static_cast<int>(scaled)];  // truncation, as np.uint8
        for (int k = 0; k < 3; ++k) {
          // The operation order of show_cam_on_image, so float rounding (and uint8 truncation) agree.
          const float heat = static_cast<float>(colour[k]) / 255.0f;
          const float pixel = static_cast<float>(ip[(image * pixels + p) * 3 + k]) / 255.0f;
          const float value = heat_weight * heat + image_weight * pixel;
          blended[p * 3 + k] = value;
          peak = std::max(peak, value);
        }
      }
      for (int64_t i = 0; i < pixels * 3; ++i) {
        op[image * pixels * 3 + i] = peak > 0 ? static_cast<uint8_t>(255.0f * (blended[i] / peak)) : 0;
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(gpucore, CPU, m) {
  m.impl("cam_weights", &cam_weights_cpu);
  m.impl("cam_weighted_sum", &cam_weighted_sum_cpu);
  m.impl("cam_normalize", &cam_normalize_cpu);
  m.impl("cam_overlay", &cam_overlay_cpu);
}

}  // namespace gpucore::ops
