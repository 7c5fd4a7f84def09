#include <dlfcn.h>

#include "gpucore/device/probe.h"

namespace gpucore {

int cuda_driver_version() {
  // libcuda is the driver itself: asking it directly works even with a CPU-only torch, which is
  // exactly the case where the user most needs to hear that a driver is there.
#if defined(__APPLE__)
  return 0;
#else
  void* library = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (library == nullptr) return 0;
  using GetVersion = int (*)(int*);
  auto get_version = reinterpret_cast<GetVersion>(dlsym(library, "cuDriverGetVersion"));
  int version = 0;
  if (get_version == nullptr || get_version(&version) != 0) version = 0;
  dlclose(library);
  return version;
#endif
}

}  // namespace gpucore
