"""The suite's session jobs, a pytest plugin (conftest.py loads it; it imports nothing of torch or gpucore, so
test_session_jobs.py runs it in small pytest processes of its own):

- prestarted jobs: process jobs the tests wait for (trials, notebooks, `bench all --quick`), run in the background
  from the end of collection (PrestartedJobs, marker prestarted, fixture `prestarted`);
- a second pytest process that runs the in-process test files of BACKGROUND_FILES, their reports shown in the
  session as if they had run there.
"""
import collections
import os
import pathlib
import sys
import time

import pytest


def pytest_configure(config):
    _BACKGROUND.update(config=config, configured=time.monotonic())


def pytest_collection_finish(session):
    _start_prestarted_jobs(session)


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
