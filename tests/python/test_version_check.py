"""The import-time check that gpucore runs only with the torch it was built against."""
import subprocess
import sys
import textwrap

import pytest

import gpucore
from gpucore import _build_info
from gpucore._version_check import check_torch_version

pytestmark = pytest.mark.slow  # spawns processes


def import_with_torch_version(version):
    code = textwrap.dedent(
        f"""
        import torch
        torch.__version__ = {version!r}
        import gpucore
        """
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_import_under_a_different_torch_fails_with_both_versions_and_the_fix():
    result = import_with_torch_version("2.99.0+cu999")
    assert result.returncode != 0
    assert "ImportError" in result.stderr
    assert f"built against torch {_build_info.TORCH_VERSION}" in result.stderr
    assert "torch 2.99.0+cu999 is installed" in result.stderr
    assert "pip install --force-reinstall --no-deps --no-cache-dir" in result.stderr


def test_import_under_the_same_torch_works():
    import torch

    result = import_with_torch_version(torch.__version__)
    assert result.returncode == 0, result.stderr


def test_check_names_the_source_or_a_placeholder():
    class Info:
        GPUCORE_VERSION = "0.1.0"
        TORCH_VERSION = "2.4.0"
        SOURCE_DIR = "/nonexistent/gpucore-src"

    try:
        check_torch_version(Info, "2.5.1")
    except ImportError as exc:
        assert "<path to the gpucore source>" in str(exc)
    else:
        raise AssertionError("mismatch accepted")
    check_torch_version(Info, "2.4.0")


def test_a_wheel_under_another_torch_names_the_torch_it_is_for():
    class Wheel:
        GPUCORE_VERSION = "0.1.0"
        TORCH_VERSION = "2.13.0+cpu"
        SOURCE_DIR = "/nonexistent/gpucore-src"
        WHEEL_LOCAL_VERSION = "torch2.13cpu"

    with pytest.raises(ImportError) as caught:
        check_torch_version(Wheel, "2.14.1+cu130")
    message = str(caught.value)
    assert "gpucore 0.1.0+torch2.13cpu was built against torch 2.13.0+cpu, but torch 2.14.1+cu130 is installed" in message
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in message
    assert "the gpucore wheel built for torch 2.14.1+cu130" in message
    Wheel.TORCH_VERSION = "2.14.1"  # PyPI's CUDA build has no local version: no index to name
    with pytest.raises(ImportError, match=r"pip install torch==2\.14\.1\n"):
        check_torch_version(Wheel, "2.13.0+cpu")


def test_build_info_is_consistent():
    import torch

    assert _build_info.TORCH_VERSION == torch.__version__
    assert gpucore.__version__ == _build_info.GPUCORE_VERSION
    assert _build_info.CUDA_KERNELS == bool(gpucore._C.gpucore_cuda_arch_list())
