#pragma once
// The per-pixel math of the color ops (color.h), one definition for their CPU and CUDA kernels alike; free of
// torch headers so nvcc compiles it. Each function follows torchvision.transforms.v2.functional's uint8 path
// operation by operation in float32 (python-float scalars rounded to float32 as torch does), so results match
// it up to the last bit of a float32 sum whose order differs.
#include <cmath>
#include <cstdint>

#include "ops/host_device.h"

namespace gpucore::ops {

// a * b rounded to float32 on its own, never fused into a following addition by the compiler.
GPUCORE_HOST_DEVICE inline float multiply(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// The adjustments of color_ops, by code. Magnitude: the functional's Python-float argument, as a double (factor,
// hue shift, bits, threshold in intensity levels); unused by the last four.
enum ColorOpCode : int64_t {
  kColorIdentity = 0,
  kColorBrightness = 1,    // adjust_brightness(factor >= 0)
  kColorContrast = 2,      // adjust_contrast(factor >= 0)
  kColorSaturation = 3,    // adjust_saturation(factor >= 0)
  kColorHue = 4,           // adjust_hue(hue_factor in [-0.5, 0.5])
  kColorSharpness = 5,     // adjust_sharpness(factor >= 0)
  kColorPosterize = 6,     // posterize(bits in 0..8)
  kColorSolarize = 7,      // solarize(threshold), compared as float32
  kColorAutocontrast = 8,  // autocontrast
  kColorEqualize = 9,      // equalize
  kColorInvert = 10,       // invert
  kColorGrayscale = 11,    // rgb_to_grayscale(num_output_channels = the image's)
  kColorOpCount = 12,
};

// float -> uint8 as torch's clamp_(0, 255) then .to(uint8) (truncation). Truncated through int32, the same value,
// because compilers vectorise float -> int32 but not float -> uint8.
GPUCORE_HOST_DEVICE inline uint8_t clamp_to_uint8(float v) {
  v = v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v);
  return static_cast<uint8_t>(static_cast<int32_t>(v));
}

// torch's add_(other, alpha), c + a * b, as its kernels round it: one fused multiply-add on CUDA and in its CPU
// kernels built for AVX2 and AVX-512 (Vectorized's fmadd), the product rounded first in its baseline CPU kernels
// (a CPU without AVX2, or ATEN_CPU_CAPABILITY=default). `fused` says which; the CPU kernels ask torch
// (color_cpu.cpp).
GPUCORE_HOST_DEVICE inline float multiply_add(float a, float b, float c, bool fused) {
  return fused ? fmaf(a, b, c) : multiply(a, b) + c;
}

// _rgb_to_grayscale_image in float32: r * 0.2989, then add_(g, alpha=0.587) and add_(b, alpha=0.114).
GPUCORE_HOST_DEVICE inline float grayscale(float r, float g, float b, bool fused = true) {
  return multiply_add(b, 0.114f, multiply_add(g, 0.587f, multiply(r, 0.2989f), fused), fused);
}

// The grayscale value floored, as adjust_saturation and adjust_contrast's mean take it for uint8 images. It is
// never negative, so truncating through int32 floors it; compilers vectorise that where floor of an fmaf is not.
GPUCORE_HOST_DEVICE inline float floored_grayscale(float r, float g, float b, bool fused = true) {
  return static_cast<float>(static_cast<int32_t>(grayscale(r, g, b, fused)));
}

// _blend's weight of the second image, 1 - factor, computed in double from the Python float as torchvision does,
// then float32 (the factor itself multiplies as float32).
GPUCORE_HOST_DEVICE inline float blend_weight(double factor) { return static_cast<float>(1.0 - factor); }

// _blend(x, other, ratio) for one uint8 value: x * ratio, then add_(other, alpha=1 - ratio), clamped, truncated.
GPUCORE_HOST_DEVICE inline uint8_t blend(uint8_t x, float other, float ratio, float weight, bool fused = true) {
  return clamp_to_uint8(multiply_add(other, weight, multiply(static_cast<float>(x), ratio), fused));
}

// fmaxf / fminf for values that are never NaN (there they agree): compilers vectorise these, not the NaN-aware
// library functions.
GPUCORE_HOST_DEVICE inline float larger(float a, float b) { return a < b ? b : a; }
GPUCORE_HOST_DEVICE inline float smaller(float a, float b) { return b < a ? b : a; }

// floorf(x) for |x| < 2^31, through int32 truncation, which compilers vectorise where they do not floorf.
GPUCORE_HOST_DEVICE inline float small_floor(float x) {
  const float truncated = static_cast<float>(static_cast<int32_t>(x));
  return truncated > x ? truncated - 1.0f : truncated;
}

// adjust_hue for one uint8 RGB pixel, in place: to [0, 1] floats, _rgb_to_hsv, hue shift, _hsv_to_rgb, back to
// uint8 by multiplying with 255.999 (to_dtype_image's float -> uint8) and truncating.
GPUCORE_HOST_DEVICE inline void shift_hue(uint8_t& red, uint8_t& green, uint8_t& blue, float hue) {
  const float unit = static_cast<float>(1.0 / 255.0);
  const float r = static_cast<float>(red) * unit, g = static_cast<float>(green) * unit,
              b = static_cast<float>(blue) * unit;
  const float maxc = larger(r, larger(g, b)), minc = smaller(r, smaller(g, b));
  const bool equal = maxc == minc;
  const float range = maxc - minc;
  const float s = range / (equal ? 1.0f : maxc);
  const float divisor = equal ? 1.0f : range;
  const float rc = (maxc - r) / divisor, gc = (maxc - g) / divisor, bc = (maxc - b) / divisor;
  const bool max_is_r = maxc == r, max_is_g = maxc == g;
  const float hr = max_is_r ? bc - gc : 0.0f;
  const float hg = max_is_r ? 0.0f : (max_is_g ? (rc + 2.0f) - bc : 0.0f);
  const float hb = max_is_r ? 0.0f : (max_is_g ? 0.0f : (gc + 4.0f) - rc);
  float h = (hr + hg) + hb;
  // fmod(h / 6 + 1, 1): h lies in [-1, 5], so the argument is positive and below 2, where subtracting its floor
  // is exact, the same value as fmodf (which compilers do not vectorise).
  h = h * static_cast<float>(1.0 / 6.0) + 1.0f;
  h = h - small_floor(h);
  h += hue;
  h = h - small_floor(h);  // torch.remainder(h, 1.0)
  const float h6 = h * 6.0f;
  const float sector = small_floor(h6);
  const float f = h6 - sector;
  const float i = sector >= 6.0f ? 0.0f : sector;  // % 6: h6 is in [0, 6]
  const float sxf = s * f, one_minus_s = 1.0f - s;
  const float q = smaller(larger((1.0f - sxf) * maxc, 0.0f), 1.0f);
  const float t = smaller(larger((sxf + one_minus_s) * maxc, 0.0f), 1.0f);
  const float p = smaller(larger(one_minus_s * maxc, 0.0f), 1.0f);
  const float v = maxc;
  // _hsv_to_rgb's table by sector, (v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q), as sums with
  // exactly one weight 1 and the others 0: the same values without branches, so the loop vectorises.
  const float in0 = i == 0.0f ? 1.0f : 0.0f, in1 = i == 1.0f ? 1.0f : 0.0f, in2 = i == 2.0f ? 1.0f : 0.0f;
  const float in3 = i == 3.0f ? 1.0f : 0.0f, in4 = i == 4.0f ? 1.0f : 0.0f, in5 = i == 5.0f ? 1.0f : 0.0f;
  const float out_r = v * (in0 + in5) + q * in1 + p * (in2 + in3) + t * in4;
  const float out_g = t * in0 + v * (in1 + in2) + q * in3 + p * (in4 + in5);
  const float out_b = p * (in0 + in1) + t * in2 + v * (in3 + in4) + q * in5;
  const float to_uint8 = static_cast<float>(255.0 + 1.0 - 1e-3);
  red = static_cast<uint8_t>(static_cast<int32_t>(out_r * to_uint8));
  green = static_cast<uint8_t>(static_cast<int32_t>(out_g * to_uint8));
  blue = static_cast<uint8_t>(static_cast<int32_t>(out_b * to_uint8));
}

// adjust_sharpness for one interior pixel: the 3 x 3 blur (1/13 around, 5/13 in the middle) rounded half to even,
// then x + (1 - factor) * (blur - x), clamped and truncated. `at(dy, dx)` reads the neighbour of the source image.
template <typename At>
GPUCORE_HOST_DEVICE inline uint8_t sharpen(const At& at, float weight, bool fused = true) {
  const float side = static_cast<float>(1.0 / 13.0), middle = static_cast<float>(5.0 / 13.0);
  // The nine taps summed row by row, left to right, written out so that compilers vectorise the pixel loop.
  const auto tap = [&](int dy, int dx) {
    return multiply(static_cast<float>(at(dy, dx)), dy == 0 && dx == 0 ? middle : side);
  };
  float blur = tap(-1, -1);
  blur += tap(-1, 0);
  blur += tap(-1, 1);
  blur += tap(0, -1);
  blur += tap(0, 0);
  blur += tap(0, 1);
  blur += tap(1, -1);
  blur += tap(1, 0);
  blur += tap(1, 1);
  const float x = static_cast<float>(at(0, 0));
  return clamp_to_uint8(multiply_add(rintf(blur) - x, weight, x, fused));
}

GPUCORE_HOST_DEVICE inline uint8_t posterize(uint8_t x, int bits) {
  return bits >= 8 ? x : static_cast<uint8_t>(x & (((1 << bits) - 1) << (8 - bits)));
}

GPUCORE_HOST_DEVICE inline uint8_t solarize(uint8_t x, float threshold) {
  return static_cast<float>(x) >= threshold ? static_cast<uint8_t>(255 - x) : x;
}

// autocontrast's per-channel shift and scale from the channel's minimum and maximum (a flat channel: unchanged).
struct Autocontrast {
  float minimum, inv_scale;
};
GPUCORE_HOST_DEVICE inline Autocontrast autocontrast_params(float minimum, float maximum) {
  if (minimum == maximum) return {0.0f, 1.0f};
  return {minimum, (maximum - minimum) * static_cast<float>(1.0 / 255.0)};
}
GPUCORE_HOST_DEVICE inline uint8_t autocontrast(uint8_t x, Autocontrast params) {
  return clamp_to_uint8((static_cast<float>(x) - params.minimum) / params.inv_scale);
}

// equalize's (PIL's) step from a channel's histogram of `pixels` values: (pixels - count of the largest value
// present) / 255; 0 leaves the channel unchanged.
GPUCORE_HOST_DEVICE inline int64_t equalize_step(const int32_t* histogram, int64_t pixels) {
  int last = 255;
  while (last > 0 && histogram[last] == 0) --last;
  return (pixels - histogram[last]) / 255;
}
// The lookup table's entry for value v from the count of pixels below v: (below + step / 2) / step, at most 255.
GPUCORE_HOST_DEVICE inline uint8_t equalize_entry(int64_t below, int64_t step) {
  const int64_t value = (below + step / 2) / step;
  return static_cast<uint8_t>(value > 255 ? 255 : value);
}

// RandomErasing's "random" value: a standard normal draw for element `index` of a sample's erased box, from the
// sample's seed (SplitMix64 hashing and Box-Muller in double), the same on every device.
GPUCORE_HOST_DEVICE inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
GPUCORE_HOST_DEVICE inline float erase_noise(int64_t seed, int64_t index) {
  const uint64_t bits = mix64(static_cast<uint64_t>(seed) + mix64(static_cast<uint64_t>(index) + 0x9E3779B97F4A7C15ULL));
  // Two 26-bit uniforms in (0, 1].
  const double u1 = (static_cast<double>(bits >> 38) + 1.0) / 67108864.0;
  const double u2 = static_cast<double>((bits >> 12) & 0x3FFFFFFULL) / 67108864.0;
  return static_cast<float>(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

}  // namespace gpucore::ops
