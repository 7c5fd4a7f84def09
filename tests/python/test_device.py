import warnings

import pytest
import torch

import gpucore
from gpucore import _C

from conftest import make_facts, make_gpu

CU130 = ("sm_75", "sm_80", "sm_86", "sm_90")


def test_auto_on_this_machine_returns_a_working_device_and_a_reason():
    choice = gpucore.select_device()
    assert isinstance(choice.device, torch.device)
    assert choice.reason
    x = torch.arange(10.0, device=choice.device)
    assert (x * 2).sum().item() == 90.0
    if not torch.cuda.is_available() and not torch.backends.mps.is_available():
        assert choice.device == torch.device("cpu")


def test_cpu_is_always_available():
    choice = gpucore.select_device("cpu")
    assert choice.device.type == "cpu"
    assert "threads" in choice.reason


def test_tesla_m40_falls_back_with_a_warning(fake_machine):
    fake_machine.install(make_facts([make_gpu(0, "Tesla M40", 5, 2)], CU130))
    with pytest.warns(gpucore.DeviceFallbackWarning) as record:
        choice = gpucore.select_device("auto")
    assert choice.device == torch.device("cpu")
    message = str(record[0].message)
    for part in ("Tesla M40", "5.2", "sm_75", "cu126", "TORCH_CUDA_ARCH_LIST"):
        assert part in message
    assert fake_machine.probed == []  # the rule already ruled it out
    assert choice.warnings == (message,)
    assert [v.device for v in choice.verdicts] == ["cuda:0", "cpu"]
    assert not choice.verdicts[0].usable


def test_tesla_m40_demanded_raises(fake_machine):
    fake_machine.install(make_facts([make_gpu(0, "Tesla M40", 5, 2)], CU130))
    for demand in ("cuda", "cuda:0", torch.device("cuda", 0)):
        with pytest.raises(gpucore.DeviceUnavailableError, match=r"Tesla M40.*5\.2"):
            gpucore.select_device(demand)


def test_usable_gpu_is_chosen_after_a_probe(fake_machine):
    fake_machine.install(make_facts([make_gpu(0, "Tesla M40", 5, 2), make_gpu(1, "NVIDIA A100-PCIE-40GB", 8, 0)], CU130))
    with pytest.warns(gpucore.DeviceFallbackWarning, match="cuda:0"):
        choice = gpucore.select_device("auto")
    assert choice.device == torch.device("cuda:1")
    assert "A100" in choice.reason and "sm_80" in choice.reason
    assert fake_machine.probed == ["cuda:1"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert gpucore.select_device("cuda:1").device == torch.device("cuda:1")


def test_no_kernel_image_from_the_probe_is_explained(fake_machine):
    fake_machine.install(make_facts([make_gpu(0, "NVIDIA A100", 8, 0)], CU130))
    fake_machine.probe_failures["cuda:0"] = "CUDA error: no kernel image is available for execution on the device"
    with pytest.raises(gpucore.DeviceUnavailableError) as info:
        gpucore.select_device("cuda:0")
    for part in ("NVIDIA A100", "compute capability 8.0", "no kernel image", "sm_75, sm_80, sm_86, sm_90"):
        assert part in str(info.value)


def test_no_cuda_and_no_mps_flags(fake_machine):
    facts = make_facts([make_gpu(0, "NVIDIA A100", 8, 0)], CU130)
    facts.mps_built = facts.mps_available = True
    fake_machine.install(facts)
    assert gpucore.select_device(no_cuda=True).device == torch.device("mps")
    assert gpucore.select_device(no_cuda=True, no_mps=True).device == torch.device("cpu")
    with pytest.raises(gpucore.ConfigError, match="no_cuda"):
        gpucore.select_device("cuda", no_cuda=True)


def test_cpu_only_torch_on_a_gpu_server_says_so(fake_machine):
    facts = make_facts([], arch_list=(), torch_version="2.13.0+cpu", driver=12080)
    fake_machine.install(facts)
    with pytest.warns(gpucore.DeviceFallbackWarning, match="CPU-only build.*CUDA 12.8"):
        assert gpucore.select_device().device.type == "cpu"


@pytest.mark.parametrize("bad", ["gpu", "cuda:one", "CUDA:-1", "tpu"])
def test_bad_preferences_are_config_errors(bad):
    with pytest.raises(gpucore.ConfigError) as info:
        gpucore.select_device(bad)
    assert "cuda:N" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_non_string_preference_is_a_config_error():
    with pytest.raises(gpucore.ConfigError, match="got int 0"):
        gpucore.select_device(0)


def test_cuda_demand_without_cuda_names_the_reason():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(gpucore.DeviceUnavailableError, match="cuda"):
        gpucore.select_device("cuda")


def test_arch_rule_is_exposed():
    assert not _C.match_arch_list(_C.ComputeCapability(5, 2), list(CU130)).usable
    match = _C.match_arch_list(_C.ComputeCapability(9, 0), ["sm_80", "compute_80"])
    assert match.usable and match.jit and match.via == "compute_80"


def test_system_facts_match_torch():
    facts = gpucore.device.select.system_facts()
    assert facts.torch_version == torch.__version__
    assert facts.torch_cuda_version == (torch.version.cuda or "")
    assert len(facts.cuda_devices) == (torch.cuda.device_count() if torch.version.cuda else 0)
    assert facts.mps_available == torch.backends.mps.is_available()
    assert facts.cpu_threads == torch.get_num_threads()


def test_device_facts_are_json_ready():
    import json

    facts = gpucore.device_facts()
    assert json.loads(json.dumps(facts)) == facts
    assert facts["torch"] == torch.__version__
    assert facts["cpu"]["threads"] >= 1


@pytest.mark.needs_cuda
def test_live_cuda_selection_and_facts():
    choice = gpucore.select_device("cuda:0")
    props = torch.cuda.get_device_properties(0)
    assert props.name in choice.reason
    facts = gpucore.device_facts()["cuda"][0]
    assert facts["capability"] == f"{props.major}.{props.minor}"
    assert facts["total_memory"] == props.total_memory
    assert 0 < facts["free_memory"] <= facts["total_memory"]
    assert facts["multiprocessor_count"] == props.multi_processor_count
