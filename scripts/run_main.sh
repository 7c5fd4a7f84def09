#!/usr/bin/env bash
# Set-up command 1: install gpucore and what the main job needs (no test-only packages, no C++ test binary; see
# bootstrap.sh), then run the main job: `gpucore doctor` (devices, precision,
# smoke test), then `gpucore train` on the built-in default configuration (the seeds' Fashion-MNIST
# CNN on the real Fashion-MNIST, which bootstrap.sh installs with apt where it can, for 10 epochs;
# offline; without the files, the synthetic set with a warning). Extra arguments go to
# `gpucore train`, e.g. --set epochs=5.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/bootstrap.sh"
GPUCORE="${GPUCORE_VENV:-$ROOT/.venv}/bin/gpucore"
"$GPUCORE" doctor
"$GPUCORE" train "$@"
