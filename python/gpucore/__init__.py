"""gpucore: a native (C++/CUDA, LibTorch) training core for PyTorch vision projects."""
import sys

# torch must be imported before gpucore._C: it loads the libtorch shared libraries _C links to.
try:
    import torch
except ImportError as exc:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "gpucore needs torch, which is not installed in this environment "
        f"({sys.executable}). Install torch first (pick the CUDA or CPU build for your machine), "
        "then reinstall gpucore: python -m pip install torch && python -m pip install --force-reinstall --no-deps <gpucore source>"
    ) from exc

from ._version_check import check_torch_version, rebuild_hint

try:
    from . import _build_info
except ImportError as exc:
    raise ImportError(
        "gpucore's native part is not built: this is the source tree, not an installed gpucore. "
        "Run `python -m pip install .` in the gpucore checkout."
    ) from exc

check_torch_version(_build_info, torch.__version__)

try:
    from . import _C
except ImportError as exc:
    raise ImportError(
        f"gpucore's native module failed to load ({exc}). " + rebuild_hint(_build_info)
    ) from exc

from . import ops  # noqa: E402,F401  (fake kernels of the torch ops)
from .errors import ConfigError, DeviceFallbackWarning, DeviceUnavailableError, ExportError, TrainingError  # noqa: E402
from .device.select import (  # noqa: E402
    DeviceChoice,
    PrecisionPolicy,
    device_facts,
    memory_stats,
    resolve_precision,
    select_device,
)
from . import data  # noqa: E402
from .cam import CAM, CamResult, gradcam  # noqa: E402
from .config import TrainConfig, load_config  # noqa: E402
from .data.loader import DataLoader  # noqa: E402
from .device.doctor import doctor  # noqa: E402
from .evaluation.evaluate import evaluate  # noqa: E402
from .evaluation.export import export  # noqa: E402
from .evaluation.load import LoadedModel, load  # noqa: E402
from .evaluation.predict import Predictions, predict  # noqa: E402
from .evaluation.run_report import write_report  # noqa: E402
from .train import TrainResult, train  # noqa: E402
from .training.callbacks import Callback  # noqa: E402

__version__ = _build_info.GPUCORE_VERSION

__all__ = [
    "CAM",
    "Callback",
    "CamResult",
    "ConfigError",
    "DataLoader",
    "DeviceChoice",
    "DeviceFallbackWarning",
    "DeviceUnavailableError",
    "ExportError",
    "LoadedModel",
    "PrecisionPolicy",
    "Predictions",
    "TrainConfig",
    "TrainResult",
    "TrainingError",
    "__version__",
    "data",
    "device_facts",
    "doctor",
    "export",
    "gradcam",
    "load",
    "evaluate",
    "write_report",
    "load_config",
    "memory_stats",
    "predict",
    "resolve_precision",
    "select_device",
    "train",
]
