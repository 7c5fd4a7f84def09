"""Devices: facts read from torch, the choice among them (made in C++), precision and memory."""
from __future__ import annotations

import os
import warnings
from dataclasses import asdict, dataclass
from typing import Optional, Union

import torch

from .. import _C
from ..errors import ConfigError, DeviceFallbackWarning

DeviceLike = Union[str, torch.device]


@dataclass(frozen=True)
class DeviceVerdict:
    device: str
    name: str
    usable: bool
    reason: str
    advice: str


@dataclass(frozen=True)
class DeviceChoice:
    """The device to use and why (select_device returns it).

    Attributes:
        device: the torch.device chosen.
        reason: why, in words (e.g. which of torch's kernels run on the GPU).
        warnings: why devices were passed over.
        verdicts: every device looked at, with its verdict.
    """

    device: torch.device
    reason: str
    warnings: tuple
    verdicts: tuple

    def __str__(self) -> str:
        return f"{self.device} ({self.reason})"


@dataclass(frozen=True)
class PrecisionPolicy:
    """Resolved precision settings for one device (resolve_precision returns it); the C++ core resolves them as
    _C.ResolvedPrecision.

    Attributes:
        device: the device, e.g. cuda:0.
        precision: bf16-mixed, 16-mixed, 32 or 64.
        autocast_dtype: the autocast dtype, None without autocast.
        param_dtype: the parameters' dtype.
        loss_scaling: whether the loss is scaled (16-mixed).
        tf32: TF32 matmul and cuDNN on.
        cudnn_benchmark: cuDNN autotuning on.
        reason: why, in words.
    """

    device: str
    precision: str  # "bf16-mixed", "16-mixed", "32" or "64"
    autocast_dtype: Optional[torch.dtype]  # None when no autocast
    param_dtype: torch.dtype
    loss_scaling: bool
    tf32: bool
    cudnn_benchmark: bool
    reason: str

    def apply(self) -> None:
        """Set torch's TF32 (cuBLAS, cuDNN) and cuDNN benchmark flags as the policy says."""
        _C.apply_precision_policy(tf32=self.tf32, cudnn_benchmark=self.cudnn_benchmark)

    def to_dict(self) -> dict:
        """The policy as JSON-ready values.

        Returns:
            A dict of the attributes, dtypes as names ("bfloat16").
        """
        data = asdict(self)
        data["autocast_dtype"] = str(self.autocast_dtype).replace("torch.", "") if self.autocast_dtype else None
        data["param_dtype"] = str(self.param_dtype).replace("torch.", "")
        return data


def _device_string(device: DeviceLike, argument: str) -> str:
    if isinstance(device, torch.device):
        return str(device)
    if isinstance(device, str):
        return device.strip().lower()
    raise ConfigError(
        f"{argument} must be a string such as 'auto', 'cpu', 'cuda', 'cuda:1' or 'mps', "
        f"or a torch.device; got {type(device).__name__} {device!r}"
    )


def _cuda_unavailable_reason() -> str:
    """torch's own explanation of why it sees no CUDA device (no driver, driver too old, ...)."""
    try:
        torch.cuda.init()
    except Exception as exc:  # torch raises RuntimeError/AssertionError with the cause
        return str(exc).strip().splitlines()[0]
    return ""


def torch_arch_list() -> list:
    """The CUDA architectures the installed torch carries code for, even when no GPU is visible."""
    if not torch.version.cuda:
        return []
    flags = getattr(torch._C, "_cuda_getArchFlags", lambda: None)()
    return flags.split() if flags else torch.cuda.get_arch_list()


def cpu_bf16_isa() -> str:
    """The instructions this CPU does bf16 arithmetic with natively, as torch's oneDNN finds them: "AMX"
    (Sapphire Rapids and newer Xeons), "AVX512-BF16" (Cooper Lake, AMD Zen 4 and newer); "" when bf16 would
    be emulated, slower than float32."""
    if getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)():
        return "AMX"
    if getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)():
        return "AVX512-BF16"
    return ""


def system_facts(*, free_memory: bool = False) -> _C.SystemFacts:
    """What torch and the driver say about this machine. `free_memory` creates a CUDA context per GPU."""
    facts = _C.SystemFacts()
    facts.torch_version = torch.__version__
    facts.torch_cuda_version = torch.version.cuda or ""
    facts.cuda_driver_version = _C.cuda_driver_version()
    facts.cpu_threads = torch.get_num_threads()
    facts.cpu_bf16_isa = cpu_bf16_isa()
    if torch.version.cuda:
        facts.torch_arch_list = torch_arch_list()
        count = torch.cuda.device_count()
        if count == 0:
            facts.cuda_unavailable_reason = _cuda_unavailable_reason()
        devices = []
        for index in range(count):
            props = torch.cuda.get_device_properties(index)
            device = _C.CudaDeviceFacts()
            device.index = index
            device.name = props.name
            device.capability = _C.ComputeCapability(props.major, props.minor)
            device.total_memory = props.total_memory
            device.multiprocessor_count = props.multi_processor_count
            if free_memory:
                device.free_memory = torch.cuda.mem_get_info(index)[0]
            devices.append(device)
        facts.cuda_devices = devices
    mps = torch.backends.mps
    facts.mps_built = mps.is_built()
    facts.mps_available = mps.is_available()
    facts.mps_bf16 = facts.mps_available and getattr(mps, "is_macos_or_newer", lambda *_: False)(14, 0)
    return facts


# None: the live probe in C++. Tests replace it with a Python callable returning _C.ProbeResult.
_probe = None


def _verdict(native) -> DeviceVerdict:
    return DeviceVerdict(native.device, native.name, native.usable, native.reason, native.advice)


def select_device(preference: DeviceLike = "auto", *, no_cuda: bool = False, no_mps: bool = False) -> DeviceChoice:
    """Choose the device to train on: CUDA, then MPS, then the CPU for "auto".

    A CUDA device counts only if the installed torch carries code for it and a live probe runs.

    Args:
        preference: "auto", or "cpu", "cuda", "cuda:N", "mps" to demand one.
        no_cuda: never pick CUDA under auto.
        no_mps: never pick MPS under auto.

    Returns:
        A DeviceChoice: the device, the reason, and every device's verdict.

    Raises:
        DeviceUnavailableError: a demanded device cannot be used (the message says why).
        ConfigError: a value that names no device.
    """
    native = _C.select_device(system_facts(), _device_string(preference, "device"), bool(no_cuda), bool(no_mps), _probe)
    for message in native.warnings:
        warnings.warn(message, DeviceFallbackWarning, stacklevel=2)
    return DeviceChoice(
        device=torch.device(native.device),
        reason=native.reason,
        warnings=tuple(native.warnings),
        verdicts=tuple(_verdict(v) for v in native.verdicts),
    )


def assess_devices(facts: Optional[_C.SystemFacts] = None) -> list:
    """The verdict on every device, in the order `auto` tries them."""
    return [_verdict(v) for v in _C.assess_all_devices(facts or system_facts(), _probe)]


# The values of the toggles (tf32, cudnn_benchmark, channels_last, cuda_graphs): auto, true, false, from the core.
TOGGLES = tuple(_C.config_choices()["tf32"])


def _toggle(value: Union[bool, str], key: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value.strip().lower()
    raise ConfigError(f"{key} must be {', '.join(TOGGLES[:-1])} or {TOGGLES[-1]}; got {type(value).__name__} {value!r}")


_DTYPES = {"": None, "bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32, "float64": torch.float64}


def resolve_precision(
    precision: str = "auto",
    device: Optional[DeviceLike] = None,
    *,
    tf32: Union[bool, str] = "auto",
    cudnn_benchmark: Union[bool, str] = "auto",
    deterministic: bool = False,
) -> PrecisionPolicy:
    """The precision policy for a device.

    auto is bf16-mixed on CUDA compute capability >= 8.0 and on CPUs with native bf16 (AVX512-BF16, AMX), 16-mixed
    (with loss scaling) on 7.x and MPS, 32 elsewhere.

    Args:
        precision: auto, bf16-mixed, 16-mixed, 32 or 64.
        device: the device (default: what select_device("auto") picks).
        tf32: auto, true or false (auto: on where the GPU has it).
        cudnn_benchmark: auto, true or false (auto: on for CUDA, off with deterministic).
        deterministic: the run asks for deterministic algorithms (config key deterministic).

    Returns:
        The PrecisionPolicy.

    Raises:
        ConfigError: what the device cannot do (bf16 on a GPU older than 8.0, 16-mixed on the CPU, 64 on MPS, tf32
            forced on a pre-Ampere GPU); cudnn_benchmark true with deterministic on CUDA.
    """
    target = select_device("auto").device if device is None else torch.device(_device_string(device, "device"))
    benchmark = _toggle(cudnn_benchmark, "cudnn_benchmark")
    if deterministic:
        # cuDNN's autotuner times its algorithms anew in each process and may pick others (each deterministic, with
        # other roundings): two runs of one config differed in 22 of 26 tensors on an H200 (2026-11-29). A CUDA knob:
        # the same config still runs on the CPU or MPS.
        if benchmark == "true" and target.type == "cuda":
            raise ConfigError("config key 'cudnn_benchmark' is true with deterministic: true; the autotuner picks "
                              "cuDNN's algorithms by timing them in each process, so two runs could still differ. Use "
                              "cudnn_benchmark auto or false (auto is off with deterministic: true)")
        benchmark = "false" if benchmark == "auto" else benchmark
    native = _C.resolve_precision(
        system_facts(), str(target), str(precision).strip().lower(), _toggle(tf32, "tf32"), benchmark,
    )
    return PrecisionPolicy(
        device=str(target),
        precision=native.precision,
        autocast_dtype=_DTYPES[native.autocast_dtype],
        param_dtype=_DTYPES[native.param_dtype],
        loss_scaling=native.loss_scaling,
        tf32=native.tf32,
        cudnn_benchmark=native.cudnn_benchmark,
        reason=native.reason,
    )


def device_facts() -> dict:
    """Facts about every device, JSON-ready: names, compute capability, memory, SMs, bf16/TF32, versions.

    Returns:
        A dict: torch, cuda_runtime, cudnn, driver_cuda, torch_arch_list, cuda (one dict per GPU), mps, cpu.
    """
    facts = system_facts(free_memory=True)
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    driver = facts.cuda_driver_version
    return {
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "cudnn": cudnn,
        "driver_cuda": f"{driver // 1000}.{driver % 1000 // 10}" if driver else None,
        "torch_arch_list": list(facts.torch_arch_list),
        "cuda_unavailable_reason": facts.cuda_unavailable_reason or None,
        "cuda": [
            {
                "device": f"cuda:{d.index}",
                "name": d.name,
                "capability": str(d.capability),
                "total_memory": d.total_memory,
                "free_memory": d.free_memory if d.free_memory >= 0 else None,
                "multiprocessor_count": d.multiprocessor_count,
                "bf16": d.capability.major >= 8,
                "tf32": d.capability.major >= 8,
            }
            for d in facts.cuda_devices
        ],
        "mps": {"built": facts.mps_built, "available": facts.mps_available, "bf16": facts.mps_bf16},
        "cpu": {"threads": facts.cpu_threads, "logical_cores": os.cpu_count(), "bf16": facts.cpu_bf16_isa or None},
    }


def _proc_status_bytes(field: str) -> Optional[int]:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def memory_stats(device: Optional[DeviceLike] = None) -> dict:
    """Memory of a device in bytes.

    CUDA: torch's caching allocator (reserved = held by the allocator) and the driver's free/total. MPS: tensors'
    memory and the Metal driver's. CPU: the process's resident set (now and peak) and the machine's available/total
    memory. Unknown values are None.

    Args:
        device: the device (None: the current CUDA device, else the CPU).

    Returns:
        A dict: allocated, reserved, peak_allocated, free, total.
    """
    target = select_device("auto").device if device is None else torch.device(_device_string(device, "device"))
    if target.type == "cuda":
        index = target.index if target.index is not None else torch.cuda.current_device()
        free, total = torch.cuda.mem_get_info(index)
        return {
            "device": f"cuda:{index}",
            "allocated": torch.cuda.memory_allocated(index),
            "reserved": torch.cuda.memory_reserved(index),
            "peak_allocated": torch.cuda.max_memory_allocated(index),
            "free": free,
            "total": total,
        }
    if target.type == "mps":
        return {
            "device": "mps",
            "allocated": torch.mps.current_allocated_memory(),
            "reserved": torch.mps.driver_allocated_memory(),
            "peak_allocated": None,
            "free": None,
            "total": getattr(torch.mps, "recommended_max_memory", lambda: None)(),
        }
    if target.type != "cpu":
        raise ConfigError(f"memory_stats: device '{target}' is not one of cpu, cuda, cuda:N, mps")
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else None
    rss = _proc_status_bytes("VmRSS")
    return {
        "device": "cpu",
        "allocated": rss,
        "reserved": rss,
        "peak_allocated": _proc_status_bytes("VmHWM"),
        "free": page * os.sysconf("SC_AVPHYS_PAGES") if page else None,
        "total": page * os.sysconf("SC_PHYS_PAGES") if page else None,
    }
