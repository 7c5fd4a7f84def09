import pathlib
import sys

import pytest
import torch

from gpucore import _C
from gpucore.device import select as gdevice


# torchvision (and timm, which imports it) for the tests that use their models, also where torchvision's compiled
# ops cannot load next to this torch (a CPU-only torch 2.13): bench.common's import_torchvision (the benchmarks need it
# too) defines the two op schemas its import needs, in a torch.library.Library that lives as long as the process.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))  # the checkout's root, for the bench package
from bench.common import import_torchvision  # noqa: E402

try:
    import_torchvision()
except ImportError:
    pass  # not installed: the tests that need it skip


def resident_bytes() -> int:
    """The process's memory in use, for leak tests: garbage collected first, and what glibc's arenas hold freed
    given back to the system (malloc_trim), so the resident set is what is in use."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
    return gdevice.memory_stats("cpu")["allocated"]


def require(name):
    """The module `name`, for a test that needs it: skips the test when the package is not installed at all, and
    fails it (the import's own error) when it is installed but cannot be imported, which pytest.importorskip would
    skip. Tests import it with `from conftest import require`."""
    import importlib
    import importlib.util

    if importlib.util.find_spec(name.split(".")[0]) is None:
        pytest.skip(f"needs {name.split('.')[0]} (not installed; scripts/bootstrap.sh --tests installs it)",
                    allow_module_level=True)
    return importlib.import_module(name)


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


@pytest.fixture(scope="module")
def one_thread():
    """Every in-process run of the module on one thread, as its subprocesses (OMP_NUM_THREADS=1): runs compared
    bitwise must be made with the same thread count, since a reduction split over more threads rounds otherwise."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def pytest_runtest_setup(item):
    if item.get_closest_marker("needs_cuda") is not None and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: this machine has no CUDA device")


@pytest.fixture(autouse=True)
def _draw_reports_only_where_asked(request, monkeypatch):
    """Drawing a run's report takes seconds per run: only tests marked draws_report (the report's own) draw it,
    the other tests' training runs skip it (config key report stays true for them)."""
    if request.node.get_closest_marker("draws_report") is None:
        monkeypatch.setattr(sys.modules["gpucore.train"], "report_after_training", lambda run: None)
