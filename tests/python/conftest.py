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

import forked_python  # noqa: E402
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

# The prestarted jobs and the second pytest process (marker prestarted, fixture `prestarted`, BACKGROUND_FILES).
pytest_plugins = ("session_jobs",)


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


def pytest_collection_finish(session):
    """What collection imported (torch, gpucore, every test module) lives as long as the session: frozen out of the
    collector's reach, and young collections made rarer, the garbage collector took 1.8 CPU-s instead of 4.1 over four
    test files (38 s of tests, 2-core Xeon). Refcounting frees as before; leak tests collect first (resident_bytes)."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 50, 10)


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


def bench_all_quick(folder):
    """`python -m bench all --quick --json FILE` (seconds of every benchmark; about 50 s on one core): (its JSON
    report, its stdout). test_examples checks the runner and every bench's result; test_scale_bench reads scale's
    result and printed table as its quick form (the same options), instead of training them again."""
    require("PIL")
    done = forked_python.run([sys.executable, "-m", "bench", "all", "--quick", "--json", str(folder / "all.json")],
                             cwd=str(pathlib.Path(__file__).resolve().parents[2]), capture_output=True, text=True,
                             timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((folder / "all.json").read_text()), done.stdout


def kill_trials(*args):
    """tests/trials/kill_runs.py ARGS in a process of its own, for a prestarted job: (its exit status, what it
    printed)."""
    script = pathlib.Path(__file__).resolve().parents[1] / "trials" / "kill_runs.py"
    done = forked_python.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=900)
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
    """`python -m gpucore ARGS` in a process of its own (from `cwd`; forked_python's), for a test of what the process
    itself does: its subprocess.CompletedProcess (text stdout and stderr). Tests import it with `from conftest import
    gpucore_process`."""
    return forked_python.run([sys.executable, "-m", "gpucore", *map(str, args)], capture_output=True, text=True,
                             timeout=600, cwd=cwd)


def gpucore_command(capsys, *args):
    """`gpucore ARGS` run in this process (cli.main, what the gpucore command's cli.command runs), for a test of what a
    command does on a run: its exit status, stdout and stderr as a subprocess.CompletedProcess (`returncode`, `stdout`,
    `stderr`). A gpucore process would start torch again, seconds each; the tests of the command's process itself (the
    entry point, signals, a fresh interpreter's imports) start one. An exception the command lets out fails the test, as
    a traceback on the process' stderr would. Tests import it with `from conftest import gpucore_command`."""
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
