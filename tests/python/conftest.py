import sys

import pytest
import torch

from gpucore import _C, device as gdevice


def _import_torchvision_without_its_compiled_ops():
    """torchvision's compiled ops (nms, roi_align, ...) may not load next to this torch (a CPU-only torch 2.13 and
    torchvision 0.28, whose library needs CUDA's); its models work without them, but `import torchvision` then
    fails registering fake kernels for torchvision::nms and ::qnms, which only the compiled library defines. Here
    the two schemas are defined, so that the import goes through and the tests can use torchvision's (and timm's)
    models. torchvision missing, or importing as it should: nothing is done."""
    try:
        import torchvision  # noqa: F401
    except ImportError:
        return
    except RuntimeError as exc:
        if "torchvision::nms" not in str(exc):
            raise
        _import_torchvision_without_its_compiled_ops.library = library = torch.library.Library("torchvision", "FRAGMENT")
        library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        library.define("qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor")
        for name in [name for name in sys.modules if name == "torchvision" or name.startswith("torchvision.")]:
            del sys.modules[name]
        import torchvision  # noqa: F401,F811


_import_torchvision_without_its_compiled_ops()


def make_gpu(index, name, major, minor, total_gib=40):
    gpu = _C.CudaDeviceFacts()
    gpu.index = index
    gpu.name = name
    gpu.capability = _C.ComputeCapability(major, minor)
    gpu.total_memory = total_gib << 30
    gpu.multiprocessor_count = 108
    return gpu


def make_facts(gpus=(), arch_list=("sm_75", "sm_80", "sm_86", "sm_90"), torch_version="2.13.0+cu130", driver=13000):
    facts = _C.SystemFacts()
    facts.torch_version = torch_version
    facts.torch_cuda_version = "13.0" if gpus or arch_list else ""
    facts.torch_arch_list = list(arch_list)
    facts.cuda_devices = list(gpus)
    facts.cuda_driver_version = driver
    facts.cpu_threads = 8
    return facts


class FakeMachine:
    """Injects device facts and a probe into gpucore.device, as a GPU server would report them."""

    def __init__(self, monkeypatch):
        self.monkeypatch = monkeypatch
        self.probe_failures = {}
        self.probed = []

    def install(self, facts):
        self.monkeypatch.setattr(gdevice, "system_facts", lambda **_: facts)

        def probe(device):
            self.probed.append(device)
            error = self.probe_failures.get(device)
            return _C.ProbeResult(error is None, error or "")

        self.monkeypatch.setattr(gdevice, "_probe", probe)
        return self


@pytest.fixture
def fake_machine(monkeypatch):
    return FakeMachine(monkeypatch)


requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
