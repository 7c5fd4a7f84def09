"""forked_python (the processes the tests fork from a server that imported torch) against subprocess: the same command
must see the same process, as far as the module says."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import forked_python

pytestmark = pytest.mark.slow  # spawns processes

# What a process sees of how it was started, printed as JSON; the exit status from $EXIT_WITH.
PROBE = """
import json, os, random, signal, sys
import numpy, torch
print(json.dumps({"argv": sys.argv, "path": sys.path, "name": __name__, "file": globals().get("__file__"),
                  "spec": getattr(globals().get("__spec__"), "name", None), "cwd": os.getcwd(),
                  "threads": torch.get_num_threads(), "variable": os.environ.get("PROBE_VARIABLE"),
                  "session_leader": os.getsid(0) == os.getpid(), "stdin": sys.stdin.read(),
                  "gpucore_imported": "gpucore" in sys.modules, "sigint": repr(signal.getsignal(signal.SIGINT)),
                  "sigchld": repr(signal.getsignal(signal.SIGCHLD))}))
print(json.dumps({"random": random.random(), "numpy": float(numpy.random.random()), "parent": os.getppid()}),
      file=sys.stderr)
sys.exit(int(os.environ.get("EXIT_WITH", "0")))
"""


def started(args, **kwargs):
    """`args` started by subprocess and by forked_python, both at once (they mostly wait on torch's import)."""
    return [popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
            for popen in (subprocess.Popen, forked_python.Popen)]


def finished(processes):
    """For each of started()'s processes: what it printed, its stderr and its exit status."""
    seen = []
    for process in processes:
        with process:
            out, err = process.communicate("what came on stdin", timeout=120)
        seen.append((out, err, process.returncode))
    return seen


def both(args, **kwargs):
    return finished(started(args, **kwargs))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("forked")
    (folder / "scripts").mkdir()
    (folder / "scripts" / "probe.py").write_text(PROBE)
    (folder / "package").mkdir()
    (folder / "package" / "__init__.py").write_text("")
    (folder / "package" / "probe.py").write_text(PROBE)
    return folder


def test_a_script_module_and_code_see_what_a_fresh_process_sees(folder):
    env = dict(os.environ, PROBE_VARIABLE="set", OMP_NUM_THREADS="1", EXIT_WITH="3",
               PYTHONPATH=os.pathsep.join(["relative", "", str(folder / "elsewhere"), ""]))
    commands = {"script": [sys.executable, "scripts/probe.py", "an", "argument"],
                "module": [sys.executable, "-m", "package.probe", "--flag"],
                "code": [sys.executable, "-c", PROBE, "x"]}
    running = {kind: started(args, cwd=folder, env=env, start_new_session=kind == "script")
               for kind, args in commands.items()}
    for kind, processes in running.items():
        (fresh_out, fresh_err, fresh_status), (forked_out, forked_err, forked_status) = finished(processes)
        assert fresh_status == forked_status == 3, (kind, fresh_err, forked_err)
        assert json.loads(forked_out) == json.loads(fresh_out), kind  # argv, sys.path, __main__, folder, threads ...
        fresh, forked = json.loads(fresh_err), json.loads(forked_err)
        assert fresh["parent"] == os.getpid() and forked["parent"] != os.getpid(), kind  # forked by the server
    fresh = json.loads(fresh_out)
    assert fresh["argv"][1:] == ["x"] and fresh["stdin"] == "what came on stdin" and fresh["threads"] == 1
    assert not fresh["gpucore_imported"]


def test_the_exit_status_and_threads_follow_the_process(folder):
    # A signal, an exception, Ctrl-C and an unset OMP_NUM_THREADS, each as a fresh process has them.
    sleeper = [sys.executable, "-c", "import sys, time; print('started', flush=True); time.sleep(60)"]
    for sent in (signal.SIGTERM, signal.SIGINT, signal.SIGKILL):
        statuses = []
        for popen in (subprocess.Popen, forked_python.Popen):
            process = popen(sleeper, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert process.stdout.readline() == "started\n"
            assert process.poll() is None
            process.send_signal(sent)
            statuses.append(process.wait(timeout=60))
            process.communicate()
        assert statuses[0] == statuses[1] == -sent, statuses  # Ctrl-C too: Python ends by SIGINT after the traceback
    env = {key: value for key, value in os.environ.items() if key != "OMP_NUM_THREADS"}
    (fresh_out, fresh_err, fresh_status), (forked_out, forked_err, forked_status) = both(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads()); raise ValueError('raised')"], env=env)
    assert fresh_status == forked_status == 1 and fresh_out == forked_out
    assert fresh_err.splitlines()[-1] == forked_err.splitlines()[-1] == "ValueError: raised"
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):  # killed at its timeout, as subprocess.run does
        forked_python.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=1)
    assert time.monotonic() - started < 20


def test_forked_processes_draw_their_own_random_numbers():
    draws = [json.loads(forked_python.run([sys.executable, "-c", PROBE], capture_output=True, text=True).stderr)
             for _ in range(2)]
    assert draws[0]["random"] != draws[1]["random"] and draws[0]["numpy"] != draws[1]["numpy"]


def test_what_torch_read_as_it_loaded_is_the_commands_own(folder):
    # ATEN_CPU_CAPABILITY is read once, as torch first dispatches: a command that sets it forks from a server of its
    # own, started with it, and gets the kernels it asked for, as a fresh process does.
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default")
    (fresh_out, _, fresh_status), (forked_out, _, forked_status) = both([sys.executable, "-c", code], env=env)
    assert fresh_status == forked_status == 0 and fresh_out == forked_out == "DEFAULT\n"
    parent = "import os; print(os.getppid())"
    assert int(forked_python.run([sys.executable, "-c", parent], env=env, capture_output=True, text=True).stdout) \
        != os.getpid()


def test_what_cannot_be_forked_starts_as_a_plain_process(folder):
    # Another program, a shell, a script that is not there: subprocess's own start, this process the parent.
    done = forked_python.run(["bash", "-c", "echo $PPID"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and int(done.stdout) == os.getpid()
    done = forked_python.run(f"{sys.executable} -c 'import os; print(os.getppid())'", shell=True, capture_output=True,
                             text=True, timeout=120)
    assert done.returncode == 0 and int(done.stdout) != os.getpid()  # the shell's child
    missing = forked_python.run([sys.executable, str(folder / "no_such_script.py")], capture_output=True, text=True,
                                timeout=120)
    assert missing.returncode == 2 and "can't open file" in missing.stderr


def test_a_client_that_leaves_mid_request_leaves_the_server_serving():
    # A Popen interrupted while it sent its command (Ctrl-C in a test) must not stop the server for the others.
    import socket
    import struct

    server = forked_python._Server.get(dict(os.environ))
    for sent in (b"", b"abc", struct.pack("!q", 100) + b"{"):
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(server.address)
        client.sendall(sent)
        client.close()
    done = forked_python.run([sys.executable, "-c", "import os; print(os.getppid())"], capture_output=True, text=True,
                             timeout=60)
    assert done.returncode == 0 and int(done.stdout) == server.process.pid


def test_a_servers_first_command_does_not_shape_the_path_of_the_next(monkeypatch):
    # A new server whose first command names site-packages on PYTHONPATH (test_messages' runs do): a later command
    # without PYTHONPATH still finds what is installed there, as a fresh process does.
    import gpucore

    monkeypatch.setattr(forked_python._Server, "_started", {})  # room for a fresh server (the others stay)
    # A variable of the keyed kind that no program reads gives these commands a server of their own: a prestarted job
    # (its thread runs beside this test) may start one for its commands meanwhile.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["LC_GPUCORE_FORKED_PYTHON_TEST"] = str(os.getpid())
    site = os.path.dirname(os.path.dirname(os.path.abspath(gpucore.__file__)))
    first = forked_python.run([sys.executable, "-c", "import gpucore, os; print(os.getppid())"],
                              env=dict(env, PYTHONPATH=site), capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    later = forked_python.run([sys.executable, "-c", "import gpucore, os; print(os.getppid())"], env=env,
                              capture_output=True, text=True, timeout=120)
    assert later.returncode == 0, later.stderr
    server = forked_python._Server._started[tuple(sorted(forked_python._loaded_at_start(env).items()))]
    assert int(first.stdout) == int(later.stdout) == server.process.pid  # both from the one new server
