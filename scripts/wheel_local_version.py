"""Prints the installed torch's version and the local version of gpucore's wheel for it, e.g. `2.13.0+cpu torch2.13cpu`
or `2.14.1 torch2.14cu130`: the torch's major.minor and its build (cpu, or cu and the CUDA version), as flash-attn
names its wheels. scripts/build_wheels.sh names a wheel by it; scripts/gpu/verify.sh finds the wheel that fits.

    python scripts/wheel_local_version.py [cpu|cuda]   # with a kind: fails unless torch is that kind of build
"""
import sys

import torch

kind = sys.argv[1] if len(sys.argv) > 1 else None
if kind not in (None, "cpu", "cuda"):
    sys.exit(f"wheel_local_version: the kind must be cpu or cuda, got {kind!r}")
if kind == "cpu" and torch.version.cuda:
    sys.exit(f"wheel_local_version: the cpu wheel needs a CPU build of torch; torch {torch.__version__} has CUDA {torch.version.cuda} "
             f"(install the CPU build: pip install torch=={torch.__version__.split('+')[0]} "
             "--index-url https://download.pytorch.org/whl/cpu)")
if kind == "cuda" and not torch.version.cuda:
    sys.exit(f"wheel_local_version: the cuda wheel needs a CUDA build of torch; torch {torch.__version__} is a CPU build")
major, minor = torch.__version__.split(".")[:2]
build = "cu" + torch.version.cuda.replace(".", "") if torch.version.cuda else "cpu"
print(torch.__version__, f"torch{major}.{minor}{build}")
