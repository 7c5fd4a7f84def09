# Makes gpucore use the shared C++ runtime (libstdc++.so.6) that torch and Python load.
#
# Some toolchains ship only a static libstdc++.a (the GPU image's /opt/gcc/bin/g++ wrapper does): -lstdc++
# then links a second copy of the C++ runtime into libgpucore_core.so. That copy's locale facet ids differ
# from those of the shared runtime torch already loaded, and the first number written to a std::ostream
# (every error message naming a shape) jumps into the wrong facet and crashes the process. Linking the
# shared runtime by file name ahead of the compiler's own -lstdc++ leaves nothing for the static copy.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  return()
endif()
execute_process(COMMAND "${CMAKE_CXX_COMPILER}" -print-file-name=libstdc++.so
                OUTPUT_VARIABLE _gpucore_libstdcxx_so OUTPUT_STRIP_TRAILING_WHITESPACE)
if(IS_ABSOLUTE "${_gpucore_libstdcxx_so}")
  return()  # the compiler links the shared runtime itself
endif()
find_library(GPUCORE_SHARED_LIBSTDCXX NAMES libstdc++.so.6 HINTS ${CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES})
if(NOT GPUCORE_SHARED_LIBSTDCXX)
  message(FATAL_ERROR
    "${CMAKE_CXX_COMPILER} has no shared libstdc++ (libstdc++.so), and no libstdc++.so.6 was found to link "
    "instead: a static C++ runtime inside gpucore crashes next to torch's shared one. Build with a compiler "
    "that has it, e.g. CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++ pip install .")
endif()
message(STATUS "gpucore: ${CMAKE_CXX_COMPILER} has only a static libstdc++; linking ${GPUCORE_SHARED_LIBSTDCXX} "
               "so that gpucore shares torch's C++ runtime")
link_libraries("${GPUCORE_SHARED_LIBSTDCXX}")
