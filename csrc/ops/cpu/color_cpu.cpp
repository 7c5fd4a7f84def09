// CPU kernels of the color ops: color_ops runs each image's adjustments in place in its output plane set (one
// image per task); erase copies the batch and fills each sample's box.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <vector>

#include "ops/augment/color.h"
#include "ops/color_math.h"
#include "ops/cpu/batch_memory.h"
#include "ops/cpu/torch_capability.h"
#include "ops/cpu/vector_clones.h"

namespace gpucore::ops {
namespace {

struct Image {
  uint8_t* data;
  int64_t channels, h, w;
  int64_t plane() const { return h * w; }
  uint8_t* channel(int64_t c) const { return data + c * plane(); }
};

// Per value: `f(value)` on every value of the image, through a table of f's 256 results, so each value costs one
// lookup whatever f computes (and gets exactly f's result).
template <typename F>
void map_values(uint8_t* data, int64_t count, F f) {
  std::array<uint8_t, 256> table;
  for (int v = 0; v < 256; ++v) table[v] = f(static_cast<uint8_t>(v));
  for (int64_t i = 0; i < count; ++i) data[i] = table[data[i]];
}
template <typename F>
void map_values(const Image& image, F f) {
  map_values(image.data, image.channels * image.plane(), f);
}

// adjust_brightness (other = 0, weight = 0: x * ratio, clamped) and adjust_contrast (other = the mean) on every
// value: computed per value on 32-byte vectors, faster than a table's one lookup per value.
GPUCORE_VECTOR_CLONES void blend_values(const Image& image, float other, float ratio, float weight, bool fused) {
  const int64_t count = image.channels * image.plane();
  uint8_t* __restrict data = image.data;
  for (int64_t i = 0; i < count; ++i) data[i] = blend(data[i], other, ratio, weight, fused);
}

// adjust_contrast's blend target: the mean of the grayscale image (floored for 3 channels). The values are
// integers, summed exactly here; torch's float32 sum is exact too up to 2^24 (images up to 65793 pixels).
GPUCORE_VECTOR_CLONES float contrast_mean(const Image& image, bool fused) {
  const int64_t count = image.plane();
  const uint8_t* r = image.channel(0);
  int64_t sum = 0;
  if (image.channels == 3) {
    const uint8_t *g = image.channel(1), *b = image.channel(2);
    for (int64_t i = 0; i < count; ++i) sum += static_cast<int32_t>(floored_grayscale(r[i], g[i], b[i], fused));
  } else {
    for (int64_t i = 0; i < count; ++i) sum += r[i];
  }
  return static_cast<float>(sum) / static_cast<float>(count);
}

// adjust_saturation's pixel loop with `fused` a constant in each version (a branch on it inside the loop stops
// GCC's vectoriser: "control flow in loop"); the count and the three planes held apart, so the compiler knows the
// stores change neither and vectorises.
template <bool kFused>
__attribute__((always_inline)) inline void blend_pixels_with_grayscale(uint8_t* __restrict r, uint8_t* __restrict g,
                                                                      uint8_t* __restrict b, int64_t count,
                                                                      float ratio, float weight) {
  for (int64_t i = 0; i < count; ++i) {
    const float gray = floored_grayscale(r[i], g[i], b[i], kFused);
    r[i] = blend(r[i], gray, ratio, weight, kFused);
    g[i] = blend(g[i], gray, ratio, weight, kFused);
    b[i] = blend(b[i], gray, ratio, weight, kFused);
  }
}

GPUCORE_VECTOR_CLONES void blend_with_grayscale(const Image& image, double factor, bool fused) {
  if (image.channels != 3) return;  // saturation leaves one channel unchanged, as PIL
  const float ratio = static_cast<float>(factor), weight = blend_weight(factor);
  uint8_t *r = image.channel(0), *g = image.channel(1), *b = image.channel(2);
  if (fused) {
    blend_pixels_with_grayscale<true>(r, g, b, image.plane(), ratio, weight);
  } else {
    blend_pixels_with_grayscale<false>(r, g, b, image.plane(), ratio, weight);
  }
}

// flatten: shift_hue inlined into each clone (GCC left it a call, so no clone vectorised it).
__attribute__((flatten)) GPUCORE_VECTOR_CLONES void shift_image_hue(const Image& image, float hue) {
  if (image.channels != 3) return;  // hue leaves one channel unchanged, as torchvision
  const int64_t count = image.plane();
  uint8_t *__restrict r = image.channel(0), *__restrict g = image.channel(1), *__restrict b = image.channel(2);
  for (int64_t i = 0; i < count; ++i) shift_hue(r[i], g[i], b[i], hue);
}

// adjust_sharpness's interior pixels of one plane, `fused` a constant as in blend_pixels_with_grayscale.
template <bool kFused>
__attribute__((always_inline)) inline void sharpen_plane(const uint8_t* __restrict from, uint8_t* __restrict plane,
                                                        int64_t h, int64_t w, float weight) {
  for (int64_t y = 1; y < h - 1; ++y) {
    uint8_t* __restrict row = plane + y * w;
    for (int64_t x = 1; x < w - 1; ++x) {
      row[x] = sharpen([&](int dy, int dx) { return from[(y + dy) * w + x + dx]; }, weight, kFused);
    }
  }
}

GPUCORE_VECTOR_CLONES void sharpen_image(const Image& image, double factor, std::vector<uint8_t>& source, bool fused) {
  const int64_t h = image.h, w = image.w;
  if (h <= 2 || w <= 2) return;
  const float weight = blend_weight(factor);
  for (int64_t c = 0; c < image.channels; ++c) {
    uint8_t* plane = image.channel(c);
    source.assign(plane, plane + image.plane());
    if (fused) {
      sharpen_plane<true>(source.data(), plane, h, w, weight);
    } else {
      sharpen_plane<false>(source.data(), plane, h, w, weight);
    }
  }
}

// flatten: the table's loop inside each clone too (a call out of a clone runs baseline code).
__attribute__((flatten)) GPUCORE_VECTOR_CLONES void autocontrast_image(const Image& image) {
  const int64_t count = image.plane();
  for (int64_t c = 0; c < image.channels; ++c) {
    uint8_t* plane = image.channel(c);
    uint8_t lo = 255, hi = 0;  // a plain min/max loop, which compilers vectorise (std::minmax_element they do not)
    for (int64_t i = 0; i < count; ++i) {
      lo = std::min(lo, plane[i]);
      hi = std::max(hi, plane[i]);
    }
    const Autocontrast params = autocontrast_params(lo, hi);
    map_values(plane, count, [=](uint8_t x) { return autocontrast(x, params); });
  }
}

GPUCORE_VECTOR_CLONES void grayscale_image(const Image& image, bool fused) {
  if (image.channels != 3) return;  // one channel is its own grayscale
  const int64_t count = image.plane();
  uint8_t *__restrict r = image.channel(0), *__restrict g = image.channel(1), *__restrict b = image.channel(2);
  for (int64_t i = 0; i < count; ++i) {
    r[i] = g[i] = b[i] = static_cast<uint8_t>(floored_grayscale(r[i], g[i], b[i], fused));
  }
}

void equalize_image(const Image& image) {
  for (int64_t c = 0; c < image.channels; ++c) {
    uint8_t* plane = image.channel(c);
    std::array<int32_t, 256> histogram{};
    for (int64_t i = 0; i < image.plane(); ++i) ++histogram[plane[i]];
    const int64_t step = equalize_step(histogram.data(), image.plane());
    if (step == 0) continue;
    std::array<uint8_t, 256> lut{};
    int64_t below = 0;
    for (int v = 1; v < 256; ++v) {
      below += histogram[v - 1];
      lut[v] = equalize_entry(below, step);
    }
    for (int64_t i = 0; i < image.plane(); ++i) plane[i] = lut[plane[i]];
  }
}

void apply(const Image& image, int64_t code, double magnitude, std::vector<uint8_t>& scratch, bool fused) {
  const float value = static_cast<float>(magnitude);  // a Python float as torch multiplies or compares it
  switch (code) {
    case kColorBrightness:
      return blend_values(image, 0.0f, value, 0.0f, fused);
    case kColorContrast:
      return blend_values(image, contrast_mean(image, fused), value, blend_weight(magnitude), fused);
    case kColorSaturation:
      return blend_with_grayscale(image, magnitude, fused);
    case kColorHue:
      return shift_image_hue(image, value);
    case kColorSharpness:
      return sharpen_image(image, magnitude, scratch, fused);
    case kColorPosterize: {
      const int bits = static_cast<int>(magnitude);
      return map_values(image, [=](uint8_t x) { return posterize(x, bits); });
    }
    case kColorSolarize:
      return map_values(image, [=](uint8_t x) { return solarize(x, value); });
    case kColorAutocontrast:
      return autocontrast_image(image);
    case kColorEqualize:
      return equalize_image(image);
    case kColorInvert:
      return map_values(image, [](uint8_t x) { return static_cast<uint8_t>(255 - x); });
    case kColorGrayscale:
      return grayscale_image(image, fused);
    default:
      return;  // kColorIdentity
  }
}

at::Tensor color_ops_cpu(const at::Tensor& images, const at::Tensor& codes, const at::Tensor& magnitudes) {
  check_color_ops_inputs(images, codes, magnitudes);
  check_color_values(codes, magnitudes);
  at::Tensor out = copy_batch(images);
  const at::Tensor code = codes.contiguous(), magnitude = magnitudes.contiguous();
  const int64_t n = out.size(0), steps = code.size(1);
  const int64_t channels = out.size(1), h = out.size(2), w = out.size(3);
  uint8_t* data = out.data_ptr<uint8_t>();
  const int64_t* code_data = code.data_ptr<int64_t>();
  const double* magnitude_data = magnitude.data_ptr<double>();
  const bool fused = torch_runs_vector_kernels();  // they fuse add_(other, alpha) (color_math.h's multiply_add)
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    std::vector<uint8_t> scratch;
    for (int64_t s = begin; s < end; ++s) {
      const Image image{data + s * channels * h * w, channels, h, w};
      for (int64_t k = 0; k < steps; ++k) {
        apply(image, code_data[s * steps + k], magnitude_data[s * steps + k], scratch, fused);
      }
    }
  });
  return out;
}

template <typename T>
void erase_boxes(T* data, const int64_t* boxes, const float* fill, const int64_t* seeds, int64_t n, int64_t channels,
                 int64_t h, int64_t w) {
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) {
      const int64_t top = boxes[s * 4], left = boxes[s * 4 + 1], height = boxes[s * 4 + 2], width = boxes[s * 4 + 3];
      for (int64_t c = 0; c < channels; ++c) {
        T* plane = data + (s * channels + c) * h * w;
        for (int64_t y = 0; y < height; ++y) {
          for (int64_t x = 0; x < width; ++x) {
            const float value = fill ? fill[s * channels + c] : erase_noise(seeds[s], (c * height + y) * width + x);
            plane[(top + y) * w + left + x] = static_cast<T>(value);
          }
        }
      }
    }
  });
}

void check_boxes_inside(const at::Tensor& boxes, int64_t h, int64_t w) {
  const int64_t* b = boxes.data_ptr<int64_t>();
  for (int64_t s = 0; s < boxes.size(0); ++s) {
    const int64_t top = b[s * 4], left = b[s * 4 + 1], height = b[s * 4 + 2], width = b[s * 4 + 3];
    TORCH_CHECK(top >= 0 && left >= 0 && height >= 0 && width >= 0 && top + height <= h && left + width <= w,
                "erase: box ", s, " (top ", top, ", left ", left, ", height ", height, ", width ", width,
                ") does not lie inside the ", h, " x ", w, " image");
  }
}

at::Tensor erase_cpu(const at::Tensor& images, const at::Tensor& boxes, const std::optional<at::Tensor>& fill,
                     const std::optional<at::Tensor>& noise_seeds) {
  check_erase_inputs(images, boxes, fill, noise_seeds);
  at::Tensor out = copy_batch(images);
  const at::Tensor box = boxes.contiguous();
  check_boxes_inside(box, out.size(2), out.size(3));
  const at::Tensor fill_values = fill ? fill->contiguous() : at::Tensor();
  const at::Tensor seeds = noise_seeds ? noise_seeds->contiguous() : at::Tensor();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "erase_cpu", [&] {
    erase_boxes(out.data_ptr<scalar_t>(), box.data_ptr<int64_t>(), fill ? fill_values.data_ptr<float>() : nullptr,
                noise_seeds ? seeds.data_ptr<int64_t>() : nullptr, out.size(0), out.size(1), out.size(2), out.size(3));
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(gpucore, CPU, m) {
  m.impl("color_ops", &color_ops_cpu);
  m.impl("erase", &erase_cpu);
}

}  // namespace gpucore::ops
