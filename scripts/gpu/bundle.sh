#!/usr/bin/env bash
# Gathers, on a machine with package registries, everything a GPU machine with no network needs to
# build gpucore and run all of its tests and benchmarks (scripts/gpu/verify.sh uses it there; the
# README's "Offline install" uses it on a user's server). Into one folder, by default .gpu-bundle/:
#   wheels/   CPython wheels (--python-version, default 3.12) for the build backend, the test runner
#             and everything the tests and benchmarks import, the peer libraries they compare against;
#             and gpucore's own wheels (scripts/build_wheels.sh) from dist/: a server whose torch and
#             Python one of them fits installs gpucore with no compiler
#   prefix/   Debian's libpng, libjpeg-turbo, zlib and GoogleTest (headers, libraries, CMake files),
#             unpacked, not installed: the build is pointed at it (CMAKE_PREFIX_PATH) and the built
#             module finds these libraries through its rpath
#   fashion-mnist/  the four Fashion-MNIST IDX files (30 MB; the default config's data), when this
#             machine has them (Debian's dataset-fashion-mnist); verify.sh points gpucore at them
#
#   scripts/gpu/bundle.sh [DIR]
#   GPUCORE_BUNDLE_PYTHON  the wheels' Python version (default 3.12, the GPU image's)
#   GPUCORE_BUNDLE_EXTRA   more requirements, fetched with what they need, e.g. "torch==2.13.0 numpy" for
#                          a server that has no torch yet (pip options such as --index-url may follow)
#   GPUCORE_BUNDLE_GPUCORE_WHEELS  the folder of gpucore's wheels to carry (default dist/)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DIR=$(realpath -m "${1:-$ROOT/.gpu-bundle}")
PYVER=${GPUCORE_BUNDLE_PYTHON:-3.12}
rm -rf "$DIR"
mkdir -p "$DIR/wheels" "$DIR/debs" "$DIR/prefix"

# ---- Python wheels ----------------------------------------------------------------------------
# Each with the packages it needs, except the large ones a PyTorch image already has (numpy,
# opencv, matplotlib, scikit-learn, torch): those are named in NO_DEPS and fetched without theirs.
WITH_DEPS=(
  "scikit-build-core>=0.10"    # the build backend (pyproject.toml)
  "pytest>=7" pytest-xdist pytest-timeout
  pyyaml tqdm pillow
  nbclient nbformat ipykernel  # the Grad-CAM notebook runs in a real kernel
  captcha                      # the captcha example's real generator
)
NO_DEPS=(ttach)
PLATFORMS=()
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
           manylinux1_x86_64 manylinux_2_34_x86_64 manylinux_2_31_x86_64 linux_x86_64; do
  PLATFORMS+=(--platform "$tag")
done
pip_download() {
  python3 -m pip download -q --only-binary=:all: --python-version "$PYVER" --implementation cp \
    "${PLATFORMS[@]}" -d "$DIR/wheels" "$@"
}
pip_download "${WITH_DEPS[@]}"
pip_download --no-deps "${NO_DEPS[@]}"
# pytorch-grad-cam, the Grad-CAM reference (its own needs, opencv, matplotlib, scikit-learn, are in the
# images): 1.5 is published as source only, so it is built into a wheel here (pure Python).
python3 -m pip wheel -q --no-deps -w "$DIR/wheels" "grad-cam==1.5.5"
# Large wheels that every image we target already has; a second copy would only cost carry space.
rm -f "$DIR"/wheels/numpy-* "$DIR"/wheels/opencv* "$DIR"/wheels/torch-*
# shellcheck disable=SC2086  # a list of requirements and options
[ -z "${GPUCORE_BUNDLE_EXTRA:-}" ] || pip_download $GPUCORE_BUNDLE_EXTRA
# gpucore's own wheels, each for one torch release (its local version names it, e.g. +torch2.14cu130).
GPUCORE_WHEELS=${GPUCORE_BUNDLE_GPUCORE_WHEELS:-$ROOT/dist}
if compgen -G "$GPUCORE_WHEELS/gpucore-*.whl" >/dev/null; then
  cp "$GPUCORE_WHEELS"/gpucore-*.whl "$DIR/wheels/"
else
  echo "bundle: no gpucore wheels in $GPUCORE_WHEELS (scripts/build_wheels.sh cpu|cuda builds them): the server" \
       "will build gpucore from the checkout" >&2
fi

# ---- Debian packages, unpacked into prefix/ ---------------------------------------------------
DEBS=(libpng-dev libpng16-16 libjpeg62-turbo-dev libjpeg62-turbo zlib1g-dev zlib1g libgtest-dev)
(cd "$DIR/debs" && apt-get download -qq "${DEBS[@]}")
for deb in "$DIR"/debs/*.deb; do
  dpkg-deb -x "$deb" "$DIR/prefix"
done
# One library folder: runtime libraries (lib/) beside the development links (usr/lib/), and every
# absolute link (libz.so -> /lib/...) made relative, so the prefix works wherever it is unpacked.
LIB=$DIR/prefix/usr/lib/x86_64-linux-gnu
if [ -d "$DIR/prefix/lib/x86_64-linux-gnu" ]; then
  cp -a "$DIR"/prefix/lib/x86_64-linux-gnu/. "$LIB"/
  rm -rf "$DIR/prefix/lib"
fi
find "$LIB" -type l | while read -r link; do
  target=$(readlink "$link")
  case "$target" in /*) ln -sfn "$(basename "$target")" "$link" ;; esac
done
# Documentation and the unpacked .debs are not needed by the build.
rm -rf "$DIR/prefix/usr/share/doc" "$DIR/prefix/usr/share/man" "$DIR/debs"
for lib in libpng16.so libjpeg.so libz.so libgtest.a; do
  [ -e "$LIB/$lib" ] || { echo "bundle: $lib missing from $LIB" >&2; exit 1; }
done

# ---- the default config's data ------------------------------------------------------------------
FASHION_MNIST=${GPUCORE_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
if [ -f "$FASHION_MNIST/train-images-idx3-ubyte.gz" ]; then
  mkdir -p "$DIR/fashion-mnist" && cp "$FASHION_MNIST"/*-ubyte.gz "$DIR/fashion-mnist/"
else
  echo "bundle: no Fashion-MNIST in $FASHION_MNIST: the GPU machine will train on the synthetic stand-in" >&2
fi

du -sh "$DIR" "$DIR/wheels" "$DIR/prefix"
echo "bundle: $(ls "$DIR/wheels" | wc -l) wheels for CPython $PYVER, Debian libraries in $DIR/prefix"
ls "$DIR"/wheels/gpucore-*.whl 2>/dev/null || true
