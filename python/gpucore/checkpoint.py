"""Crash-safe files: checkpoints and JSON written to a temporary file, fsynced, then renamed.

A crash (or a full disk) at any moment leaves the previous file intact. Checkpoints are plain dicts
of tensors and numbers written with torch.save, so `torch.load(path, weights_only=True)` reads them.
"""
from __future__ import annotations

import json
import math
import numbers
import os
from typing import Any, Callable

import torch

from . import _C

FORMAT = "gpucore-checkpoint"
VERSION = 1


def _fsync_directory(directory: str) -> None:
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:  # not every platform can open a directory
        return
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def atomic_write(path: str, write: Callable[[Any], None], binary: bool = True) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    temporary = f"{path}.tmp-{os.getpid()}"
    try:
        with open(temporary, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
    _fsync_directory(directory)


def _to_host(value: Any) -> Any:
    """`value` with every device tensor copied to the CPU without a host sync (the caller waits once)."""
    if isinstance(value, torch.Tensor):
        return value if value.device.type == "cpu" else value.to("cpu", non_blocking=True)
    if isinstance(value, dict):
        return {key: _to_host(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_host(item) for item in value)
    return value


def save_checkpoint(path: str, payload: dict) -> None:
    # torch.save would copy device tensors one by one, each copy a host sync (~50 per checkpoint of a
    # small CNN); instead all copies are queued and waited for once.
    payload = _to_host(dict(payload, format=FORMAT, format_version=VERSION))
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    atomic_write(path, lambda handle: torch.save(payload, handle))


def load_checkpoint(path: str, map_location="cpu") -> dict:
    if not os.path.isfile(path):
        raise _C.ConfigError(f"checkpoint '{path}' does not exist")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:
        raise _C.ConfigError(f"checkpoint '{path}' cannot be read ({type(exc).__name__}: {exc})") from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise _C.ConfigError(f"'{path}' is not a gpucore checkpoint (no '{FORMAT}' marker)")
    return payload


def json_safe(value: Any) -> Any:
    """Plain JSON values: non-finite floats become None, tensors and NumPy scalars become numbers."""
    if isinstance(value, dict):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    if isinstance(value, torch.Tensor):
        return json_safe(value.tolist())
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else None
    if hasattr(value, "item"):  # NumPy scalars
        return json_safe(value.item())
    return str(value)


def write_json(path: str, data: Any) -> None:
    text = json.dumps(json_safe(data), indent=2, allow_nan=False) + "\n"
    atomic_write(path, lambda handle: handle.write(text), binary=False)
