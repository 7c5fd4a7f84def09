#!/usr/bin/env bash
# The CUDA wheel on a machine without a GPU: torch 2.14.1's CUDA build imports and runs on a CPU, which is the
# original setup guides' situation (a Tesla M40 on a new torch, a missing driver). In one call, rerunnable (each build
# is incremental):
#   1. scripts/build_wheels.sh cuda: the wheel for the full architecture list, with the GoogleTest binaries, timed
#   2. ctest against that build: the C++ core; the kernels' comparisons on the device skip, saying there is none
#   3. scripts/check_wheel.sh --pytest: the wheel in a fresh venv with no compiler on PATH, the tests' extras
#      (torchvision 0.29.1 is torch 2.14.1's), and the pytest suite against the installed package
#
#   scripts/check_cuda_wheel.sh [DIR [PYTEST ARGUMENTS...]]     (DIR: where the wheel goes, default dist/)
# build_wheels.sh's variables apply (GPUCORE_WHEEL_VENV, GPUCORE_WHEEL_BUILD_DIR, TORCH_CUDA_ARCH_LIST, ...).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=$(realpath -m "${1:-$ROOT/dist}")
[ $# = 0 ] || shift
START=$SECONDS
GPUCORE_WHEEL_BUILD_TESTS=ON bash "$ROOT/scripts/build_wheels.sh" cuda "$DIR"
echo "check_cuda_wheel: the wheel and the test binaries built in $((SECONDS - START)) s"
ctest --test-dir "${GPUCORE_WHEEL_BUILD_DIR:-$ROOT/build/wheel-cuda}" --output-on-failure
bash "$ROOT/scripts/check_wheel.sh" "$(ls -t "$DIR"/gpucore-*+torch*cu*-*.whl | head -n 1)" --pytest "$@"
