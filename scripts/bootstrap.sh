#!/usr/bin/env bash
# Installs what gpucore needs on a fresh Debian/Ubuntu machine, reusing whatever is already there:
# build tools and the image libraries (apt), a virtualenv (.venv), torch, then gpucore itself with a plain
# `pip install .` into that environment. With --tests (scripts/run_tests.sh) also what only the tests need:
# GoogleTest and the C++ test binary (in build/), chromium, the test, export and docs Python packages. With
# --extras-only, torch and those Python packages but not gpucore: scripts/check_wheel.sh installs a wheel instead, with
# no build tools.
#
#   bootstrap.sh [--tests] [--extras-only]
#
#   GPUCORE_VENV   the virtualenv to use or create (default: .venv in the checkout)
#   GPUCORE_TORCH  the torch to install when the venv has none (default: torch==2.13.0, a CPU build;
#                  on a GPU server e.g. "torch --index-url https://download.pytorch.org/whl/cu126")
set -euo pipefail
TESTS=0
BUILD=1
for argument in "$@"; do
  case "$argument" in
    --tests) TESTS=1 ;;
    --extras-only) BUILD=0 ;;
    *) echo "bootstrap: unknown argument '$argument' (valid: --tests, --extras-only)" >&2; exit 2 ;;
  esac
done

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${GPUCORE_VENV:-$ROOT/.venv}
TORCH_SPEC=${GPUCORE_TORCH:-torch==2.13.0}
BUILD_DIR=$ROOT/build/release

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
missing=()
if [ "$BUILD" = 1 ]; then
  command -v cmake >/dev/null || missing+=(cmake)
  command -v ninja >/dev/null || missing+=(ninja-build)
  command -v g++ >/dev/null || missing+=(g++)
  command -v ccache >/dev/null || missing+=(ccache)
  [ "$TESTS" = 0 ] || [ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
  [ -f /usr/include/png.h ] || missing+=(libpng-dev)
  [ -f /usr/include/jpeglib.h ] || missing+=(libjpeg-dev)
  [ -f /usr/include/zlib.h ] || missing+=(zlib1g-dev)
fi
python3 -c "import venv, ensurepip" 2>/dev/null || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: installing ${missing[*]} with apt-get"
  if ! command -v apt-get >/dev/null; then
    echo "bootstrap: please install ${missing[*]} with your package manager" >&2
    exit 1
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The real Fashion-MNIST (config data: fashion_mnist), Debian/Ubuntu's package; optional: without it,
# gpucore says where to put the files and trains on its synthetic stand-in.
if [ ! -d /usr/share/datasets/fashion-mnist ] && command -v apt-get >/dev/null; then
  install_dataset() { DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends dataset-fashion-mnist >/dev/null 2>&1; }
  install_dataset || { $SUDO apt-get update -qq >/dev/null 2>&1 && install_dataset; } \
    || echo "bootstrap: dataset-fashion-mnist could not be installed; data: fashion_mnist will say where to put the files"
fi

# Debian's chromium, for the test that opens report.html in a real (headless) browser; optional: without it
# that test is skipped.
if [ "$TESTS" = 1 ] && ! command -v chromium >/dev/null && command -v apt-get >/dev/null; then
  install_chromium() { DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1; }
  install_chromium || { $SUDO apt-get update -qq >/dev/null 2>&1 && install_chromium; } \
    || echo "bootstrap: chromium could not be installed; the report's browser test will be skipped"
fi

[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PY="$VENV/bin/python"
# numpy before anything imports torch: torch imported without it prints "Failed to initialize NumPy" (gpucore needs
# numpy anyway).
"$PY" -c "import numpy" 2>/dev/null || "$PY" -m pip install -q numpy
if ! "$PY" -c "import torch" 2>/dev/null; then
  echo "bootstrap: installing $TORCH_SPEC into $VENV"
  # shellcheck disable=SC2086  # GPUCORE_TORCH may carry pip options such as --index-url
  "$PY" -m pip install -q $TORCH_SPEC
fi
if [ "$TESTS" = 1 ]; then
  # Test-only extras: OpenCV (its JET table is the reference for overlays), Pillow (decodes our PNGs),
  # nbclient + ipykernel (the Grad-CAM notebook is executed in a real kernel), scikit-learn (the reference for
  # the report's per-class metrics), scikit-image (its sample photos are python -m bench scale's data).
  "$PY" -m pip install -q "pytest>=7" numpy opencv-python-headless pillow nbclient ipykernel scikit-learn
  "$PY" -m pip install -q scikit-image \
    || echo "bootstrap: scikit-image could not be installed; python -m bench scale's quick form will say so and skip"
  # HEIC/HEIF through Pillow (gpucore's formats extra). Optional: without it the HEIC tests skip and say why.
  "$PY" -m pip install -q pillow-heif || echo "bootstrap: pillow-heif could not be installed; the HEIC tests will skip"
  # Video clips decoded by FFmpeg through PyAV (gpucore's video extra; wheels bundle FFmpeg), torch pinned (it needs
  # none). Optional: without it the video tests skip and say why.
  "$PY" -m pip install -q -c <(echo "torch==$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')") \
    "av>=14" || echo "bootstrap: av (PyAV) could not be installed; the video tests will skip"
  # The documentation site, which the tests build (mkdocs build --strict) and open in chromium: gpucore's docs extra,
  # pinned (pyproject.toml), torch pinned (none of them needs it).
  "$PY" -m pip install -q -c <(echo "torch==$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')") \
    "mkdocs==1.6.1" "mkdocs-material==9.7.6" "mkdocstrings==1.0.8" "mkdocstrings-python==2.0.11"
  # jiwer, the reference of the CTC word error rate's tests (issue 72). Optional: without it those tests skip.
  "$PY" -m pip install -q "jiwer==4.0.0" || echo "bootstrap: jiwer could not be installed; the word error rate tests will skip"
  # Export extras (gpucore export and its tests; none of them pulls torch): ONNX through onnxscript, checked with
  # onnxruntime, and safetensors. Optional: without them the export tests skip and say why.
  "$PY" -m pip install -q "onnx>=1.16" "onnxscript>=0.3" "onnxruntime>=1.18" "safetensors>=0.4" \
    || echo "bootstrap: onnx/onnxscript/onnxruntime/safetensors could not be installed; the export tests will skip"
  # The fine-tuning tests' torchvision and timm models: the torchvision release made for the venv's torch (2.13, or
  # 2.14, the CUDA wheel's) and timm without their dependencies (pip would otherwise replace the venv's torch), then
  # timm's light ones with torch pinned. Optional: without them those tests skip.
  case "$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')" in
    2.13.*) TORCHVISION=torchvision==0.28.0 ;;
    2.14.1) TORCHVISION=torchvision==0.29.1 ;;
    *) TORCHVISION="" ;;
  esac
  if [ -n "$TORCHVISION" ]; then
    "$PY" -m pip install -q --no-deps "$TORCHVISION" timm \
      || echo "bootstrap: torchvision/timm could not be installed; the fine-tuning tests that need them will skip"
  fi
  "$PY" -m pip install -q -c <(echo "torch==$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')") \
    huggingface_hub || echo "bootstrap: huggingface_hub could not be installed; the timm tests will skip"
  # The references of the Grad-CAM and captcha cross-checks: pytorch-grad-cam without its dependencies (it names
  # torch, torchvision and opencv-python; OpenCV's headless build is installed above), then its light ones with torch
  # pinned; the captcha package (Pillow only). Optional: without them those cross-checks skip and say why.
  "$PY" -m pip install -q --no-deps grad-cam \
    && "$PY" -m pip install -q -c <(echo "torch==$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')") \
      ttach tqdm matplotlib scipy \
    || echo "bootstrap: grad-cam could not be installed; the pytorch-grad-cam cross-checks will skip"
  "$PY" -m pip install -q captcha || echo "bootstrap: captcha could not be installed; the captcha example's test will skip"
  # The metrics' reference (IoU, Dice, F1, character error rate checked against torchmetrics), torch pinned.
  # Optional: without it those cross-checks skip and say why.
  "$PY" -m pip install -q -c <(echo "torch==$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')") \
    torchmetrics || echo "bootstrap: torchmetrics could not be installed; the metrics' cross-checks will skip"
  # The loggers' trackers (config key loggers): gpucore's mlflow extra (the tests read a real SQLite store back) and
  # tensorboard (its event reader), torch pinned (neither needs it). Optional: without them those tests skip.
  "$PY" -m pip install -q -c <(echo "torch==$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')") \
    "mlflow>=2.0" tensorboard || echo "bootstrap: mlflow/tensorboard could not be installed; the loggers' tests will skip"
  # The segmentation models' libraries (model: transformers:..., smp:...): transformers with torch pinned (it needs
  # none), segmentation-models-pytorch without its dependencies (it names torch; the rest are installed above).
  # Optional: without them those tests skip.
  "$PY" -m pip install -q -c <(echo "torch==$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')") \
    transformers || echo "bootstrap: transformers could not be installed; the SegFormer tests will skip"
  "$PY" -m pip install -q --no-deps segmentation-models-pytorch \
    || echo "bootstrap: segmentation-models-pytorch could not be installed; the smp tests will skip"
  # Hugging Face's datasets (evaluate, report and predict of a datasets.Dataset; load_dataset("imagefolder"), the
  # reference the metadata.csv/.jsonl folders are read against), torch pinned (it needs none). Optional: without it
  # those tests skip and say why.
  "$PY" -m pip install -q -c <(echo "torch==$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')") \
    datasets || echo "bootstrap: datasets could not be installed; the Hugging Face dataset tests will skip"
fi

[ "$BUILD" = 1 ] || exit 0
# Exactly what a user types (build isolation on): the build finds the venv's torch by itself.
# The persistent build dir keeps rebuilds incremental and, with --tests, holds the GoogleTest binary.
echo "bootstrap: building gpucore against $("$PY" -c 'import torch; print("torch", torch.__version__)')"
"$PY" -m pip install -q . \
  --config-settings=build-dir="$BUILD_DIR" \
  --config-settings=cmake.define.GPUCORE_BUILD_TESTS=$([ "$TESTS" = 1 ] && echo ON || echo OFF)
