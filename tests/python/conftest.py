import collections
import gzip
import json
import os
import pathlib
import struct
import sys
import time

# torch's OpenMP threads sleep at once when idle instead of spinning first (read when torch loads OpenMP, so set
# before importing it; the processes the tests start inherit it): where other jobs share the cores, a thread that
# spins holds the core its peer needs, and every small op's barrier waits on it (test_callbacks.py: 30 s instead of
# 9 s under load 5 on 2 cores; the same 4 s on a quieter machine). Thread counts, and so every value, are unchanged.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn

from gpucore import _C
from gpucore.data.png import encode_png
from gpucore.device import select as gdevice


# torchvision (and timm, which imports it) for the tests that use their models, also where torchvision's compiled
# ops cannot load next to this torch (a CPU-only torch 2.13): bench.common's import_torchvision (the benchmarks need it
# too) defines the two op schemas its import needs, in a torch.library.Library that lives as long as the process.
# gpucore itself does not: a user with such a torchvision is told what is wrong and the pip command that fixes it
# (models/torchvision_build.py), which test_runs_never_mix checks in a fresh interpreter, without this stand-in.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))  # the checkout's root, for the bench package
from bench.common import import_torchvision  # noqa: E402

try:
    import_torchvision()
except ImportError:
    pass  # not installed: the tests that need it skip


def resident_bytes() -> int:
    """The process's memory in use, for leak tests: garbage collected first, and what glibc's arenas hold freed
    given back to the system (malloc_trim), so the resident set is what is in use. What survives the collection is
    frozen out of the collector's reach (gc.freeze), so the next call's collection reads only what was made since
    (late in the suite a full collection took 0.8 s, 17 s of one leak test's 21 calls): a leak test's action makes
    its garbage after its first call, and that is collected at every call."""
    import ctypes
    import gc

    gc.collect()
    gc.freeze()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
    return gdevice.memory_stats("cpu")["allocated"]


class Pairs(torch.utils.data.Dataset):
    """A plain torch Dataset of (features, label) pairs: no tensors gpucore could see through."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, index):
        return self.x[index], int(self.y[index])


def settled(read, expected, seconds: float = 2.0):
    """read() once it returns `expected` or `seconds` pass: a thread pthread_join has returned for is still listed
    (/proc/self/task, the status' thread count) until the kernel has reaped it, a moment later; one never joined
    stays."""
    deadline = time.monotonic() + seconds
    while read() != expected and time.monotonic() < deadline:
        time.sleep(0.01)
    return read()


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


def pytest_configure(config):
    """Ctrl-C as Python sets it up (KeyboardInterrupt), also where the suite was started in the background by a
    shell without job control (`cmd &`, nohup), which starts it with SIGINT ignored: gpucore leaves a SIGINT handler
    the program set (SIG_IGN too), so the tests of Ctrl-C, in this process and in the processes it starts (which
    inherit an ignored signal), would see none."""
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)
    _BACKGROUND.update(config=config, configured=time.monotonic())


def pytest_collection_finish(session):
    """What collection imported (torch, gpucore, every test module) lives as long as the session: frozen out of the
    collector's reach, and young collections made rarer, the garbage collector took 1.8 CPU-s instead of 4.1 over four
    test files (38 s of tests, 2-core Xeon). Refcounting frees as before; leak tests collect first (resident_bytes)."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 50, 10)
    _start_prestarted_jobs(session)


def pytest_runtest_setup(item):
    if item.get_closest_marker("needs_cuda") is not None and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: this machine has no CUDA device")


@pytest.fixture(autouse=True)
def _draw_reports_only_where_asked(request, monkeypatch):
    """Drawing a run's report takes seconds per run: only tests marked draws_report (the report's own) draw it,
    the other tests' training runs skip it (config key report stays true for them)."""
    if request.node.get_closest_marker("draws_report") is None:
        monkeypatch.setattr(sys.modules["gpucore.train"], "report_after_training", lambda run: None)


@pytest.fixture
def figures_skipped(monkeypatch):
    """gpucore.evaluate's and gpucore report's pages without their figures (the confusion matrices, the image grids,
    the top losses' Grad-CAM: most of an evaluation's time): for a test that checks an evaluation's numbers, rows and
    files but no figure. A figure that fails is only a warning on the page, so no check of such a test depends on it;
    the report tests (draws_report) draw every figure."""
    from gpucore.report.page import Page

    monkeypatch.setattr(Page, "figure", lambda self, heading, name, draw, note="": None)


# ---- files for the readers and data sets (test_data_readers, test_datasets) ------------------------------------------

def write_idx(path, array, compress=False):
    codes = {np.uint8: 0x08, np.int8: 0x09, np.int16: 0x0B, np.int32: 0x0C, np.float32: 0x0D, np.float64: 0x0E}
    header = struct.pack(">BBBB", 0, 0, codes[array.dtype.type], array.ndim)
    header += b"".join(struct.pack(">I", d) for d in array.shape)
    payload = header + array.astype(array.dtype.newbyteorder(">")).tobytes()
    with (gzip.open if compress else open)(path, "wb") as handle:
        handle.write(payload)


def write_png(path, image):
    with open(path, "wb") as handle:
        handle.write(encode_png(image))


# ---- the C++ engine built from its pieces (the engine tests, test_ema, test_train_step_ops) --------------------------

def schedule(kind, **values):
    config = _C.ScheduleConfig()
    config.kind = kind
    for name, value in values.items():
        setattr(config, name, value)
    return config


def engine(params, *, lr=1.0, scaler=False, clip=0.0, kind="sgd", accumulate=1, loss="cross_entropy", heads=0,
           label_smoothing=0.0, ignore_index=-100, sequence_lengths=False, temporal_stride=1):
    config = _C.EngineConfig()
    config.device = torch.device("cpu")
    config.accumulate_grad_batches = accumulate
    config.clip_grad_norm = clip
    config.log_every_n_steps = 1
    config.max_nonfinite_steps = 100
    loss_config = _C.LossConfig()
    loss_config.kind = loss
    loss_config.heads = heads
    loss_config.label_smoothing = label_smoothing
    loss_config.ignore_index = ignore_index
    loss_config.sequence_lengths, loss_config.temporal_stride = sequence_lengths, temporal_stride
    config.loss = loss_config
    optimizer = _C.OptimizerConfig()
    optimizer.kind = kind
    optimizer.momentum = 0.0
    config.optimizer = optimizer
    config.schedule = schedule("step", base_lr=lr, total_steps=100, step_size=1, gamma=0.5)
    scaler_config = _C.GradScalerConfig()
    scaler_config.enabled = scaler
    scaler_config.growth_interval = 2
    config.scaler = scaler_config
    return _C.Engine([_C.ParamGroup(params, weight_decay=0.0)], config)


def batches(x, y, batch_size):
    return _C.TensorBatches(x, y, batch_size, False, False, 0, torch.device("cpu"))


# ---- small gpucore.train runs (test_train, test_train_matches_torch, _run_dir_and_resume, _out_of_memory) ------------

# 4 steps of 64 an epoch: what a test of the loop's behaviour (its files, early stopping, resumes) needs; a test whose
# check needs more steps or learning sets its own data_kwargs.
SMALL = {"data": "synthetic_fashion", "data_kwargs": {"train_size": 256, "val_size": 64, "seed": 3}, "progress": False,
         "batch_size": 64}


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 5))


def tensors(n=128, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n, 16, generator=generator), torch.randint(0, 5, (n,), generator=generator)


def plain(tmp_path, **overrides):
    base = dict(run_dir=str(tmp_path), progress=False, shuffle=False, normalize=False, schedule="constant",
                seed=0, epochs=1, device="cpu", precision="32")  # float32: compared with float32 torch loops
    base.update(overrides)
    return base


# ---- shared trained runs: trained once per session, for the tests that only read a finished run ---------------------
# A test that reads a run (its report, checkpoints, evaluate, predict, export) takes one of these instead of training
# its own. They are read-only: a test that writes into a run directory (gpucore report, a renamed checkpoint) works on
# run_copy(run, tmp_path). The session's end checks that no test changed them. A test that checks training itself (its
# numbers, a resume, a signal) trains its own run.

FASHION_KWARGS = {"train_size": 512, "val_size": 200, "seed": 5}
FASHION_RUN = dict(data="synthetic_fashion", data_kwargs=FASHION_KWARGS, epochs=2, lr=3e-3, batch_size=64,
                   crop_padding=2, hflip=True, progress=False, device="cpu", precision="32", report=True)
CAPTCHA_KWARGS = {"train_size": 256, "val_size": 64, "seed": 2}
CAPTCHA_RUN = dict(model="captcha_cnn", loss="multilabel_soft_margin", data="synthetic_captcha",
                   data_kwargs=CAPTCHA_KWARGS, heads=4, batch_size=32, top_k=0, epochs=1, progress=False, device="cpu",
                   precision="32", report=True)


def _contents(folder):
    """Every file under `folder` by relative path, with its bytes' digest."""
    import hashlib

    root = pathlib.Path(folder)
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file()}


def _shared_run(tmp_path_factory, name, config):
    """gpucore.train(config) in a session folder of its own, with its report; after the session, the run directory
    must hold what it held when the run ended."""
    import gpucore

    result = gpucore.train(dict(config, run_dir=str(tmp_path_factory.mktemp(name)), name=name))
    ended = _contents(result.run_dir)
    yield result
    now = _contents(result.run_dir)
    changed = sorted(path for path in set(ended) | set(now) if ended.get(path) != now.get(path))
    assert not changed, f"a test changed the shared run {name} (use run_copy): {changed}"


@pytest.fixture(scope="session")
def fashion_run(tmp_path_factory):
    """A finished classification run (FASHION_RUN: the synthetic Fashion set, 2 epochs in float32, with crop and flip
    augmentation, its report drawn): its TrainResult. Read-only."""
    yield from _shared_run(tmp_path_factory, "fashion", FASHION_RUN)


@pytest.fixture(scope="session")
def captcha_run(tmp_path_factory):
    """A finished multi-head run (CAPTCHA_RUN: 4 characters of 36 classes, one epoch, its report drawn): its
    TrainResult. Read-only."""
    yield from _shared_run(tmp_path_factory, "captcha", CAPTCHA_RUN)


# Process jobs the tests wait for, run in the background from the end of collection. On 2 cores the suite's own
# process keeps one to one and a half cores busy (its CPU time is 1.2-1.5x its wall time); these jobs, which only
# start processes and wait for them, run on what is left instead of in their tests. A test names its job with
# @pytest.mark.prestarted(job=J), J(folder) -> a value, and reads that value from its `prestarted` fixture (what the job
# raised is raised there: its assertions, a skip). Jobs run one at a time, in the order their tests come; a test
# that comes before its job has started runs it itself.
class PrestartedJobs:
    def __init__(self, jobs):
        import threading

        self._lock = threading.Lock()
        self._waiting = list(jobs)  # not started yet
        self._outcomes = {}  # job -> its Future, once started
        self._folders = []
        self._worker = threading.Thread(target=self._run_waiting, name="prestarted jobs", daemon=True)
        self._worker.start()

    def _take(self, job=None):
        """The next waiting job (or `job`, if it is waiting) with its Future, now marked started; None if none."""
        from concurrent.futures import Future

        with self._lock:
            if job is None:
                if not self._waiting:
                    return None
                job = self._waiting[0]
            elif job in self._outcomes:  # started already
                return None
            if job in self._waiting:
                self._waiting.remove(job)
            self._outcomes[job] = Future()
            return job, self._outcomes[job]

    def _run(self, job, outcome):
        import tempfile

        folder = pathlib.Path(tempfile.mkdtemp(prefix=f"gpucore-{job.__name__}-"))
        self._folders.append(folder)
        try:
            outcome.set_result(job(folder))
        except BaseException as error:  # pytest's skip is a BaseException: the test skips as it would have
            outcome.set_exception(error)

    def _run_waiting(self):
        while (taken := self._take()) is not None:
            self._run(*taken)

    def result(self, job):
        taken = self._take(job)
        if taken is not None:  # its test came first
            self._run(*taken)
        return self._outcomes[job].result()

    def close(self):
        """At the session's end (a test run with -x, Ctrl-C): no job starts any more, the processes of a running one
        are killed, then the jobs' folders removed."""
        import shutil

        import psutil

        with self._lock:
            self._waiting.clear()
        if self._worker.is_alive():
            for child in psutil.Process().children(recursive=True):
                child.kill()
            self._worker.join()
        for folder in self._folders:
            shutil.rmtree(folder, ignore_errors=True)


_PRESTARTED = {}


def _start_prestarted_jobs(session):
    jobs = [marker.kwargs["job"] for item in session.items if (marker := item.get_closest_marker("prestarted"))]
    if "items" in _BACKGROUND:  # last: it starts when the jobs before it, and the busiest part of the suite, are done
        _BACKGROUND["job"] = _background_pytest(session, _BACKGROUND["items"])
        jobs.append(_BACKGROUND["job"])
    if hasattr(session.config, "workerinput"):  # a pytest-xdist worker, which runs some of the tests: each its own job
        jobs = []
    if not session.config.option.collectonly:
        _PRESTARTED["jobs"] = PrestartedJobs(dict.fromkeys(jobs))  # each once, in the tests' order


def pytest_sessionfinish(session):
    if "jobs" in _PRESTARTED:
        _PRESTARTED.pop("jobs").close()


@pytest.fixture
def prestarted(request):
    """What the job of the test's @pytest.mark.prestarted(job=...) returned (see PrestartedJobs)."""
    marker = request.node.get_closest_marker("prestarted")
    assert marker is not None, "the test needs @pytest.mark.prestarted(job=...)"
    return _PRESTARTED["jobs"].result(marker.kwargs["job"])


# ---- a second pytest process for some test files -----------------------------------------------------------------

# Once its process jobs were done (about 500 s into the suite on a 2-core AMD EPYC, 2026-11-30), the suite's own
# process kept one of the two cores busy: its last 430 s ran at 1.0 core. The tests of these files run in a second
# pytest process instead, started as the last prestarted job: in-process tests (no processes, jobs or shared session
# runs of their own). This session moves them to its end and reports what that process reported for each (outcome,
# output, duration, warnings: as pytest-xdist relays a worker's); its summary says when that process ran and how long
# the session waited for it, which says where to move files when one side ends much later than the other. Where a
# session runs only these files, under --pdb or pytest-xdist, or with GPUCORE_TESTS_BACKGROUND set (file names,
# comma-separated; empty: none), their tests run here as any other.
BACKGROUND_FILES = (
    "test_batch_cursor_op.py", "test_callbacks.py", "test_class_folders.py", "test_class_imbalance.py",
    "test_conv_pool_norm.py", "test_crop_flip_augment.py", "test_cslr_models.py", "test_data_plan.py",
    "test_datasets.py", "test_ema.py", "test_evaluate_data.py", "test_finetune.py", "test_frozen_layers.py",
    "test_mask_values.py", "test_metric_definitions.py", "test_mixed_size_photos.py", "test_pool_norm.py",
    "test_python_runs.py", "test_redact.py", "test_segmentation_models.py", "test_segmentation_runs.py",
    "test_sign_layouts.py", "test_sign_report.py", "test_sign_runs.py", "test_torch_datasets.py",
    "test_transforms_api.py", "test_transforms_color.py", "test_transforms_color_policies.py",
    "test_transforms_geometric.py", "test_tta.py", "test_video_data.py",
)
_BACKGROUND = {}  # "items": this session's tests that the second process runs; "job": the job that runs them
# Set in the second process's environment: its folder, holding items.txt (the node ids it runs) and reports.pickle.
_BACKGROUND_FOLDER = "GPUCORE_TESTS_BACKGROUND_FOLDER"


def _background_files():
    named = os.environ.get("GPUCORE_TESTS_BACKGROUND")
    return BACKGROUND_FILES if named is None else tuple(name for name in named.split(",") if name)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    if _BACKGROUND_FOLDER in os.environ:  # the second process: only the tests the session handed it
        chosen = set((pathlib.Path(os.environ[_BACKGROUND_FOLDER]) / "items.txt").read_text().split("\n"))
        items[:] = [item for item in items if item.nodeid in chosen]
        return
    files = _background_files()
    background = [item for item in items if item.path.name in files]
    if background and len(background) < len(items) and not config.getvalue("usepdb") \
            and not hasattr(config, "workerinput"):  # not in a pytest-xdist worker, which runs some of the tests
        items[:] = [item for item in items if item.path.name not in files] + background
        _BACKGROUND["items"] = background


def _background_pytest(session, items):
    """The prestarted job that runs `items` in a second pytest process: (its exit status, its output, node id ->
    its reports, its warnings)."""
    import pickle
    import subprocess

    config = session.config
    basetemp = config._tmp_path_factory.mktemp("background", numbered=False)

    arguments = config.invocation_params.args
    plugins = [f"-p{name}" for word, name in zip(("",) + arguments, arguments) if word == "-p"] + \
        [word for word in arguments if word.startswith("-p") and word != "-p"]  # this session's -p NAME options

    def background_pytest(folder):
        _BACKGROUND["started"] = time.monotonic()
        (folder / "items.txt").write_text("\n".join(item.nodeid for item in items))
        files = list(dict.fromkeys(str(item.path) for item in items))
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugins,
                               *(["-c", str(config.inipath)] if config.inipath else []), f"--rootdir={config.rootpath}",
                               f"--basetemp={basetemp}", *files],
                              cwd=str(config.invocation_params.dir), capture_output=True, text=True,
                              env=dict(os.environ, **{_BACKGROUND_FOLDER: str(folder)}))
        reports, warnings = collections.defaultdict(list), []
        if (folder / "reports.pickle").exists():
            with open(folder / "reports.pickle", "rb") as handle:
                while True:
                    try:
                        kind, record = pickle.load(handle)
                    except EOFError:
                        break
                    if kind == "report":
                        reports[record["nodeid"]].append(config.hook.pytest_report_from_serializable(config=config,
                                                                                                    data=record))
                    else:
                        warnings.append(record)
        _BACKGROUND["ended"] = time.monotonic()
        return done.returncode, done.stdout + done.stderr, reports, warnings

    return background_pytest


def pytest_terminal_summary(terminalreporter):
    """When the second process ran, when it did, and how long this session waited for it: where to move files
    between the two when one waits for the other."""
    if "ended" in _BACKGROUND:
        start, end, asked = (_BACKGROUND[key] - _BACKGROUND["configured"] for key in ("started", "ended", "asked"))
        terminalreporter.write_line(
            f"second pytest process: {len(_BACKGROUND['items'])} tests in "
            f"{len({item.path for item in _BACKGROUND['items']})} files, from {start:.0f} s to {end:.0f} s; this "
            f"process's own tests ended at {asked:.0f} s, then waited {max(0.0, end - asked):.0f} s for it")


def _write_background_record(kind, record):
    import pickle

    with open(pathlib.Path(os.environ[_BACKGROUND_FOLDER]) / "reports.pickle", "ab") as handle:
        pickle.dump((kind, record), handle)


def pytest_runtest_logreport(report):
    if _BACKGROUND_FOLDER in os.environ:
        config = _BACKGROUND["config"]
        _write_background_record("report", config.hook.pytest_report_to_serializable(config=config, report=report))


def pytest_warning_recorded(warning_message, when, nodeid, location):
    if _BACKGROUND_FOLDER in os.environ:
        import pickle
        import warnings

        message = warning_message.message
        try:
            pickle.dumps(message)
        except Exception:  # a warning holding what cannot travel: its text
            message = str(message)
        _write_background_record("warning", dict(
            warning_message=warnings.WarningMessage(message, warning_message.category, warning_message.filename,
                                                    warning_message.lineno, line=warning_message.line),
            when=when, nodeid=nodeid, location=location))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """A test the second process ran: its reports, as if it had run here, then the teardown of this session's
    fixtures that the next test does not share (as after any test)."""
    if item not in _BACKGROUND.get("items", ()):
        return None
    from _pytest.outcomes import Exit
    from _pytest.reports import TestReport
    from _pytest.runner import CallInfo

    _BACKGROUND.setdefault("asked", time.monotonic())
    returncode, output, reports, warnings = _PRESTARTED["jobs"].result(_BACKGROUND["job"])
    if not _BACKGROUND.get("warned"):  # once, at its first test
        _BACKGROUND["warned"] = True
        for warning in warnings:
            item.config.hook.pytest_warning_recorded.call_historic(kwargs=warning)
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    own = {report.when: report for report in reports.get(item.nodeid, ())}
    missing = "setup" if "setup" not in own else "call" if own["setup"].passed and "call" not in own else None
    if missing:  # it ended before this test did
        own[missing] = TestReport(item.nodeid, item.location, {}, "failed", when=missing,
                                  longrepr=f"the second pytest process (exit status {returncode}) ended before this "
                                           f"test's {missing} did; its output ends:\n{output[-5000:]}")
    for when in ("setup", "call"):
        if when in own:
            item.ihook.pytest_runtest_logreport(report=own[when])
    # pytest's own teardown step, without the hooks that undo a set-up this session did not make (capture, logging)
    teardown = TestReport.from_item_and_call(item, CallInfo.from_call(
        lambda: item.session._setupstate.teardown_exact(nextitem), "teardown", reraise=(Exit, KeyboardInterrupt)))
    item.ihook.pytest_runtest_logreport(report=teardown if teardown.failed or "teardown" not in own else own["teardown"])
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def bench_all_quick(folder):
    """`python -m bench all --quick --json FILE` (seconds of every benchmark; about 50 s on one core): (its JSON
    report, its stdout). test_examples checks the runner and every bench's result; test_scale_bench reads scale's
    result and printed table as its quick form (the same options), instead of training them again."""
    import subprocess

    require("PIL")
    done = subprocess.run([sys.executable, "-m", "bench", "all", "--quick", "--json", str(folder / "all.json")],
                          cwd=str(pathlib.Path(__file__).resolve().parents[2]), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((folder / "all.json").read_text()), done.stdout


def kill_trials(*args):
    """tests/trials/kill_runs.py ARGS in a process of its own, for a prestarted job: (its exit status, what it
    printed)."""
    import subprocess

    script = pathlib.Path(__file__).resolve().parents[1] / "trials" / "kill_runs.py"
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=900)
    return done.returncode, done.stdout + done.stderr[-3000:]


def run_together(folder, calls):
    """For a prestarted job: each of `calls` (key -> (function, *arguments)) called as function(its own new folder,
    folder/KEY (a tuple's parts joined by "_"), *arguments), each in a thread of its own, all at once; returns when
    every one has ended, key -> its Future, whose .result() gives its value or raises what it raised (its assertions)
    in the test that takes it. For process scenarios that mostly wait (process starts, sleeps, a peer's timeout):
    together they take about the time of the longest on 2 cores."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(calls)) as pool:
        futures = {}
        for key, (function, *arguments) in calls.items():
            own = folder / "_".join(map(str, key if isinstance(key, tuple) else (key,)))
            own.mkdir()
            futures[key] = pool.submit(function, own, *arguments)
    return futures


def run_copy(run, folder):
    """A copy of a shared run's directory under `folder`, for a test that writes into it: its path."""
    import shutil

    copy = pathlib.Path(folder) / os.path.basename(run.run_dir)
    shutil.copytree(run.run_dir, copy)
    return copy


def gpucore_process(*args, cwd=None):
    """`python -m gpucore ARGS` in a process of its own (from `cwd`), for a test of what the process itself does: its
    subprocess.CompletedProcess (text stdout and stderr). Tests import it with `from conftest import gpucore_process`."""
    import subprocess

    return subprocess.run([sys.executable, "-m", "gpucore", *map(str, args)], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


def gpucore_command(capsys, *args):
    """`gpucore ARGS` run in this process (cli.main, what the gpucore command runs), for a test of what a command does
    on a run: its exit status, stdout and stderr as a subprocess.CompletedProcess (`returncode`, `stdout`, `stderr`). A
    gpucore process would start torch again, seconds each; the tests of the command's process itself (the entry
    point, signals, a fresh interpreter's imports) start one. An exception the command lets out fails the test, as a
    traceback on the process' stderr would. Tests import it with `from conftest import gpucore_command`."""
    import subprocess

    from gpucore import cli

    capsys.readouterr()  # what the test printed before: not the command's
    path = list(sys.path)
    try:
        status = cli.main([str(arg) for arg in args])
    finally:
        sys.path[:] = path  # the command appends its current folder, as the gpucore process would for itself
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["gpucore", *args], status, out, err)


# ---- shared checks: bitwise states, resumed runs, memory growth ------------------------------------------------------

def assert_states_equal(actual, expected, keys=None, label=None):
    """Bitwise equality of two state dicts (or modules: their state_dict()): the same names, and under each name a
    tensor of the same dtype that torch.equal finds equal to the other's. Fails naming the first tensor that differs
    and how many of its values differ. keys: compare only these names (each must be in both). label: what the states
    are, put before the failure's message. Tests import it with `from conftest import assert_states_equal`."""
    actual = actual.state_dict() if isinstance(actual, torch.nn.Module) else actual
    expected = expected.state_dict() if isinstance(expected, torch.nn.Module) else expected
    prefix = f"{label}: " if label else ""
    if keys is None:
        missing = [name for name in expected if name not in actual]
        unexpected = [name for name in actual if name not in expected]
        assert not missing and not unexpected, f"{prefix}the names differ: missing {missing}, unexpected {unexpected}"
        keys = list(expected)
    for name in keys:
        assert name in actual and name in expected, f"{prefix}{name!r} is not in both states"
        ours, theirs = actual[name], expected[name]
        if not isinstance(ours, torch.Tensor) or not isinstance(theirs, torch.Tensor):
            assert ours == theirs, f"{prefix}{name}: {ours!r} != {theirs!r}"
            continue
        if ours.dtype == theirs.dtype and torch.equal(ours, theirs):
            continue
        if ours.shape != theirs.shape:
            detail = f"shape {tuple(ours.shape)} != {tuple(theirs.shape)}"
        elif ours.dtype != theirs.dtype:
            detail = f"dtype {ours.dtype} != {theirs.dtype}"
        else:
            detail = f"{int((ours != theirs).sum())} of {ours.numel()} values differ"
        raise AssertionError(f"{prefix}{name}: {detail}")


def train_interrupted(*args, **kwargs):
    """The TrainResult of gpucore.train(*args, **kwargs) for a run that Ctrl-C, a stop signal or a callback's
    KeyboardInterrupt stops: train() raises a KeyboardInterrupt, which holds it. Tests import it with
    `from conftest import train_interrupted`."""
    import gpucore

    with pytest.raises(KeyboardInterrupt) as stopped:
        gpucore.train(*args, **kwargs)
    return stopped.value.result


def rows_without_times(rows):
    """metrics.jsonl rows (dicts, or the file's lines) without what the clock measures (epoch_time_s, samples_per_s,
    val_time_s): what a resumed run's rows must share with the uninterrupted run's."""
    return [{k: v for k, v in (json.loads(row) if isinstance(row, str) else row).items() if not k.endswith("_s")}
            for row in rows]


def assert_resume_matches(tmp_path, config, stop, straight=None, name="b", given=dict):
    """The resume check: gpucore.train(config) uninterrupted in run_dir tmp_path/a (or `straight`, that run, when
    given), then in tmp_path/`name` stopped by the callback `stop` (the run must end "interrupted") and resumed with
    resume: auto; the resumed model must equal the uninterrupted one bitwise. given(): gpucore.train's other keyword
    arguments for each of the runs, made anew for each (model=..., train_data=...). Returns (straight, stopped,
    resumed)."""
    import gpucore

    if straight is None:
        straight = gpucore.train(dict(config, run_dir=str(tmp_path / "a")), **given())
    stopped = train_interrupted(dict(config, run_dir=str(tmp_path / name)), callbacks=[stop], **given())
    assert stopped.status == "interrupted", f"{name}: the stopped run ended {stopped.status!r}"
    resumed = gpucore.train(dict(config, run_dir=str(tmp_path / name), resume="auto"), **given())
    assert_states_equal(resumed.model, straight.model, label=f"{name}: resumed != uninterrupted")
    return straight, stopped, resumed


def assert_no_growth(action, repeats, tolerance_bytes, warmup=0, what="", each=True):
    """The leak check: runs action() `warmup` times (what the first calls leave for good: caches, the C library's
    arenas), then `repeats` times, and fails when the process's memory in use (resident_bytes) grew by
    tolerance_bytes or more over the repeats. each: measured after every repeat (all shown on failure), else after
    the last only. `what` ends the failure's message. Returns the growth measured (bytes)."""
    for _ in range(warmup):
        action()
    before = resident_bytes()
    grown = []
    for index in range(repeats):
        action()
        if each or index == repeats - 1:
            grown.append(resident_bytes() - before)
    shown = grown if each else grown[-1]
    assert grown[-1] < tolerance_bytes, f"resident set grew by {shown} bytes {what}"
    return grown


def random_norm(channels, seed, momentum=0.1, dtype=torch.float32):
    """A BatchNorm2d with random parameters and running statistics (the fused pool + norm ops' tests)."""
    torch.manual_seed(seed)
    norm = nn.BatchNorm2d(channels, momentum=momentum).to(dtype)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
        norm.running_mean.uniform_(-0.5, 0.5)
        norm.running_var.uniform_(0.5, 2.0)
    return norm


def ran_ops(model, x) -> collections.Counter:
    """How often model(x) ran each op, by name (torch's profiler): which fused ops a forward took."""
    with torch.profiler.profile() as prof:
        model(x)
    return collections.Counter(event.name for event in prof.events())
