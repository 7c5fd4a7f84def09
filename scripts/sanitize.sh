#!/usr/bin/env bash
# An AddressSanitizer + UndefinedBehaviorSanitizer build of the core, gpucore._C and the GoogleTest
# binary (CPU only, in build/sanitize), then ctest and the seeded corrupt-file corpus
# (tests/python/corrupt_files.py) through the sanitized module. Any report stops the process that
# made it, so the corpus runner counts it as a crash. Needs the venv of scripts/bootstrap.sh.
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
PACKAGE=$BUILD/python/gpucore
rm -rf "$BUILD/python" && mkdir -p "$PACKAGE"
cp "$ROOT"/python/gpucore/*.py "$PACKAGE"/
cp "$BUILD"/_C*.so "$BUILD"/libgpucore_core.so "$BUILD"/_build_info.py "$PACKAGE"/
LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)" PYTHONPATH=$BUILD/python \
  "$PY" "$ROOT/tests/python/corrupt_files.py" "$@"
