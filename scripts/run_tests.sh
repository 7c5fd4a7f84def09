#!/usr/bin/env bash
# Set-up command 2: install gpucore and everything its tests need (bootstrap.sh --tests: GoogleTest and the C++
# test binary, chromium, the test and export packages), then run all tests: GoogleTest (ctest), then pytest, then the
# tests whose values depend on torch's CPU kernel build again under ATEN_CPU_CAPABILITY=default, then the CPU wheel's smoke test. pytest also builds
# the docs site (mkdocs build --strict) and runs the code blocks of the README and the docs (tests/python/test_docs*.py).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/bootstrap.sh" --tests
ctest --test-dir "$ROOT/build/release" --output-on-failure
cd "$ROOT"
PY="${GPUCORE_VENV:-$ROOT/.venv}/bin/python"
"$PY" -m pytest -q tests/python "$@"
# The tests marked kernel_build (pyproject.toml says which: their values depend on torch's CPU kernel build) once
# more on torch's baseline CPU kernels (what a CPU without AVX2 runs): gpucore rounds as torch and torchvision do on
# either build. Only the files that hold such tests are collected (seconds; the whole suite's collection takes a
# minute): tests/python/test_layout.py checks that this list names every one. All in this process: most of these files
# are ones the full run hands to its second pytest process, which here would leave this one waiting for it.
GPUCORE_TESTS_BACKGROUND= ATEN_CPU_CAPABILITY=default "$PY" -m pytest -q -m kernel_build tests/python/test_transforms_api.py \
  tests/python/test_transforms_geometric.py tests/python/test_transforms_color.py \
  tests/python/test_transforms_color_policies.py tests/python/test_cpu_kernel_paths.py \
  tests/python/test_mixed_size_photos.py tests/python/test_streaming.py tests/python/test_photos.py \
  tests/python/test_pool_norm.py tests/python/test_image_formats.py "$@"
# The CPU wheel (scripts/build_wheels.sh, from the build above and the venv's torch: only the wheel is made), installed
# into a fresh venv with no compiler on PATH, then doctor, a one-epoch run with its report and Grad-CAM from it.
TORCH_VERSION=$("$PY" -c 'import torch; print(torch.__version__)')
if "$PY" -c 'import sys, torch; sys.exit(bool(torch.version.cuda))'; then
  GPUCORE_WHEEL_VENV="$(dirname "$(dirname "$PY")")" GPUCORE_WHEEL_TORCH="torch==${TORCH_VERSION%%+*}" \
    GPUCORE_WHEEL_BUILD_DIR="$ROOT/build/release" GPUCORE_WHEEL_BUILD_TESTS=ON \
    bash "$ROOT/scripts/build_wheels.sh" cpu "$ROOT/build/wheels"
  GPUCORE_TORCH="${GPUCORE_TORCH:-torch==$TORCH_VERSION}" bash "$ROOT/scripts/check_wheel.sh" \
    "$(ls -t "$ROOT"/build/wheels/gpucore-*+torch*cpu-*.whl | head -n 1)"
else
  echo "run_tests: no wheel smoke test: torch $TORCH_VERSION is a CUDA build (scripts/build_wheels.sh cuda, then" \
       "scripts/check_wheel.sh, check that wheel)"
fi
