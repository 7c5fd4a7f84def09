#!/usr/bin/env bash
# Set-up command 2: install gpucore and everything its tests need (bootstrap.sh --tests: GoogleTest and the C++
# test binary, chromium, the test and export packages), then run all tests: GoogleTest (ctest), then pytest.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/bootstrap.sh" --tests
ctest --test-dir "$ROOT/build/release" --output-on-failure
cd "$ROOT"
"${GPUCORE_VENV:-$ROOT/.venv}/bin/python" -m pytest -q tests/python "$@"
