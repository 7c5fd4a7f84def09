"""gpucore's side-by-side benchmarks: `python -m bench all [--device D] [--json out.json] [--quick]`."""
