"""`gpucore doctor`: versions, every device with its verdict, the automatic choice, a smoke test, advice.

Replaces the hand-written test_gpu_setup.py / verify_*.sh scripts of the original setup guides (guides 001 and 000 in
docs/guides/migrating.md).
"""
from __future__ import annotations

import platform
from dataclasses import asdict
from typing import Optional

import torch

from .. import _C, _build_info
from ..errors import ConfigError, DeviceUnavailableError
from ..process_settings import process_settings
from .select import DeviceLike, _device_string, assess_devices, device_facts, resolve_precision, select_device

REPORT_VERSION = 1


def _gpucore_kernel_check(device: str) -> dict:
    """Whether gpucore's own CUDA kernels run on `device` (they are compiled for their own arch list)."""
    arch_list = list(_C.gpucore_cuda_arch_list())
    if not device.startswith("cuda"):
        return {"built": _build_info.CUDA_KERNELS, "arch_list": arch_list, "ok": None, "error": None}
    result = _C.probe_gpucore_kernels(device)
    return {"built": _build_info.CUDA_KERNELS, "arch_list": arch_list, "ok": result.ok, "error": result.error or None}


def doctor(device: DeviceLike = "auto", *, smoke_test: bool = True) -> dict:
    """Check this machine for training with gpucore (what `gpucore doctor` prints).

    Args:
        device: what the user would ask for ("auto", "cuda:1", ...).
        smoke_test: also run a 512 x 512 matmul and a 3 x 3 conv2d on the device, checked against float64 on the CPU.

    Returns:
        A JSON-ready report: versions, every device with its verdict and reason, what auto picks, the smoke test;
        report["ok"] is False when the device cannot be used or the smoke test fails, report["advice"] lists what to
        fix.
    """
    requested = _device_string(device, "device")
    facts = device_facts()
    report = {
        "report_version": REPORT_VERSION,
        "versions": {
            "gpucore": _build_info.GPUCORE_VERSION,
            "gpucore_built_with_torch": _build_info.TORCH_VERSION,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "cuda_runtime": facts["cuda_runtime"],
            "cudnn": facts["cudnn"],
            "driver_cuda": facts["driver_cuda"],
        },
        "facts": facts,
        "devices": [asdict(verdict) for verdict in assess_devices()],
        "requested": requested,
        "selected": None,
        "precision": None,
        "gpucore_kernels": None,
        "smoke_test": None,
        "process_settings": process_settings(),
        "advice": [],
        "ok": False,
    }
    advice = report["advice"]
    for verdict in report["devices"]:
        if verdict["advice"] and verdict["advice"] not in advice:
            advice.append(verdict["advice"])

    try:
        choice = select_device(requested)
    except (ConfigError, DeviceUnavailableError) as exc:
        report["selected"] = {"device": None, "reason": None, "error": str(exc)}
        advice.append(str(exc))
        return report
    chosen = str(choice.device)
    report["selected"] = {"device": chosen, "reason": choice.reason, "error": None}
    report["precision"] = resolve_precision("auto", chosen).to_dict()

    if torch.version.cuda and not _build_info.CUDA_KERNELS:
        advice.append(
            "gpucore was built without its CUDA kernels (no nvcc at build time); gpucore runs, but its fused CUDA "
            "kernels are unavailable. Install the CUDA toolkit (nvcc) and reinstall gpucore."
        )
    kernels = report["gpucore_kernels"] = _gpucore_kernel_check(chosen)
    if kernels["ok"] is False and _build_info.CUDA_KERNELS:
        advice.append(kernels["error"])

    if smoke_test:
        result = _C.smoke_test(chosen)
        report["smoke_test"] = {
            "device": chosen,
            "ok": result.ok,
            "matmul_512_ms": result.matmul_ms,
            "conv2d_ms": result.conv_ms,
            "matmul_rel_error": result.matmul_rel_error,
            "conv2d_rel_error": result.conv_rel_error,
            "tolerance": result.tolerance,
            "error": result.error or None,
        }
        if not result.ok:
            advice.append(f"The smoke test on {chosen} failed: {result.error}")
    report["ok"] = report["smoke_test"] is None or report["smoke_test"]["ok"]
    return report


def _gib(value: Optional[int]) -> str:
    return f"{value / 2**30:.1f} GiB" if value is not None else "?"


def format_report(report: dict) -> str:
    """The report as text for a terminal."""
    v = report["versions"]
    lines = [
        "gpucore doctor",
        f"  gpucore   {v['gpucore']} (built with torch {v['gpucore_built_with_torch']})",
        f"  torch     {v['torch']}   python {v['python']}",
        f"  CUDA      runtime {v['cuda_runtime'] or '-'}   cuDNN {v['cudnn'] or '-'}   driver {v['driver_cuda'] or '-'}",
    ]
    if report["facts"]["torch_arch_list"]:
        lines.append(f"  torch CUDA code for {', '.join(report['facts']['torch_arch_list'])}")
    lines.append("devices")
    cuda_facts = {d["device"]: d for d in report["facts"]["cuda"]}
    for verdict in report["devices"]:
        mark = "ok" if verdict["usable"] else "--"
        lines.append(f"  [{mark}] {verdict['device']:<7} {verdict['reason']}")
        extra = cuda_facts.get(verdict["device"])
        if extra:
            lines.append(
                f"           {_gib(extra['total_memory'])} total, {_gib(extra['free_memory'])} free, "
                f"{extra['multiprocessor_count']} SMs, bf16 {'yes' if extra['bf16'] else 'no'}, "
                f"TF32 {'yes' if extra['tf32'] else 'no'}"
            )
    selected = report["selected"]
    if selected["device"]:
        p = report["precision"]
        lines.append(f"device {report['requested']} -> {selected['device']}: {selected['reason']}")
        lines.append(
            f"precision auto -> {p['precision']} ({p['reason']}); TF32 {'on' if p['tf32'] else 'off'}, "
            f"cuDNN benchmark {'on' if p['cudnn_benchmark'] else 'off'}"
        )
    else:
        lines.append(f"device {report['requested']} -> unusable: {selected['error']}")
    kernels = report["gpucore_kernels"]
    if kernels and kernels["built"]:
        state = "not checked" if kernels["ok"] is None else ("ok" if kernels["ok"] else f"FAILED: {kernels['error']}")
        lines.append(f"gpucore CUDA kernels for {', '.join(kernels['arch_list'])}: {state}")
    smoke = report["smoke_test"]
    if smoke:
        status = "ok" if smoke["ok"] else f"FAILED: {smoke['error']}"
        lines.append(
            f"smoke test on {smoke['device']}: matmul 512x512 {smoke['matmul_512_ms']:.3f} ms "
            f"(rel. error {smoke['matmul_rel_error']:.1e}), conv2d {smoke['conv2d_ms']:.3f} ms "
            f"(rel. error {smoke['conv2d_rel_error']:.1e}): {status}"
        )
    malloc = report["process_settings"]["malloc"]
    done = malloc.get("planned", malloc["tuned"])
    values = ", ".join(f"{name} {value >> 20} MiB" for name, value in malloc["values"].items())
    lines.append(f"process settings: gpucore.train {'tunes malloc (' + values + ')' if done else 'leaves malloc as it is'}"
                 f": {malloc['reason']}")
    if report["advice"]:
        lines.append("advice")
        lines.extend(f"  - {line}" for line in report["advice"])
    lines.append("result: " + ("ok" if report["ok"] else "PROBLEM"))
    return "\n".join(lines)
