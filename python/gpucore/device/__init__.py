"""Devices: the facts torch reports, the choice among them and the precision (select.py, over the C++ core in
csrc/device/), and `gpucore doctor` (doctor.py)."""
from .select import (
    DeviceChoice,
    PrecisionPolicy,
    device_facts,
    memory_stats,
    resolve_precision,
    select_device,
)

__all__ = ["DeviceChoice", "PrecisionPolicy", "device_facts", "memory_stats", "resolve_precision", "select_device"]
