#pragma once
// Host memory for the CPU kernels' batch outputs, kept for the next batch. A batch of 128 float32 224 x 224 images
// is 77 MB, above glibc's largest mmap threshold (32 MB): each such batch would be mapped afresh, and its first
// write would fault once per 4 KiB page, which costs more than the augment pass that fills it. Freed buffers
// of 16 MiB and more go back to a small pool (the last four), and a later batch of the same size reuses one.
#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>

namespace gpucore::ops {

// at::empty(sizes, options) for CPU tensors, its memory reused from and returned to the pool when large.
at::Tensor empty_batch(at::IntArrayRef sizes, const at::TensorOptions& options);

// A contiguous copy of `images` in such memory: the output of the kernels that change a batch in place.
at::Tensor copy_batch(const at::Tensor& images);

}  // namespace gpucore::ops
