#!/usr/bin/env bash
# Set-up command 2: install gpucore and everything its tests need (bootstrap.sh --tests: GoogleTest and the C++
# test binary, chromium, the test and export packages), then run all tests: GoogleTest (ctest), then pytest, then the
# transforms and resume tests again under ATEN_CPU_CAPABILITY=default. pytest also builds the docs site (mkdocs build --strict)
# and runs the code blocks of the README and the docs (tests/python/test_docs*.py).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/bootstrap.sh" --tests
ctest --test-dir "$ROOT/build/release" --output-on-failure
cd "$ROOT"
PY="${GPUCORE_VENV:-$ROOT/.venv}/bin/python"
"$PY" -m pytest -q tests/python "$@"
# The transforms and resume tests once more on torch's baseline CPU kernels (what a CPU without AVX2 runs): gpucore
# rounds as torch does on either build.
ATEN_CPU_CAPABILITY=default "$PY" -m pytest -q tests/python/test_transforms_api.py \
  tests/python/test_transforms_geometric.py tests/python/test_transforms_color.py \
  tests/python/test_transforms_color_policies.py tests/python/test_cpu_kernel_paths.py \
  tests/python/test_step_checkpoints.py "$@"
