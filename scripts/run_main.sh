#!/usr/bin/env bash
# Set-up command 1: install everything, then run the main job.
# Until gpucore.train lands this is `gpucore doctor`: every device with its verdict, the device and
# precision gpucore would choose, and a smoke test on that device.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/bootstrap.sh"
"${GPUCORE_VENV:-$ROOT/.venv}/bin/gpucore" doctor "$@"
