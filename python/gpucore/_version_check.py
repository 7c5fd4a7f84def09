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
    if installed == build_info.TORCH_VERSION:
        return
    # A prebuilt wheel (scripts/build_wheels.sh) names its torch in its local version; builds from source name none.
    wheel = getattr(build_info, "WHEEL_LOCAL_VERSION", "")
    if wheel:
        release, _, build = build_info.TORCH_VERSION.partition("+")
        # torch's own index serves a local build (2.13.0+cpu, 2.5.1+cu124); PyPI serves the plain release.
        index = f" --index-url https://download.pytorch.org/whl/{build}" if build else ""
        fix = (
            f"Install the torch this wheel is for:\n    {sys.executable} -m pip install torch=={release}{index}\n"
            f"or install the gpucore wheel built for torch {installed}, or build gpucore from source against it. "
            + rebuild_hint(build_info)
        )
        name = f"gpucore {build_info.GPUCORE_VERSION}+{wheel}"
    else:
        fix = rebuild_hint(build_info)
        name = f"gpucore {build_info.GPUCORE_VERSION}"
    raise ImportError(
        f"{name} was built against torch {build_info.TORCH_VERSION}, but torch {installed} is installed; "
        "a C++ extension only runs with the torch release it was compiled against. " + fix
    )
