# Finds LibTorch from the torch installed in the interpreter the wheel is built for and defines
# the imported target gpucore::torch (and gpucore::torch_python for the Python module only).
#
# find_package(Torch) is not used: for a CUDA build of torch it insists on a full CUDA toolkit,
# which most pip users do not have, even when gpucore itself is built without CUDA.

# Under pip's build isolation the interpreter runs with PYTHONPATH pointing at an overlay whose
# sitecustomize hides the environment's site-packages. Ask once as is (covers
# --no-build-isolation and plain CMake), then again with pip's isolation variables removed.
set(_gpucore_torch_query "${CMAKE_CURRENT_LIST_DIR}/torch_info.py")
execute_process(
  COMMAND "${Python_EXECUTABLE}" "${_gpucore_torch_query}"
  OUTPUT_VARIABLE _gpucore_torch_facts ERROR_VARIABLE _gpucore_torch_error RESULT_VARIABLE _gpucore_torch_rc)
if(NOT _gpucore_torch_rc EQUAL 0)
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -E env --unset=PYTHONPATH --unset=PYTHONNOUSERSITE
            "${Python_EXECUTABLE}" "${_gpucore_torch_query}"
    OUTPUT_VARIABLE _gpucore_torch_facts ERROR_VARIABLE _gpucore_torch_error RESULT_VARIABLE _gpucore_torch_rc)
endif()
if(_gpucore_torch_rc EQUAL 3)
  message(FATAL_ERROR
    "gpucore builds against the torch installed in the Python environment it is installed into, "
    "and ${Python_EXECUTABLE} has none (${_gpucore_torch_error}).\n"
    "Install torch first, then gpucore:\n"
    "  ${Python_EXECUTABLE} -m pip install torch   # pick the CUDA/CPU build for your machine at pytorch.org\n"
    "  ${Python_EXECUTABLE} -m pip install .")
elseif(NOT _gpucore_torch_rc EQUAL 0)
  message(FATAL_ERROR "Asking ${Python_EXECUTABLE} about torch failed:\n${_gpucore_torch_error}")
endif()
cmake_language(EVAL CODE "${_gpucore_torch_facts}")

string(REGEX MATCH "^[0-9]+\\.[0-9]+" _gpucore_torch_minor "${TORCH_VERSION}")
if(_gpucore_torch_minor VERSION_LESS 2.4)
  message(FATAL_ERROR "gpucore needs torch >= 2.4; ${Python_EXECUTABLE} has torch ${TORCH_VERSION}. "
                      "Upgrade torch, then run pip install . again.")
endif()
message(STATUS "gpucore: building against torch ${TORCH_VERSION} (C++${TORCH_CXX_STANDARD}, C++11 ABI ${TORCH_CXX11_ABI}, "
               "CUDA '${TORCH_CUDA_VERSION}') from ${TORCH_LIBRARY_DIRS}")

function(_gpucore_torch_library out name)
  find_library(${out} NAMES ${name} PATHS ${TORCH_LIBRARY_DIRS} NO_DEFAULT_PATH REQUIRED)
endfunction()

_gpucore_torch_library(GPUCORE_LIBTORCH torch)
_gpucore_torch_library(GPUCORE_LIBTORCH_CPU torch_cpu)
_gpucore_torch_library(GPUCORE_LIBC10 c10)
_gpucore_torch_library(GPUCORE_LIBTORCH_PYTHON torch_python)

add_library(gpucore::torch INTERFACE IMPORTED)
target_include_directories(gpucore::torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
target_link_libraries(gpucore::torch INTERFACE ${GPUCORE_LIBTORCH} ${GPUCORE_LIBTORCH_CPU} ${GPUCORE_LIBC10})
target_compile_definitions(gpucore::torch INTERFACE _GLIBCXX_USE_CXX11_ABI=${TORCH_CXX11_ABI})

add_library(gpucore::torch_python INTERFACE IMPORTED)
target_link_libraries(gpucore::torch_python INTERFACE gpucore::torch ${GPUCORE_LIBTORCH_PYTHON})
foreach(key COMPILER_TYPE STDLIB BUILD_ABI)
  if(TORCH_PYBIND11_${key})
    target_compile_definitions(gpucore::torch_python INTERFACE PYBIND11_${key}="${TORCH_PYBIND11_${key}}")
  endif()
endforeach()
