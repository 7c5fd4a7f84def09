"""Process-wide settings gpucore.train applies before it reads the data, chosen by measurement (docs: Benchmarks,
"Process settings"; `python -m bench process` measures them, each setting in its own process).

glibc's malloc: gpucore sets M_MMAP_THRESHOLD to 32 MiB, M_TRIM_THRESHOLD to 1 GiB and M_TOP_PAD to 256 MiB with
mallopt, as GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824:
glibc.malloc.top_pad=268435456 would. By default glibc serves every block of 128 KiB or more (raised as freed ones
come back, up to 32 MiB) with its own mmap, returns it to the kernel on free and trims the heap's top at 128 KiB:
a training step's activations and gradients, allocated and freed again every step, then page-fault anew each step.
With these values they come from the heap, which keeps up to 1 GiB of freed memory for the next step; the cost is
that much more resident memory at most.

It is not applied where the user chose already: GLIBC_TUNABLES names a glibc.malloc tunable, or LD_PRELOAD loads
another allocator (tcmalloc, jemalloc, mimalloc); nor where the C library is not glibc. GPUCORE_MALLOC_TUNING=0 turns
it off. `gpucore doctor` says what gpucore.train would do here; training_stats.json's process_settings what it did.
"""
import ctypes
import os
import platform
import sys
from typing import Optional

OPT_OUT = "GPUCORE_MALLOC_TUNING"
# mallopt's parameter numbers (glibc's malloc.h) and the values gpucore sets.
MALLOPT = {"M_MMAP_THRESHOLD": (-3, 32 << 20), "M_TRIM_THRESHOLD": (-1, 1 << 30), "M_TOP_PAD": (-2, 256 << 20)}
OTHER_ALLOCATORS = ("tcmalloc", "jemalloc", "mimalloc")

_applied: Optional[dict] = None


def malloc_plan() -> dict:
    """What gpucore.train does to malloc in this process: {"tune": bool, "reason": str, "values": {...}}."""
    values = {name: value for name, (_, value) in MALLOPT.items()}
    if os.environ.get(OPT_OUT, "").strip().lower() in ("0", "false", "no", "off"):
        return {"tune": False, "reason": f"turned off by {OPT_OUT}={os.environ[OPT_OUT]}", "values": {}}
    preloaded = [name for name in OTHER_ALLOCATORS if name in os.environ.get("LD_PRELOAD", "")]
    if preloaded:
        return {"tune": False, "reason": f"LD_PRELOAD loads {preloaded[0]}, which is left as it is", "values": {}}
    if "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        return {"tune": False, "reason": "GLIBC_TUNABLES sets malloc's tunables already", "values": {}}
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return {"tune": False, "reason": "the C library is not glibc", "values": {}}
    return {"tune": True, "reason": "glibc malloc: steps' blocks kept on the heap instead of mmap'd and returned "
            f"each step (measured faster; {OPT_OUT}=0 turns it off)", "values": values}


def apply_process_settings() -> dict:
    """Applies malloc_plan() once per process (later calls return what the first did): what training_stats.json's
    process_settings records."""
    global _applied
    if _applied is None:
        plan = malloc_plan()
        if plan["tune"]:
            libc = ctypes.CDLL(None)
            failed = [name for name, (param, value) in MALLOPT.items() if libc.mallopt(param, value) != 1]
            if failed:
                plan = dict(plan, reason=f"{plan['reason']}; mallopt refused {', '.join(failed)}")
        _applied = {"malloc": {"tuned": plan["tune"], "reason": plan["reason"], "values": plan["values"]}}
    return _applied


def process_settings() -> dict:
    """What this process runs with: the applied settings, or where gpucore.train has not run yet, its plan."""
    if _applied is not None:
        return _applied
    plan = malloc_plan()
    return {"malloc": {"tuned": False, "planned": plan["tune"], "reason": plan["reason"], "values": plan["values"]}}
