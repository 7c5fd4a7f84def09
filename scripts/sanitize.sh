#!/usr/bin/env bash
# An AddressSanitizer + UndefinedBehaviorSanitizer build of the core, gpucore._C and the GoogleTest
# binaries (CPU only, in build/sanitize), then ctest (gpucore_kernel_tests runs every CUDA kernel on the
# emulated grid of csrc/ops/cuda/emulator, so its accesses are checked too) and the seeded corrupt-file corpus
# (tests/trials/corrupt_files.py) through the sanitized module. Any report stops the process that
# made it, so the corpus runner counts it as a crash. Then a plain build without libpng (in build/nopng)
# and the tests that only such a build runs: a PNG file is refused naming the library to install.
# Needs the venv of scripts/bootstrap.sh.
#
#   scripts/sanitize.sh [--count N]     N mutated files of each kind (default 100)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${GPUCORE_VENV:-$ROOT/.venv}/bin/python
BUILD=$ROOT/build/sanitize
FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"

cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPython_EXECUTABLE="$PY" \
  -DGPUCORE_WITH_CUDA=OFF -DGPUCORE_BUILD_TESTS=ON \
  -DCMAKE_CXX_FLAGS="$FLAGS" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build "$BUILD"

# Leaks are not checked: the Python interpreter and torch keep memory until exit by design.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir "$BUILD" --output-on-failure

# The Python package with the sanitized module in it. Python itself is not instrumented, so the ASan
# runtime is preloaded, with libstdc++ (ASan intercepts __cxa_throw and must find the real one at start).
# stage BUILD_DIR: the package's sources (every folder of it) with BUILD_DIR's compiled module, in BUILD_DIR/python
stage() {
  rm -rf "$1/python" && mkdir -p "$1/python"
  cp -r "$ROOT/python/gpucore" "$1/python/"
  find "$1/python" -name __pycache__ -prune -exec rm -rf {} +
  cp "$1"/_C*.so "$1"/libgpucore_core.so "$1"/_build_info.py "$1/python/gpucore/"
}
stage "$BUILD"
LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)" PYTHONPATH=$BUILD/python \
  "$PY" "$ROOT/tests/trials/corrupt_files.py" "$@"

# The configuration without libpng (as on a machine without libpng-dev): the tests that skip in every build
# with it. CMAKE_DISABLE_FIND_PACKAGE_PNG hides the library from find_package.
NOPNG=$ROOT/build/nopng
cmake -S "$ROOT" -B "$NOPNG" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$PY" \
  -DGPUCORE_WITH_CUDA=OFF -DGPUCORE_BUILD_TESTS=OFF -DCMAKE_DISABLE_FIND_PACKAGE_PNG=ON >/dev/null
cmake --build "$NOPNG" --target _C
stage "$NOPNG"
PYTHONPATH=$NOPNG/python "$PY" -c 'import gpucore, sys; formats = gpucore._build_info.IMAGE_FORMATS
sys.exit(f"build/nopng has the PNG reader: {formats}" if "png" in formats else 0)'
PYTHONPATH=$NOPNG/python "$PY" -m pytest -q -p no:cacheprovider "$ROOT/tests/python/test_data_readers.py" \
  -k "without_libpng or built_without_its_library" -rs
