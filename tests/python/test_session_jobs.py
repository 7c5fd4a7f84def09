"""The suite's second pytest process (session_jobs.BACKGROUND_FILES): the tests it runs are reported in the session
as they would have been had they run there (outcomes, failures with their output, skips, warnings), also when it
dies."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
pytestmark = pytest.mark.slow

HERE_TESTS = """
import os


def test_here():
    open(os.environ["PIDS"], "a").write(f"{os.getpid()}\\n")
"""
THERE_TESTS = """
import os
import warnings

import pytest


@pytest.fixture
def broken():
    raise RuntimeError("the fixture broke")


def test_passes():
    open(os.environ["PIDS"], "a").write(f"{os.getpid()}\\n")


def test_fails():
    print("printed before failing")
    assert [1, 2] == [1, 3]


def test_skips():
    pytest.skip("skipped for a reason")


def test_warns():
    warnings.warn("a warning from the second process", UserWarning)


def test_setup_fails(broken):
    pass


@pytest.mark.xfail(reason="known")
def test_xfails():
    assert False


def test_y_dies():
    if os.environ.get("DIE"):
        os._exit(3)


def test_z_after():
    pass
"""


def start(tmp_path, background, die=False):
    """pytest on the two files with the suite's session_jobs plugin, test_there.py in the second process when
    `background` names it, started: finish() reads (its output, the pids its tests ran in)."""
    folder = tmp_path / background.replace(".py", "") / ("die" if die else "live")
    (folder / "tests").mkdir(parents=True)
    (folder / "tests" / "test_here.py").write_text(HERE_TESTS)
    (folder / "tests" / "test_there.py").write_text(THERE_TESTS)
    env = {key: value for key, value in os.environ.items() if key != "GPUCORE_TESTS_BACKGROUND_FOLDER"}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")])), PIDS=str(folder / "pids"),
               GPUCORE_TESTS_BACKGROUND=background, **({"DIE": "1"} if die else {}))
    return folder, subprocess.Popen([sys.executable, "-m", "pytest", "-p", "session_jobs", "-p", "no:cacheprovider",
                                     "-rA", f"--rootdir={folder}", "tests"], cwd=folder, env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(started):
    folder, process = started
    output, _ = process.communicate(timeout=300)
    return output, (folder / "pids").read_text().split()


def summary(output):
    return output.strip().split("\n")[-1].strip("= ").split(" in ")[0]


def test_the_second_process_reports_as_this_one_would_and_its_death_fails_what_it_did_not_end(tmp_path):
    started = start(tmp_path, ""), start(tmp_path, "test_there.py", die=True)  # test_y_dies ends the second process
    (here, here_pids), (there, there_pids) = map(finish, started)
    assert len(set(here_pids)) == 1 and len(set(there_pids)) == 2  # test_here and test_passes apart
    assert summary(here) == "1 failed, 5 passed, 1 skipped, 1 xfailed, 1 warning, 1 error"
    assert summary(there) == "2 failed, 3 passed, 1 skipped, 1 xfailed, 1 warning, 2 errors"
    for output in (here, there):
        assert "FAILED tests/test_there.py::test_fails - assert [1, 2] == [1, 3]" in output
        assert "E         At index 1 diff: 2 != 3" in output and "printed before failing" in output
        assert "ERROR tests/test_there.py::test_setup_fails - RuntimeError: the fixture broke" in output
        assert "SKIPPED [1] tests/test_there.py:23: skipped for a reason" in output
        assert "XFAIL tests/test_there.py::test_xfails - known" in output
        assert "UserWarning: a warning from the second process" in output
    # In the session's order the second process's tests come last.
    order = re.findall(r"^PASSED tests/(\w+\.py)", there, re.M)
    assert order[0] == "test_here.py" and set(order[1:]) == {"test_there.py"}
    assert "the second pytest process (exit status 3) ended before this test's call did" in there
    assert re.search(r"^FAILED tests/test_there.py::test_y_dies - the second pytest", there, re.M)
    assert re.search(r"^ERROR tests/test_there.py::test_z_after - the second pytest", there, re.M)
