"""How the build finds torch: through the target interpreter, also under pip's build isolation."""
import os
import pathlib
import shutil
import subprocess
import sys
import venv

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    shutil.which("cmake") is None or not (ROOT / "CMakeLists.txt").exists(), reason="needs cmake and the source tree"
)]


def cmake_binary():
    """The cmake program itself: pip's cmake package installs a Python shim that a hidden site-packages breaks."""
    try:
        import cmake

        return os.path.join(cmake.CMAKE_BIN_DIR, "cmake")
    except (ImportError, AttributeError):
        return shutil.which("cmake")


def configure(tmp_path, python, env=None, extra=()):
    command = [cmake_binary(), "-S", str(ROOT), "-B", str(tmp_path / "build"), f"-DPython_EXECUTABLE={python}",
               "-DGPUCORE_WITH_CUDA=OFF", *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)


def test_configure_without_torch_says_to_install_torch_first(tmp_path):
    env_dir = tmp_path / "bare"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    result = configure(tmp_path, python)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "Install torch first" in output
    assert "pip install torch" in output
    assert str(python) in output.replace("\n", "")


def test_configure_finds_torch_behind_pips_build_isolation(tmp_path):
    # pip's isolated build puts an overlay on PYTHONPATH whose sitecustomize hides the environment's
    # site-packages; imitate that and check that the build still finds this environment's torch.
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "sitecustomize.py").write_text(
        "import sys\nsys.path[:] = [p for p in sys.path if 'site-packages' not in p]\n"
    )
    env = dict(os.environ, PYTHONPATH=str(overlay), PYTHONNOUSERSITE="1")
    hidden = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True)
    assert hidden.returncode != 0, "the overlay should hide torch"
    result = configure(tmp_path, sys.executable, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"building against torch {torch.__version__}" in result.stdout


def test_configure_without_libpng_and_libjpeg_builds_without_those_readers(tmp_path):
    result = configure(tmp_path, sys.executable,
                       extra=["-DCMAKE_DISABLE_FIND_PACKAGE_PNG=ON", "-DCMAKE_DISABLE_FIND_PACKAGE_JPEG=ON"])
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "building without the PNG reader" in output and "building without the JPEG reader" in output
    assert "apt-get install libpng-dev libjpeg-dev" in output.replace("\n", " ")
    build_info = {}
    exec((tmp_path / "build" / "_build_info.py").read_text(), build_info)
    assert build_info["IMAGE_FORMATS"] == ()
