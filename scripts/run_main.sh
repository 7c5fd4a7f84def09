#!/usr/bin/env bash
# Set-up command 1: install gpucore and what the main job needs (no test-only packages, no C++ test binary; see
# bootstrap.sh), then run the main job: `gpucore doctor` (devices, precision, smoke test), then `gpucore train` on
# examples/configs/fashion_mnist_speedrun.yaml (the speedrun: 92.5% test accuracy on the real Fashion-MNIST, which
# bootstrap.sh installs with apt where it can, in about a minute of training on 2 CPU cores; offline; without the
# files, the synthetic set with a warning), which ends with the run's report. Extra arguments go to `gpucore train`,
# e.g. --set epochs=8.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/bootstrap.sh"
GPUCORE="${GPUCORE_VENV:-$ROOT/.venv}/bin/gpucore"
"$GPUCORE" doctor
"$GPUCORE" train "$ROOT/examples/configs/fashion_mnist_speedrun.yaml" "$@"
