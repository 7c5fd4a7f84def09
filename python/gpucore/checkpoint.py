"""Crash-safe files: checkpoints and JSON written to a temporary file, fsynced, then renamed.

A crash (or a full disk) at any moment leaves the previous file intact. Checkpoints are plain dicts
of tensors and numbers written with torch.save, so `torch.load(path, weights_only=True)` reads them. Every string
in what these writers write has the credentials of its URIs masked (redact.masked_values): run directories are shared.
"""
from __future__ import annotations

import errno
import json
import math
import numbers
import os
import shutil
from typing import Any, Callable, Optional, Tuple

import torch

from .errors import ConfigError, TrainingError
from .redact import masked_values
from .run_files import RESUME_CANDIDATES
from .signals import interrupts_deferred

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


def atomic_write(path: str, write: Callable[[Any], None], binary: bool = True, size: Optional[int] = None) -> None:
    """`write(handle)` into a temporary beside `path`, then renamed over it. A full disk raises TrainingError
    saying so (`size`: the bytes the file needs about, for the message); the previous file is left as it was."""
    with interrupts_deferred():
        _atomic_write(path, write, binary, size)


# Below this much free space a failed write is taken for a full disk: torch.save reports a short write as
# "unexpected pos", without the errno.
_NEARLY_FULL = 1 << 20


def _atomic_write(path: str, write: Callable[[Any], None], binary: bool, size: Optional[int]) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    temporary = f"{path}.tmp-{os.getpid()}"
    try:
        with open(temporary, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException as exc:
        full = _is_disk_full(exc, directory)  # measured while the temporary still takes its space
        if os.path.exists(temporary):
            os.remove(temporary)
        if full:
            raise TrainingError(_disk_full_message(path, directory, size)) from exc
        raise
    _fsync_directory(directory)


def _is_disk_full(exc: BaseException, directory: str) -> bool:
    cause: Optional[BaseException] = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        cause = cause.__cause__ or cause.__context__
    if not isinstance(exc, (OSError, RuntimeError)):
        return False
    try:
        return shutil.disk_usage(directory).free < _NEARLY_FULL
    except OSError:
        return False


def _amount(count: int) -> str:
    return f"{count / 1e6:.1f} MB" if count >= 1e6 else f"{count / 1e3:.1f} kB"


def _disk_full_message(path: str, directory: str, size: Optional[int]) -> str:
    try:
        free = _amount(shutil.disk_usage(directory).free)
    except OSError:
        free = "an unknown amount"
    needs = f"it needs about {_amount(size)}, " if size else ""
    name = os.path.basename(path)
    kept = f"the previous {name} is intact" if os.path.exists(path) else f"there is no earlier {name}"
    complete = sorted((os.path.join(directory, candidate) for candidate in RESUME_CANDIDATES
                       if os.path.isfile(os.path.join(directory, candidate))), key=os.path.getmtime)
    newest = (f"; resume: auto goes on from {complete[-1]}, the newest complete checkpoint" if complete
              else "; no checkpoint to resume from is complete yet")
    return (f"no space left on the device writing '{path}': {needs}{free} free in {directory}. Nothing was "
            f"overwritten: {kept}{newest}. Free some space (or set run_dir elsewhere), then run again with "
            "resume: auto")


def _tensor_bytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(_tensor_bytes(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(item) for item in value)
    return 0


def _to_host(value: Any, copy: bool) -> Any:
    """`value` with every device tensor copied to the CPU without a host sync (the caller waits once);
    with `copy`, host tensors are copied too."""
    if isinstance(value, torch.Tensor):
        if value.device.type == "cpu":
            return value.clone() if copy else value
        return value.to("cpu", non_blocking=True)
    if isinstance(value, dict):
        return {key: _to_host(item, copy) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_host(item, copy) for item in value)
    return value


def host_snapshot(payload: dict, copy: bool = False) -> dict:
    """`payload` as a checkpoint holds it: marked, its tensors on the host. With `copy` nothing in it is shared
    with the live state, so training may go on while another thread writes it."""
    # torch.save would copy device tensors one by one, each copy a host sync (~50 per checkpoint of a
    # small CNN); instead all copies are queued and waited for once.
    payload = _to_host(dict(payload, format=FORMAT, format_version=VERSION), copy)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return payload


def write_snapshot(path: str, snapshot: dict) -> None:
    """A host_snapshot to `path`, atomically."""
    snapshot = masked_values(snapshot)
    atomic_write(path, lambda handle: torch.save(snapshot, handle), size=_tensor_bytes(snapshot))


def save_checkpoint(path: str, payload: dict) -> None:
    write_snapshot(path, host_snapshot(payload))


WHAT_A_CHECKPOINT_IS = "a checkpoint is a .pt file a gpucore run wrote, e.g. RUN_DIR/checkpoints/best.pt"


def _checkpoints_in(folder: str) -> list:
    """The .pt files of `folder`, of its checkpoints/ subfolder (a run directory) or else of its run directories'
    (a config's run_dir, which holds one run directory per model), as paths."""
    try:
        runs = [os.path.join(folder, entry, "checkpoints") for entry in sorted(os.listdir(folder))]
    except OSError:
        runs = []
    for candidate in (os.path.join(folder, "checkpoints"), folder, *runs):
        try:
            names = sorted(name for name in os.listdir(candidate) if name.endswith(".pt"))
        except OSError:
            continue
        if names:
            return [os.path.join(candidate, name) for name in names]
    return []


def load_checkpoint(path: str, map_location="cpu") -> dict:
    """A gpucore checkpoint's contents; a ConfigError says what `path` is instead (a folder, with the checkpoints
    it holds; a missing or foreign file) and what a checkpoint is."""
    path = os.fspath(path)
    if os.path.isdir(path):
        found = _checkpoints_in(path)
        holds = (f"give one of its checkpoints: {', '.join(repr(f) for f in found)}" if found
                 else f"it holds no .pt files; {WHAT_A_CHECKPOINT_IS}")
        raise ConfigError(f"checkpoint '{path}' is a folder, not a checkpoint file; {holds}")
    if not os.path.isfile(path):
        raise ConfigError(f"checkpoint '{path}' does not exist; {WHAT_A_CHECKPOINT_IS}")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:
        raise ConfigError(f"checkpoint '{path}' cannot be read: it is not a file torch.save wrote "
                          f"({type(exc).__name__}); {WHAT_A_CHECKPOINT_IS}") from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ConfigError(f"'{path}' is not a gpucore checkpoint (no '{FORMAT}' marker); {WHAT_A_CHECKPOINT_IS}")
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


def write_jsonl(path: str, rows: list) -> None:
    """One JSON line per row, the whole file replaced at once: it always agrees with the rows given."""
    text = "".join(json.dumps(json_safe(masked_values(row)), allow_nan=False) + "\n" for row in rows)
    atomic_write(path, lambda handle: handle.write(text), binary=False)


def remove_stale_temporaries(folder: str) -> list:
    """Deletes the temporary files atomic_write left in `folder` when its process was killed mid-write
    (`NAME.tmp-PID` of a process that no longer runs); returns their paths."""
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        stem, sep, pid = name.rpartition(".tmp-")
        if not sep or not stem or not pid.isdigit() or (int(pid) != os.getpid() and process_alive(int(pid))):
            continue
        try:
            os.remove(os.path.join(folder, name))
            removed.append(os.path.join(folder, name))
        except OSError:
            pass
    return removed


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists (one of another user counts, as does any the platform cannot tell about)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists, owned by someone else (or the platform cannot tell): leave its file alone
    return True


def write_json(path: str, data: Any) -> None:
    text = json.dumps(json_safe(masked_values(data)), indent=2, allow_nan=False) + "\n"
    atomic_write(path, lambda handle: handle.write(text), binary=False)


# Config key ema_decay: checkpoints also hold the EMA's state under EMA_STATE, and under WEIGHTS which of the two
# (EMA_STATE or "model") the run monitored and gpucore.load and the report use.
EMA_STATE, WEIGHTS = "model_ema", "weights"


def model_state(payload: dict) -> Tuple[dict, str]:
    """(state dict, "ema" or "raw"): the weights a checkpoint's model is used with."""
    if payload.get(WEIGHTS) == "ema":
        return payload[EMA_STATE], "ema"
    return payload["model"], "raw"
