#!/usr/bin/env bash
# Verifies gpucore on a GPU machine with no network, in one call, from the project root:
#   1. what the machine has (GPU, driver, python, torch, nvcc, cmake, the libraries the build needs)
#   2. installs only what is missing, from the bundle of scripts/gpu/bundle.sh (no network)
#   3. installs the bundle's gpucore wheel when one fits this machine's torch and Python (scripts/build_wheels.sh; the
#      ctest step then has no GoogleTest binary to run and is left out), else builds gpucore with its CUDA kernels for
#      this GPU's architecture, and the GoogleTest binary
#   4. ctest, `gpucore doctor --json`, stops by SIGTERM/SIGUSR1/SIGINT at random moments of graphed runs each resumed
#      against the uninterrupted run (scripts/gpu/resume_bitwise.py), one torchrun process (NCCL), the host syncs of
#      training steps, the whole pytest suite (CUDA tests included), the speedrun on the GPU (10 seeds with cuda_graphs
#      beside a plain loop and Lightning, then the cold wall time of `gpucore train` on its config:
#      scripts/gpu/cold_speedrun.py), a user's workflow on the real Fashion-MNIST (scripts/gpu/real_run.py),
#      `python -m bench all --device cuda` (the training sweep with its CUDA-graph and torch.compile rows, ops per
#      step, Grad-CAM, data loading, Fashion-MNIST, layouts)
# Under $OUT (default build/gpu-verify), 8 files: setup.log, build/ctest/pytest/doctor logs (the doctor's
# holds its JSON), checks.log (torchrun, syncs, benchmarks), bench.json and results.md; the table is printed last.
#
#   GPUCORE_BUNDLE  the bundle folder (default .gpu-bundle)    PYTHON  the interpreter (default python3)
#   GPUCORE_VERIFY_STEPS  the steps to run (default "build ctest doctor resume ddp syncs pytest speedrun realrun bench")
#                         also: camera (not by default: ResNet-18 trained from 128 12-megapixel JPEGs it makes first,
#                         `python -m bench scale --data camera`, each gpucore row's share of the limit; about 5 min)
#   GPUCORE_VERIFY_FROM   wheel (default: the bundle's wheel where one fits, else the source) or source (always build)
#   GPUCORE_VERIFY_BENCHES  what the bench step runs (default "all"; e.g. "train cam layout")
#   GPUCORE_PYTEST_ARGS   what pytest runs, instead of tests/python (e.g. "tests/python -m needs_cuda")
#   GPUCORE_VERIFY_SEEDS  the speedrun step's seeds (default "0 1 2 3 4 5 6 7 8 9")
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/build/gpu-verify}
BUNDLE=${GPUCORE_BUNDLE:-$ROOT/.gpu-bundle}
PY=${PYTHON:-python3}
STEPS=" ${GPUCORE_VERIFY_STEPS:-build ctest doctor resume ddp syncs pytest speedrun realrun bench} "
BUILD_DIR=$ROOT/build/gpu
mkdir -p "$OUT"
RESULTS=$OUT/results.md
printf '| step | result | seconds | detail |\n|---|---|---|---|\n' >"$RESULTS"
START=$SECONDS

# step NAME DETAIL_COMMAND -- COMMAND...: runs COMMAND with its output streamed into $OUT/NAME.log (so a
# call cut off at its time limit still brings back what ran), then adds a row with the exit status, the
# time and the last line DETAIL_COMMAND prints of this step's output.
# STEP_LOG=NAME appends to $OUT/NAME.log instead (the device tool brings back 8 files at most).
step() {
  local name=$1 detail=$2; shift 3
  local t0=$SECONDS rc detail_text log="$OUT/${STEP_LOG:-$name}.log" first_line
  echo "== $name: $*" | tee -a "$log"
  first_line=$(($(wc -l <"$log") + 1))
  "$@" >>"$log" 2>&1
  rc=$?
  detail_text=$(tail -n +"$first_line" "$log" | eval "$detail" 2>/dev/null | tail -n 1 | tr '|' '/' | cut -c1-160)
  printf '| %s | %s | %d | %s |\n' "$name" "$([ $rc -eq 0 ] && echo ok || echo "FAILED ($rc)")" \
    $((SECONDS - t0)) "$detail_text" >>"$RESULTS"
  [ $rc -eq 0 ] || { echo "-- $name failed ($rc); end of its log:"; tail -n 40 "$log"; }
  return $rc
}
wants() { [[ "$STEPS" == *" $1 "* ]]; }

# ---- 1. the machine -----------------------------------------------------------------------------
{
  nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv
  "$PY" -c 'import sys, torch; print("python", sys.version.split()[0], sys.executable);
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(),
      "arch list", torch.cuda.get_arch_list())'
  command -v nvcc && nvcc --version | tail -n 1
  cmake --version | head -n 1; ninja --version; nproc
} >"$OUT/setup.log" 2>&1
cat "$OUT/setup.log"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' ')
[ -n "$ARCH" ] || { echo "verify: no GPU found (nvidia-smi)"; exit 1; }

# ---- 2. what is missing, from the bundle ----------------------------------------------------------
# Native libraries: the machine's own when their headers are there, else the bundle's prefix
# (CMake reads CMAKE_PREFIX_PATH from the environment: the build and the tests' own configures).
missing_native=()
for header in png.h jpeglib.h zlib.h gtest/gtest.h; do
  [ -f "/usr/include/$header" ] || [ -f "/usr/local/include/$header" ] || missing_native+=("$header")
done
if [ ${#missing_native[@]} -gt 0 ]; then
  [ -d "$BUNDLE/prefix/usr" ] || { echo "verify: ${missing_native[*]} missing and no bundle at $BUNDLE (run scripts/gpu/bundle.sh)"; exit 1; }
  echo "verify: ${missing_native[*]} not on the machine: using $BUNDLE/prefix"
  export CMAKE_PREFIX_PATH=$BUNDLE/prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
fi
# Python packages: module name -> distribution in the bundle.
missing_py=()
for pair in scikit_build_core:scikit-build-core pytest:pytest xdist:pytest-xdist pytest_timeout:pytest-timeout \
            yaml:pyyaml tqdm:tqdm PIL:pillow nbclient:nbclient nbformat:nbformat ipykernel:ipykernel \
            captcha:captcha pytorch_grad_cam:grad-cam ttach:ttach; do
  "$PY" -c "import ${pair%%:*}" 2>/dev/null || missing_py+=("${pair#*:}")
done
if [ ${#missing_py[@]} -gt 0 ]; then
  echo "verify: installing ${missing_py[*]} from $BUNDLE/wheels"
  for dist in "${missing_py[@]}"; do  # one at a time: one that cannot be installed skips only its tests
    # grad-cam asks for opencv-python by name; images with opencv-python-headless have cv2 already.
    deps=(); [ "$dist" = grad-cam ] && "$PY" -c "import cv2" 2>/dev/null && deps=(--no-deps)
    "$PY" -m pip install -q --no-index --find-links "$BUNDLE/wheels" --no-warn-script-location "${deps[@]}" \
      "$dist" >>"$OUT/setup.log" 2>&1 || echo "verify: could not install $dist (see setup.log)"
  done
fi
# The default config's data, the real Fashion-MNIST: the machine's own, else the bundle's copy, else
# gpucore trains on the synthetic stand-in and says so.
if [ -z "${GPUCORE_FASHION_MNIST:-}" ] && [ ! -d /usr/share/datasets/fashion-mnist ] && [ -d "$BUNDLE/fashion-mnist" ]; then
  export GPUCORE_FASHION_MNIST=$BUNDLE/fashion-mnist
fi

# ---- 3. build ---------------------------------------------------------------------------------------
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
# The GPU's own architecture, whatever the image sets (the device image sets TORCH_CUDA_ARCH_LIST=9.0a).
export TORCH_CUDA_ARCH_LIST=${GPUCORE_VERIFY_ARCH:-$ARCH}
# The wheel made for this torch (its local version, e.g. +torch2.14cu130) and this Python, when the bundle has one.
FROM=${GPUCORE_VERIFY_FROM:-wheel}
[[ "$FROM" =~ ^(wheel|source)$ ]] || { echo "verify: GPUCORE_VERIFY_FROM must be wheel or source, got '$FROM'"; exit 2; }
GPUCORE_WHEEL="gpucore==$(sed -nE 's/^version = "(.*)"/\1/p' pyproject.toml)+$("$PY" scripts/wheel_local_version.py | cut -d' ' -f2)"
if wants build && [ "$FROM" = wheel ] && "$PY" -m pip install -q --dry-run --no-index --no-deps \
     --find-links "$BUNDLE/wheels" "$GPUCORE_WHEEL" >/dev/null 2>&1; then
  step build "grep -E 'Successfully installed|error' " -- \
    "$PY" -m pip install --no-index --no-deps --force-reinstall --find-links "$BUNDLE/wheels" "$GPUCORE_WHEEL" \
    || { cat "$RESULTS"; exit 1; }
  STEPS=${STEPS/ ctest / }
  echo "verify: installed $GPUCORE_WHEEL from $BUNDLE/wheels; no GoogleTest binary, so no ctest step"
elif wants build; then
  echo "verify: no $GPUCORE_WHEEL for this Python in $BUNDLE/wheels (or GPUCORE_VERIFY_FROM=source): building gpucore"
  step build "grep -E 'Successfully installed|error' " -- \
    "$PY" -m pip install -v --no-build-isolation --no-index --no-deps . \
      --config-settings=build-dir="$BUILD_DIR" \
      --config-settings=cmake.define.GPUCORE_WITH_CUDA=ON \
      --config-settings=cmake.define.GPUCORE_BUILD_TESTS=ON || { cat "$RESULTS"; exit 1; }
fi

# ---- 4. tests, doctor, benchmarks -------------------------------------------------------------------
# 8 workers of 2 torch threads each: 12 workers of 16 threads each spun one another out on 16 cores (the first
# H100 run, 2026-11-24, had not finished in 8 min). -v names each test as it ends, so a log cut off at the
# lease's limit still says what passed and failed; a test that hangs fails after 300 s.
PYTEST_OPTS=(-v)
"$PY" -c "import xdist" 2>/dev/null && PYTEST_OPTS+=(-n 8)
"$PY" -c "import pytest_timeout" 2>/dev/null && PYTEST_OPTS+=(--timeout 300)
wants ctest && step ctest "grep -E 'tests passed|tests failed'" -- ctest --test-dir "$BUILD_DIR" -j 8 --output-on-failure
wants doctor && step doctor "$PY -c 'import json,sys; d=json.load(sys.stdin); k=d[\"gpucore_kernels\"] or {}; s=d[\"smoke_test\"] or {}; print(d[\"selected\"][\"device\"], d[\"precision\"][\"precision\"] if d[\"precision\"] else None, \"kernels\", k.get(\"ok\"), \"smoke\", s.get(\"ok\"), d[\"advice\"])'" -- \
  "$PY" -m gpucore doctor --json
# A stop at random moments of graphed runs in their own processes, each resumed, against the uninterrupted run.
wants resume && STEP_LOG=checks step resume "grep 'resumed runs bitwise'" -- "$PY" scripts/gpu/resume_bitwise.py
# One process under torchrun: NCCL, rank-0 writes and the launcher's environment, on the GPU.
wants ddp && STEP_LOG=checks step ddp "grep -E 'best_metric|Error'" -- \
  "$PY" -m torch.distributed.run --standalone --nproc_per_node=1 -m gpucore train --set epochs=1 \
  --set device=cuda --set progress=false --set run_dir=/tmp/gpucore-verify-ddp --set data=synthetic_fashion \
  --set "data_kwargs={train_size: 4096, val_size: 512}"
wants syncs && STEP_LOG=checks step syncs "grep 'per step'" -- "$PY" scripts/gpu/count_syncs.py
# shellcheck disable=SC2086  # GPUCORE_PYTEST_ARGS is a list of arguments
wants pytest && step pytest "grep -E '(passed|failed|error)'" -- env OMP_NUM_THREADS=2 \
  "$PY" -m pytest -rfEs --durations=12 "${PYTEST_OPTS[@]}" ${GPUCORE_PYTEST_ARGS:-tests/python}
# The speedrun config on the real Fashion-MNIST: 10 seeds, gpucore with cuda_graphs beside the plain loop and Lightning
# (each epoch's GPU time ends in a sync), then `gpucore train` on it from a fresh process, start to exit.
# shellcheck disable=SC2086  # a list of seeds
wants speedrun && STEP_LOG=checks step speedrun "tail -n 3 | head -n 1" -- "$PY" bench/speedrun_bench.py --device cuda \
  --seeds ${GPUCORE_VERIFY_SEEDS:-0 1 2 3 4 5 6 7 8 9} --set cuda_graphs=true
wants speedrun && STEP_LOG=checks step coldrun "tail -n 2 | head -n 1" -- "$PY" scripts/gpu/cold_speedrun.py \
  --set device=cuda --set cuda_graphs=true
# A user's workflow on the real Fashion-MNIST: transforms, mixup, EMA, cuda_graphs, report, evaluate, export, SegFormer.
wants realrun && STEP_LOG=checks step realrun "tail -n 1" -- "$PY" scripts/gpu/real_run.py --out /tmp/gpucore-real
# shellcheck disable=SC2086  # a list of bench names
wants bench && STEP_LOG=checks step bench "tail -n 1" -- "$PY" -m bench ${GPUCORE_VERIFY_BENCHES:-all} --device cuda \
  --json "$OUT/bench.json"
# Issue 56's end-to-end goal on camera photos: streamed and the cache's first epoch against the limit.
wants camera && STEP_LOG=checks step camera "grep 'Share of the limit'" -- "$PY" -m bench scale --device cuda \
  --data camera --images 128 --workloads resnet18_frozen resnet18 --rounds 2 --epochs 3

echo
echo "gpucore on $GPU (compute capability $ARCH), $((SECONDS - START)) s in all; logs in $OUT"
[ -f "$OUT/pytest.log" ] && grep -E '^(FAILED|ERROR)' "$OUT/pytest.log" | head -n 30
cat "$RESULTS"
! grep -q FAILED "$RESULTS"
