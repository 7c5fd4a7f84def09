import json
import os
import subprocess
import sys

import pytest
import torch

import gpucore
from gpucore.cli import main

from conftest import gpucore_process, make_facts, make_gpu

pytestmark = pytest.mark.slow  # spawns processes


def test_doctor_report_schema_on_this_machine():
    report = gpucore.doctor()
    assert json.loads(json.dumps(report)) == report  # plain JSON all the way down
    assert report["report_version"] == 1
    versions = report["versions"]
    assert versions["torch"] == torch.__version__
    assert versions["gpucore"] == gpucore.__version__
    assert versions["python"].count(".") == 2
    devices = [d["device"] for d in report["devices"]]
    assert devices[-1] == "cpu" and "mps" in devices
    for verdict in report["devices"]:
        assert set(verdict) == {"device", "name", "usable", "reason", "advice"}
        assert verdict["reason"]
    selected = report["selected"]
    assert selected["device"] == str(gpucore.select_device().device)
    assert report["precision"]["precision"] in {"bf16-mixed", "16-mixed", "32"}
    smoke = report["smoke_test"]
    assert smoke["ok"] and smoke["device"] == selected["device"]
    assert smoke["matmul_rel_error"] <= smoke["tolerance"]
    assert smoke["matmul_512_ms"] > 0 and smoke["conv2d_ms"] > 0
    assert report["ok"] is True


def test_doctor_with_unusable_demand_reports_instead_of_raising(fake_machine):
    fake_machine.install(make_facts([make_gpu(0, "Tesla M40", 5, 2)]))
    report = gpucore.doctor("cuda", smoke_test=False)
    assert report["ok"] is False
    assert report["selected"]["device"] is None
    assert "Tesla M40" in report["selected"]["error"]
    assert any("cu126" in line for line in report["advice"])


def test_doctor_auto_on_m40_server_falls_back_and_advises(fake_machine):
    fake_machine.install(make_facts([make_gpu(0, "Tesla M40", 5, 2)]))
    with pytest.warns(gpucore.DeviceFallbackWarning):
        report = gpucore.doctor("auto")
    assert report["ok"] is True
    assert report["selected"]["device"] == "cpu"
    assert any("TORCH_CUDA_ARCH_LIST" in line for line in report["advice"])


def test_cli_doctor_json_exit_zero():
    result = gpucore_process("doctor", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert report["smoke_test"]["ok"] is True


def test_cli_doctor_text(capsys):
    assert main(["doctor", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "gpucore doctor" in out
    assert "smoke test on cpu" in out
    assert out.rstrip().endswith("result: ok")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cli_doctor_demanded_cuda_exits_non_zero(capsys):
    assert main(["doctor", "--device", "cuda", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert "cuda" in report["selected"]["error"]


def test_cli_rejects_bad_device_with_exit_one(capsys):
    assert main(["doctor", "--device", "gpu0", "--no-smoke-test"]) == 1
    assert "'gpu0'" in capsys.readouterr().out


def test_cli_without_command_shows_usage(capsys):
    assert main([]) == 2
    assert "doctor" in capsys.readouterr().err


def test_console_script_is_installed():
    script = os.path.join(os.path.dirname(sys.executable), "gpucore")
    assert os.path.exists(script)
    result = subprocess.run([script, "doctor", "--no-smoke-test"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "devices" in result.stdout


@pytest.mark.needs_cuda
def test_doctor_runs_gpucore_kernels_on_the_gpu():
    report = gpucore.doctor("cuda", smoke_test=False)
    kernels = report["gpucore_kernels"]
    assert kernels["built"] is gpucore._build_info.CUDA_KERNELS
    if not kernels["built"]:
        pytest.skip("this build has no gpucore CUDA kernels")
    assert kernels["ok"] is True and kernels["error"] is None, kernels
    assert kernels["arch_list"] == list(gpucore._C.gpucore_cuda_arch_list())
