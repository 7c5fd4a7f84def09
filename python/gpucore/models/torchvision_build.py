"""A torchvision whose compiled ops cannot load next to this torch (PyPI's CUDA torchvision beside a CPU-only torch,
or a release made for another torch): what is wrong, and the pip command that installs the torchvision made for this
torch. Its models are plain Python, but `import torchvision` fails (`operator torchvision::nms does not exist`), and
`pip install torchvision` changes nothing: pip finds the installed one."""
from __future__ import annotations

import importlib.util
import os
import re
from typing import Optional

import torch

PYTORCH_INDEX = "https://download.pytorch.org/whl"  # PyTorch's own wheels, one index per build: cpu, cu126, rocm6.2


def installed_version() -> Optional[str]:
    """The installed torchvision's version with its build, e.g. 0.28.0+cu130, read from its version.py without
    importing it (the import is what fails); None when it cannot be read."""
    spec = importlib.util.find_spec("torchvision")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    if not folders:
        return None
    try:
        with open(os.path.join(folders[0], "version.py"), encoding="utf-8") as handle:
            found = re.search(r"__version__\s*=\s*['\"]([^'\"]+)['\"]", handle.read())
    except OSError:
        return None
    return found.group(1) if found else None


def matching_release(torch_version: str) -> Optional[str]:
    """The torchvision release made for torch `torch_version`: torch 2.M.P pairs with torchvision 0.(M+15).P (2.13.0
    with 0.28.0); None for another major version."""
    found = re.match(r"2\.(\d+)\.(\d+)", torch_version)
    return f"0.{int(found.group(1)) + 15}.{found.group(2)}" if found else None


def build_of(version: str) -> str:
    """The build a version's local part names, in words: '+cpu' CPU-only, '+cu130' CUDA 13.0, '+rocm6.2' ROCm 6.2; a
    version without one is PyPI's default build."""
    local = version.partition("+")[2]
    if local == "cpu":
        return "CPU-only"
    if re.fullmatch(r"cu\d{3,}", local):
        return f"CUDA {local[2:-1]}.{local[-1]}"
    if local.startswith("rocm"):
        return f"ROCm {local[4:]}"
    return "PyPI's default build" if not local else local


def install_command(torch_version: str) -> str:
    """The pip command that installs the torchvision made for torch `torch_version`, from the index of its build."""
    release = matching_release(torch_version)
    local = torch_version.partition("+")[2]
    index = f" --index-url {PYTORCH_INDEX}/{local}" if local else ""
    return f"pip install {'torchvision==' + release if release else 'torchvision'}{index}"


def mismatch_message(exc: BaseException) -> Optional[str]:
    """Why importing torchvision failed with `exc` when its compiled ops do not fit this torch, and the command that
    installs the torchvision made for it; None for another failure."""
    if "torchvision::" not in str(exc):
        return None
    installed = installed_version() or "(version unknown)"
    release = re.match(r"0\.(\d+)\.(\d+)", installed)
    made_for = f"torch 2.{int(release.group(1)) - 15}.{release.group(2)}" if release else "another torch"
    return (f"torchvision {installed} was built for {made_for}, {build_of(installed)}, and this torch is "
            f"{torch.__version__}, {build_of(torch.__version__)}: torchvision's compiled ops cannot load ({exc}), and "
            f"pip install torchvision keeps the installed one. Install the torchvision made for this torch:  "
            f"{install_command(torch.__version__)}")
