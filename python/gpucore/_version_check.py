"""The import-time check that the installed torch is the one gpucore was compiled against.

A C++ extension runs only with the torch release it was built against (LibTorch has no stable
C++ ABI across releases), so a mismatch must stop the import with a way out, not crash later.
"""
import os
import sys


def rebuild_hint(build_info) -> str:
    source = build_info.SOURCE_DIR if os.path.isdir(build_info.SOURCE_DIR) else "<path to the gpucore source>"
    return (
        "Rebuild gpucore against the installed torch with:\n"
        f"    {sys.executable} -m pip install --force-reinstall --no-deps --no-cache-dir {source}"
    )


def check_torch_version(build_info, installed: str) -> None:
    """Raise ImportError when `installed` differs from the torch gpucore was built against."""
    if installed != build_info.TORCH_VERSION:
        raise ImportError(
            f"gpucore {build_info.GPUCORE_VERSION} was built against torch {build_info.TORCH_VERSION}, "
            f"but torch {installed} is installed; a C++ extension only runs with the torch release it was "
            "compiled against. " + rebuild_hint(build_info)
        )

