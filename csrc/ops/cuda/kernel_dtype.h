#pragma once
// The dtypes of gpucore's CUDA kernels, one enum for every launcher (the *_kernels.h headers), and the one switch
// from it to the C++ element type a kernel is templated on (the *_kernels.cu files). Kept free of torch headers:
// nvcc and the emulated grid compile it. The launchers' callers map at::ScalarType to it with kernel_dtype
// (kernel_launch_check.h), against the launcher's own list of dtypes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace gpucore::ops::cuda {

// kBytes: any dtype that is not floating-point, moved as its bytes (no arithmetic: the EMA's copy).
enum class KernelDtype { kFloat32, kFloat64, kFloat16, kBFloat16, kBytes };

// The C++ element type of each.
template <KernelDtype dtype>
struct KernelElement;
template <>
struct KernelElement<KernelDtype::kFloat32> {
  using type = float;
};
template <>
struct KernelElement<KernelDtype::kFloat64> {
  using type = double;
};
template <>
struct KernelElement<KernelDtype::kFloat16> {
  using type = __half;
};
template <>
struct KernelElement<KernelDtype::kBFloat16> {
  using type = __nv_bfloat16;
};
template <>
struct KernelElement<KernelDtype::kBytes> {
  using type = unsigned char;
};

// An element type as a value, for a generic lambda: [&](auto element) { using T = typename decltype(element)::type; }
template <typename T>
struct ElementTag {
  using type = T;
};

// The dtypes one launcher takes, listed once: its callers check a tensor's dtype against `values` (kernel_dtype),
// and its .cu file instantiates its kernels for these only, through dispatch.
template <KernelDtype... dtypes>
struct KernelDtypes {
  static constexpr KernelDtype values[] = {dtypes...};

  // Calls launch(ElementTag<T>{}) with the element type T of `dtype`; nothing for a dtype not listed (which the
  // callers' kernel_dtype has refused).
  template <typename Launch>
  static void dispatch(KernelDtype dtype, Launch&& launch) {
    (void)((dtype == dtypes ? (launch(ElementTag<typename KernelElement<dtypes>::type>{}), true) : false) || ...);
  }
};

using FloatingKernelDtypes =
    KernelDtypes<KernelDtype::kFloat32, KernelDtype::kFloat64, KernelDtype::kFloat16, KernelDtype::kBFloat16>;

}  // namespace gpucore::ops::cuda
