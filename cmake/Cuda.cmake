# Decides whether gpucore's CUDA sources are compiled (GPUCORE_WITH_CUDA=AUTO|ON|OFF) and for
# which architectures. Sets GPUCORE_CUDA_ENABLED and GPUCORE_CUDA_ARCH_NAMES (sm_XY/compute_XY,
# the names torch.cuda.get_arch_list() uses, so one compatibility rule checks both).

set(GPUCORE_CUDA_ENABLED OFF)
if(NOT GPUCORE_WITH_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "GPUCORE_WITH_CUDA must be AUTO, ON or OFF, got '${GPUCORE_WITH_CUDA}'")
endif()

if(NOT GPUCORE_WITH_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(NOT TORCH_CUDA_VERSION)
    set(_gpucore_no_cuda_reason "torch ${TORCH_VERSION} is a CPU-only build")
  elseif(NOT CMAKE_CUDA_COMPILER)
    set(_gpucore_no_cuda_reason "no nvcc was found (set CUDACXX or put nvcc on PATH)")
  else()
    set(GPUCORE_CUDA_ENABLED ON)
  endif()
  if(NOT GPUCORE_CUDA_ENABLED)
    if(GPUCORE_WITH_CUDA STREQUAL "ON")
      message(FATAL_ERROR "GPUCORE_WITH_CUDA=ON but ${_gpucore_no_cuda_reason}.")
    endif()
    message(STATUS "gpucore: building without CUDA kernels: ${_gpucore_no_cuda_reason}")
  endif()
endif()

if(GPUCORE_CUDA_ENABLED)
  # TORCH_CUDA_ARCH_LIST as torch's own extensions read it: "7.5;8.0;9.0+PTX" (spaces allowed).
  if(DEFINED ENV{TORCH_CUDA_ARCH_LIST} AND NOT "$ENV{TORCH_CUDA_ARCH_LIST}" STREQUAL "")
    set(_gpucore_arch_list "$ENV{TORCH_CUDA_ARCH_LIST}")
  else()
    set(_gpucore_arch_list "7.5;8.0;8.6;8.9;9.0+PTX")
  endif()
  string(REPLACE " " ";" _gpucore_arch_list "${_gpucore_arch_list}")
  set(CMAKE_CUDA_ARCHITECTURES "")
  set(GPUCORE_CUDA_ARCH_NAMES "")
  foreach(arch IN LISTS _gpucore_arch_list)
    if(arch STREQUAL "")
      continue()
    endif()
    # 9.0a: architecture-specific code (Hopper's wgmma needs sm_90a), as torch accepts it.
    if(NOT arch MATCHES "^([0-9]+)\\.([0-9]+)(a?)(\\+PTX)?$")
      message(FATAL_ERROR "TORCH_CUDA_ARCH_LIST entry '${arch}' is not of the form 8.0, 9.0a or 9.0+PTX "
                          "(family-specific entries such as 10.0f are not supported yet: use 10.0 or 10.0a)")
    endif()
    set(_num "${CMAKE_MATCH_1}${CMAKE_MATCH_2}${CMAKE_MATCH_3}")
    list(APPEND GPUCORE_CUDA_ARCH_NAMES "sm_${_num}")
    if(CMAKE_MATCH_4)
      list(APPEND CMAKE_CUDA_ARCHITECTURES "${_num}")           # SASS and PTX
      list(APPEND GPUCORE_CUDA_ARCH_NAMES "compute_${_num}")
    else()
      list(APPEND CMAKE_CUDA_ARCHITECTURES "${_num}-real")      # SASS only
    endif()
  endforeach()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  # A list cannot travel in a compile definition (CMake splits it at ";"), so join with ",".
  list(JOIN GPUCORE_CUDA_ARCH_NAMES "," GPUCORE_CUDA_ARCH_CSV)
  message(STATUS "gpucore: CUDA kernels for ${GPUCORE_CUDA_ARCH_CSV} (CUDA ${CUDAToolkit_VERSION})")

  find_library(GPUCORE_LIBTORCH_CUDA NAMES torch_cuda PATHS ${TORCH_LIBRARY_DIRS} NO_DEFAULT_PATH REQUIRED)
  find_library(GPUCORE_LIBC10_CUDA NAMES c10_cuda PATHS ${TORCH_LIBRARY_DIRS} NO_DEFAULT_PATH REQUIRED)
  add_library(gpucore::torch_cuda INTERFACE IMPORTED)
  target_link_libraries(gpucore::torch_cuda INTERFACE ${GPUCORE_LIBTORCH_CUDA} ${GPUCORE_LIBC10_CUDA} CUDA::cudart_static)
endif()
