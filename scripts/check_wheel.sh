#!/usr/bin/env bash
# Installs a gpucore wheel (scripts/build_wheels.sh) as a user with no compiler would: a fresh virtualenv, the torch the
# wheel pins, then the wheel, with no compiler, cmake or nvcc on PATH. Then runs it from the installed package:
# `gpucore doctor`, a one-epoch training run with its report, and `gpucore gradcam` on its best checkpoint; with
# --pytest also the tests' extras (scripts/bootstrap.sh --tests --extras-only) and pytest on tests/python, which imports
# the installed gpucore (the source tree's python/ is never on sys.path; the run fails if gpucore is imported from it).
#
#   scripts/check_wheel.sh WHEEL [--pytest [PYTEST ARGUMENTS...]]
#
#   GPUCORE_CHECK_VENV  the virtualenv to make (removed first; default build/check-wheel/venv)
#   GPUCORE_TORCH       the torch to install (default: torch==<the release the wheel pins>, from pip's index; where
#                       that index serves the CUDA build, the CPU wheel needs
#                       "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu")
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WHEEL=$(realpath "${1:?usage: scripts/check_wheel.sh WHEEL [--pytest [PYTEST ARGUMENTS...]]}")
shift
PYTEST=0
if [ "${1:-}" = --pytest ]; then PYTEST=1; shift; fi
[ "$PYTEST" = 1 ] || [ $# = 0 ] || { echo "check_wheel: unknown argument '$1' (valid: --pytest, then pytest's)" >&2; exit 2; }
case "$(basename "$WHEEL")" in
  gpucore-*+torch*.whl) ;;
  *) echo "check_wheel: $WHEEL is not a gpucore wheel of scripts/build_wheels.sh (gpucore-VERSION+torchX.Y...whl)" >&2; exit 2 ;;
esac
VENV=$(realpath -m "${GPUCORE_CHECK_VENV:-$ROOT/build/check-wheel/venv}")
WORK=$(dirname "$VENV")
TORCH_PIN=$(python3 -c 'import sys, zipfile; w = zipfile.ZipFile(sys.argv[1]); m = next(n for n in w.namelist() if n.endswith(".dist-info/METADATA")); print(next(l.split("==")[1] for l in w.read(m).decode().splitlines() if l.startswith("Requires-Dist: torch==")))' "$WHEEL")
TORCH_SPEC=${GPUCORE_TORCH:-torch==$TORCH_PIN}

# ---- the environment: torch (and with --pytest the tests' extras), nothing of gpucore ------------------------------
rm -rf "$VENV"
mkdir -p "$WORK"
if [ "$PYTEST" = 1 ]; then
  GPUCORE_VENV=$VENV GPUCORE_TORCH=$TORCH_SPEC bash "$ROOT/scripts/bootstrap.sh" --tests --extras-only
else
  python3 -m venv "$VENV"
  # numpy first: torch imported without it prints "Failed to initialize NumPy".
  # shellcheck disable=SC2086  # the requirement may carry pip options such as --extra-index-url
  "$VENV/bin/python" -m pip install -q numpy && "$VENV/bin/python" -m pip install -q $TORCH_SPEC
fi

# ---- a PATH without build tools: the system's programs, less compilers, linkers' drivers, cmake, ninja, nvcc -------
TOOLS=$WORK/bin-without-compilers
rm -rf "$TOOLS" && mkdir -p "$TOOLS"
for dir in /usr/local/bin /usr/bin /bin; do
  for program in "$dir"/*; do
    name=${program##*/}
    case "$name" in
      cc|c++|cpp|gcc*|g++*|cpp-*|clang*|*-gcc*|*-g++*|*-cc|*-c++|cmake|ctest|cpack|ninja|nvcc|ccache|make|ld|ld.*) continue ;;
    esac
    [ -e "$TOOLS/$name" ] || ln -s "$program" "$TOOLS/$name"
  done
done
export PATH="$VENV/bin:$TOOLS"
echo "check_wheel: PATH=$PATH"
for tool in cc c++ gcc g++ cmake ninja nvcc; do
  ! command -v "$tool" >/dev/null || { echo "check_wheel: $tool is still on PATH ($(command -v "$tool"))" >&2; exit 1; }
done
echo "check_wheel: no cc, c++, gcc, g++, cmake, ninja or nvcc on PATH"

# ---- the wheel --------------------------------------------------------------------------------------------------
# Timed apart: the wheel itself (nothing compiled), then what it requires besides torch (matplotlib, pyyaml, tqdm).
seconds_since() { python -c "print(f'{$(date +%s.%N) - $1:.1f}')"; }
START=$(date +%s.%N)
python -m pip install -q --no-deps "$WHEEL"
echo "check_wheel: pip install --no-deps $(basename "$WHEEL") took $(seconds_since "$START") s"
START=$(date +%s.%N)
python -m pip install -q "$WHEEL"
echo "check_wheel: its requirements (pip install of the wheel again) took $(seconds_since "$START") s"
python -m pip check
cd "$WORK"  # not the checkout: `import gpucore` must find the installed package
python - <<'EOF'
import importlib.metadata, os, sys
import gpucore, torch
where = os.path.dirname(gpucore.__file__)
assert where.startswith(sys.prefix), f"gpucore imported from {where}, not from the venv {sys.prefix}"
print(f"check_wheel: gpucore {importlib.metadata.version('gpucore')} from {where}; torch {torch.__version__}; "
      f"CUDA kernels {gpucore._build_info.CUDA_KERNELS}; readers {', '.join(gpucore._build_info.IMAGE_FORMATS)}")
EOF

if [ "$PYTEST" = 1 ]; then
  cd "$ROOT"
  # conftest.py puts the checkout's root on sys.path (the bench package); python/ stays off it.
  python -c 'import gpucore, os, sys; sys.exit(0 if os.path.dirname(gpucore.__file__).startswith(sys.prefix) else f"gpucore imported from {gpucore.__file__}")'
  python -m pytest -q -p no:cacheprovider tests/python "$@"
  exit
fi

# ---- the smoke test: doctor, a tiny training run with its report, Grad-CAM -----------------------------------------
gpucore doctor
gpucore train --set data=synthetic_fashion --set epochs=1 --set 'data_kwargs={train_size: 1024, val_size: 256}' \
  --set run_dir="$WORK/runs" --set name=smoke --set progress=false
python -c 'import numpy; numpy.save("images.npy", numpy.random.default_rng(0).integers(0, 256, (4, 1, 28, 28), dtype=numpy.uint8))'
gpucore gradcam --checkpoint "$WORK/runs/smoke/checkpoints/best.pt" --images images.npy --out "$WORK/cams"
ls "$WORK/cams"
test -f "$WORK/runs/smoke/report.html"
echo "check_wheel: $(basename "$WHEEL"): doctor, training, report and Grad-CAM from the installed wheel"
