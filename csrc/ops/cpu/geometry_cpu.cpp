// CPU kernels of the geometric ops (crop, resized_crop, affine): one pass per output plane, the per-pixel
// arithmetic shared with the CUDA kernels (ops/resample_math.h).
#include <ATen/Parallel.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linspace.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/cpu/batch_memory.h"
#include "ops/cpu/bilinear_resize.h"
#include "ops/cpu/shifted_plane.h"
#include "ops/augment/geometry.h"
#include "ops/resample_math.h"

namespace gpucore::ops {
namespace {

template <typename T>
T store(float value);
template <>
uint8_t store<uint8_t>(float value) { return resample::to_uint8(value); }
template <>
float store<float>(float value) { return value; }

// The box {top, left, height, width} of one C x H x W image, read through its strides, into a contiguous
// C x height x width buffer: one copy per row, or a gather along it where the image is channels-last.
template <typename T>
void copy_box(const T* image, at::IntArrayRef sizes, at::IntArrayRef strides, const int64_t* box, T* to) {
  const int64_t top = box[0], left = box[1], height = box[2], width = box[3];
  const int64_t channel_step = strides[0], row_step = strides[1], column_step = strides[2];
  for (int64_t c = 0; c < sizes[0]; ++c) {
    for (int64_t y = 0; y < height; ++y) {
      const T* from = image + c * channel_step + (top + y) * row_step + left * column_step;
      T* row = to + (c * height + y) * width;
      if (column_step == 1) {
        std::copy(from, from + width, row);
      } else {
        for (int64_t x = 0; x < width; ++x) row[x] = from[x * column_step];
      }
    }
  }
}

// `body(in, out)` with the images' element type (uint8 or float32).
template <typename Body>
void for_element_type(const at::Tensor& in, at::Tensor& out, Body body) {
  if (in.scalar_type() == at::kByte) {
    body(in.data_ptr<uint8_t>(), out.data_ptr<uint8_t>());
  } else {
    body(in.data_ptr<float>(), out.data_ptr<float>());
  }
}

at::Tensor crop_cpu(const at::Tensor& images, const at::Tensor& offsets, const at::Tensor& flips, at::IntArrayRef size,
                    at::ArrayRef<double> fill) {
  check_crop_inputs(images, offsets, flips, size, fill);
  const at::Tensor in = images.contiguous(), off = offsets.contiguous(), flip = flips.contiguous();
  const int64_t n = in.size(0), channels = in.size(1), h = in.size(2), w = in.size(3), oh = size[0], ow = size[1];
  at::Tensor out = empty_batch({n, channels, oh, ow}, in.options());
  const std::vector<float> fills = fill_per_channel(fill, channels);
  const int64_t* off_data = off.data_ptr<int64_t>();
  const bool* flip_data = flip.data_ptr<bool>();
  for_element_type(in, out, [&](const auto* src, auto* dst) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(src)>>;
    at::parallel_for(0, n * channels, 1, [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const int64_t image = plane / channels, c = plane % channels;
        const int64_t top = off_data[image * 2], left = off_data[image * 2 + 1];
        const bool vertical = flip_data[image * 2], horizontal = flip_data[image * 2 + 1];
        const T* from = src + plane * h * w;
        T* to = dst + plane * oh * ow;
        const T outside = static_cast<T>(fills[c]);
        write_shifted_plane(h, w, oh, ow, top, left, vertical, horizontal, outside, to,
                            [&](int64_t offset, T* row, int64_t count) {
                              const T* source = from + offset;
                              if (horizontal) {
                                for (int64_t x = 0; x < count; ++x) row[x] = source[-x];
                              } else {
                                std::copy(source, source + count, row);
                              }
                            });
      }
    });
  });
  return out;
}

at::Tensor resized_crop_cpu(const at::Tensor& images, const at::Tensor& boxes, at::IntArrayRef size,
                            c10::string_view interpolation, bool antialias) {
  const std::string mode(interpolation);
  check_resized_crop_inputs(images, boxes, size, mode);
  // Bilinear reads the images through their strides (the image reader's batches are channels-last): only the
  // boxes are copied, instead of the whole batch made contiguous first.
  const at::Tensor in = mode == "bilinear" ? images : images.contiguous(), box = boxes.contiguous();
  const int64_t n = in.size(0), channels = in.size(1), h = in.size(2), w = in.size(3), oh = size[0], ow = size[1];
  at::Tensor out = empty_batch({n, channels, oh, ow}, in.options());
  const int64_t* box_data = box.data_ptr<int64_t>();
  for (int64_t image = 0; image < n; ++image) {
    const int64_t* b = box_data + image * 4;
    TORCH_CHECK(b[0] >= 0 && b[1] >= 0 && b[2] > 0 && b[3] > 0 && b[0] + b[2] <= h && b[1] + b[3] <= w,
                "resized_crop: box ", image, " (top ", b[0], ", left ", b[1], ", height ", b[2], ", width ", b[3],
                ") is not inside the ", h, " x ", w, " image");
  }
  if (mode == "bilinear") {
    // ATen's own vectorised resampling of each crop: what torchvision's resize runs on CPU images, so the results
    // are equal, and several times faster than the per-pixel taps the CUDA kernel uses. One image per task,
    // written straight into its slice of the batch (ATen runs single-threaded inside a parallel region). The box
    // is copied out row by row first: ATen would make a strided view contiguous element by element, 4x slower.
    at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
      for (int64_t image = begin; image < end; ++image) {
        const int64_t* b = box_data + image * 4;
        at::Tensor crop = at::empty({1, channels, b[2], b[3]}, in.options());
        at::Tensor source = in.select(0, image);
        for_element_type(source, crop, [&](const auto* from, auto* to) {
          copy_box(from, source.sizes(), source.strides(), b, to);
        });
        at::Tensor slice = out.narrow(0, image, 1);
        bilinear_resize_into(crop, slice, antialias);
      }
    });
    return out;
  }
  for_element_type(in, out, [&](const auto* src, auto* dst) {
    at::parallel_for(0, n * channels, 1, [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const int64_t image = plane / channels;
        const int64_t top = box_data[image * 4], left = box_data[image * 4 + 1];
        const int64_t bh = box_data[image * 4 + 2], bw = box_data[image * 4 + 3];
        const auto* from = src + (plane * h + top) * w + left;
        auto* to = dst + plane * oh * ow;
        for (int64_t y = 0; y < oh; ++y) {
          const int64_t row = resample::nearest_source(y, bh, oh) * w;
          for (int64_t x = 0; x < ow; ++x) to[y * ow + x] = from[row + resample::nearest_source(x, bw, ow)];
        }
      }
    });
  });
  return out;
}

at::Tensor affine_cpu(const at::Tensor& images, const at::Tensor& matrices, c10::string_view interpolation,
                      at::ArrayRef<double> fill) {
  const std::string mode(interpolation);
  check_affine_inputs(images, matrices, mode, fill);
  const at::Tensor in = images.contiguous(), matrix = matrices.contiguous();
  const int64_t n = in.size(0), channels = in.size(1), h = in.size(2), w = in.size(3);
  at::Tensor out = empty_batch(in.sizes(), in.options());
  if (out.numel() == 0) return out;
  const std::vector<float> fills = fill_per_channel(fill, channels);
  const bool bilinear = mode == "bilinear", has_fill = !fill.empty();
  const at::Tensor grids = affine_grids(matrix.data_ptr<float>(), n, h, w);
  const float* grid_data = grids.data_ptr<float>();
  for_element_type(in, out, [&](const auto* src, auto* dst) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(src)>>;
    at::parallel_for(0, n * channels, 1, [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const int64_t c = plane % channels;
        const float* grid = grid_data + (plane / channels) * h * w * 2;
        for (int64_t p = 0; p < h * w; ++p) {
          const float sx = resample::unnormalize(grid[2 * p], w), sy = resample::unnormalize(grid[2 * p + 1], h);
          dst[plane * h * w + p] =
              store<T>(resample::affine_sample(src + plane * h * w, h, w, sx, sy, bilinear, has_fill, fills[c]));
        }
      }
    });
  });
  return out;
}

}  // namespace

at::Tensor affine_grids(const float* matrices, int64_t n, int64_t h, int64_t w) {
  const at::TensorOptions options = at::TensorOptions().dtype(at::kFloat);
  at::Tensor base = at::empty({1, h, w, 3}, options);
  base.select(3, 0).copy_(at::linspace((1.0 - static_cast<double>(w)) * 0.5, (static_cast<double>(w) - 1.0) * 0.5, w,
                                       options));
  base.select(3, 1).copy_(
      at::linspace((1.0 - static_cast<double>(h)) * 0.5, (static_cast<double>(h) - 1.0) * 0.5, h, options).unsqueeze(-1));
  base.select(3, 2).fill_(1);
  base = base.view({1, h * w, 3});
  at::Tensor half_size = at::empty({2}, options);
  half_size.data_ptr<float>()[0] = 0.5f * static_cast<float>(w);
  half_size.data_ptr<float>()[1] = 0.5f * static_cast<float>(h);
  at::Tensor grids = at::empty({n, h * w, 2}, options);
  for (int64_t i = 0; i < n; ++i) {
    at::Tensor theta = at::empty({1, 2, 3}, options);
    std::copy(matrices + i * 6, matrices + i * 6 + 6, theta.data_ptr<float>());
    grids[i].copy_(base.bmm(theta.transpose(1, 2).div_(half_size))[0]);
  }
  return grids;
}

TORCH_LIBRARY_IMPL(gpucore, CPU, m) {
  m.impl("crop", &crop_cpu);
  m.impl("resized_crop", &resized_crop_cpu);
  m.impl("affine", &affine_cpu);
}

}  // namespace gpucore::ops
