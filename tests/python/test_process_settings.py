"""gpucore.process_settings: malloc's thresholds set by gpucore.train once per process, the user's own choices
(GLIBC_TUNABLES, a preloaded allocator, GPUCORE_MALLOC_TUNING=0) left alone, and what ran recorded in
training_stats.json and said by gpucore doctor; and the gpucore command's exit, with its objects frozen out of the
garbage collector's last searches. Each case runs in a fresh process: the settings are process-wide."""
import json
import os
import platform
import subprocess
import sys
import textwrap

import pytest

import forked_python
from gpucore import process_settings

pytestmark = pytest.mark.slow  # spawns processes

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"

CHILD = textwrap.dedent("""
    import json, sys
    import gpucore
    result = gpucore.train({"data": "synthetic_fashion", "data_kwargs": {"train_size": 64, "val_size": 32},
                            "epochs": 1, "batch_size": 32, "run_dir": sys.argv[1], "progress": False,
                            "report": False, "loggers": []})
    with open(result.stats_path) as handle:
        print(json.dumps(json.load(handle)["process_settings"]))
""")


def settings_after_training(tmp_path, **environment):
    env = {key: value for key, value in os.environ.items()
           if key not in ("GPUCORE_MALLOC_TUNING", "GLIBC_TUNABLES", "LD_PRELOAD")}
    env.update(environment)
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])["malloc"]


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_training_tunes_malloc_and_records_it(tmp_path):
    malloc = settings_after_training(tmp_path)
    assert malloc["tuned"] is True and "GPUCORE_MALLOC_TUNING=0" in malloc["reason"]
    assert malloc["values"] == {"M_MMAP_THRESHOLD": 32 << 20, "M_TRIM_THRESHOLD": 1 << 30, "M_TOP_PAD": 256 << 20}


@pytest.mark.parametrize("environment, reason", [
    ({"GPUCORE_MALLOC_TUNING": "0"}, "turned off by GPUCORE_MALLOC_TUNING=0"),
    ({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1000000"}, "GLIBC_TUNABLES sets malloc's tunables already"),
])
def test_the_users_choice_is_left_alone(tmp_path, environment, reason):
    malloc = settings_after_training(tmp_path, **environment)
    assert malloc == {"tuned": False, "reason": reason, "values": {}}


def test_a_preloaded_allocator_is_left_alone(monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4")
    monkeypatch.delenv("GPUCORE_MALLOC_TUNING", raising=False)
    plan = process_settings.malloc_plan()
    assert plan["tune"] is False and "tcmalloc" in plan["reason"]


def test_doctor_says_what_training_would_do(monkeypatch):
    import gpucore

    monkeypatch.setenv("GPUCORE_MALLOC_TUNING", "0")
    # a process where gpucore.train has not run yet (an earlier test's training applied the settings)
    monkeypatch.setattr(gpucore.process_settings, "_applied", None)
    report = gpucore.doctor(smoke_test=False)
    assert report["process_settings"]["malloc"]["reason"] == "turned off by GPUCORE_MALLOC_TUNING=0"
    assert "process settings: gpucore.train leaves malloc as it is: turned off by GPUCORE_MALLOC_TUNING=0" in \
        gpucore.device.doctor.format_report(report)


def test_the_command_exits_with_mains_status_and_leaves_no_object_to_search_for_cycles():
    # gpucore.cli.command, what the console script and `python -m gpucore` run: main's status is the process's, and
    # as it exits, every object is frozen (none left in the collector's generations but the few the probe makes), so
    # the interpreter's collections at exit do not search the objects torch's and gpucore's imports made
    # (`gpucore runs`: 3.36 CPU-s with them, 2.67 without). Before it, thousands are there, also in this process
    # forked after torch's import.
    probe = textwrap.dedent("""
        import gc, os, sys
        from gpucore import cli
        cli.main = lambda: 3
        def exit(status):
            print(status, len(gc.get_objects()), flush=True)
            os._exit(status)
        sys.exit = exit
        print("before", len(gc.get_objects()), flush=True)
        cli.command()
    """)
    done = forked_python.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stderr[-3000:]
    before, at_exit = done.stdout.split("\n")[:2]
    assert int(before.split()[1]) > 1_000, before
    status, tracked = at_exit.split()
    assert status == "3" and int(tracked) < 100, at_exit
