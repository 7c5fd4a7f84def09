"""Print what the build needs to know about the installed torch, as CMake `set()` lines.

Run by CMakeLists.txt with the interpreter the wheel is built for. Exit status 3 means torch
is not importable from that interpreter.
"""
import sys

try:
    import torch
    import torch.utils.cpp_extension as cpp_extension
except ImportError as exc:  # the message is turned into a build error by CMake
    print(f"{exc}", file=sys.stderr)
    sys.exit(3)


def cmake_list(items):
    return ";".join(str(item).replace("\\", "/") for item in items)


facts = {
    "TORCH_VERSION": torch.__version__,
    "TORCH_CXX11_ABI": int(torch.compiled_with_cxx11_abi()),
    "TORCH_INCLUDE_DIRS": cmake_list(cpp_extension.include_paths()),
    "TORCH_LIBRARY_DIRS": cmake_list(cpp_extension.library_paths()),
    "TORCH_CUDA_VERSION": torch.version.cuda or "",
}
# Older torch releases expose the pybind11 ABI they were built with; extensions must match it.
for key in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI"):
    value = getattr(torch._C, f"_PYBIND11_{key}", None)
    facts[f"TORCH_PYBIND11_{key}"] = value or ""

for key, value in facts.items():
    print(f'set({key} "{value}")')
