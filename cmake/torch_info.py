"""Print what the build needs to know about the installed torch, as CMake `set()` lines.

Run by CMakeLists.txt with the interpreter the wheel is built for. Exit status 3 means torch
is not importable from that interpreter.
"""
import os
import re
import sys

try:
    import torch
    import torch.utils.cpp_extension as cpp_extension
except ImportError as exc:  # the message is turned into a build error by CMake
    print(f"{exc}", file=sys.stderr)
    sys.exit(3)


def cmake_list(items):
    return ";".join(str(item).replace("\\", "/") for item in items)




def cxx_standard():
    """The C++ standard torch's own CMake config asks of extensions (17 up to 2.12, 20 later)."""
    config = os.path.join(os.path.dirname(torch.__file__), "share", "cmake", "Torch", "TorchConfig.cmake")
    try:
        with open(config) as handle:
            match = re.search(r"CXX_STANDARD\s+(\d+)", handle.read())
    except OSError:
        match = None
    return match.group(1) if match else "17"


facts = {
    "TORCH_VERSION": torch.__version__,
    "TORCH_CXX11_ABI": int(torch.compiled_with_cxx11_abi()),
    "TORCH_INCLUDE_DIRS": cmake_list(cpp_extension.include_paths()),
    "TORCH_LIBRARY_DIRS": cmake_list(cpp_extension.library_paths()),
    "TORCH_CUDA_VERSION": torch.version.cuda or "",
    "TORCH_CXX_STANDARD": cxx_standard(),
}
# Older torch releases expose the pybind11 ABI they were built with; extensions must match it.
for key in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI"):
    value = getattr(torch._C, f"_PYBIND11_{key}", None)
    facts[f"TORCH_PYBIND11_{key}"] = value or ""

for key, value in facts.items():
    print(f'set({key} "{value}")')
