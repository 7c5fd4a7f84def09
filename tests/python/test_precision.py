import mmap

import pytest
import torch

import gpucore

from conftest import make_facts, make_gpu


@pytest.mark.parametrize("isa", ["", "AVX512-BF16", "AMX"])
def test_auto_on_cpu_is_bf16_mixed_only_with_native_bf16(fake_machine, isa):
    facts = make_facts(gpus=(), arch_list=())
    facts.cpu_bf16_isa = isa
    fake_machine.install(facts)
    policy = gpucore.resolve_precision("auto", "cpu")
    assert policy.precision == ("bf16-mixed" if isa else "32")
    assert policy.autocast_dtype == (torch.bfloat16 if isa else None)
    assert policy.param_dtype == torch.float32
    assert not policy.tf32 and not policy.cudnn_benchmark and not policy.loss_scaling
    assert (isa in policy.reason) if isa else ("no native bf16" in policy.reason)


def test_this_cpus_bf16_is_what_torch_finds():
    expected = ("AMX" if torch.cpu._is_amx_tile_supported() else
                "AVX512-BF16" if torch.cpu._is_avx512_bf16_supported() else None)
    assert gpucore.device_facts()["cpu"]["bf16"] == expected


def test_bf16_on_cpu_and_its_dict():
    policy = gpucore.resolve_precision("bf16-mixed", "cpu")
    assert policy.autocast_dtype == torch.bfloat16
    assert policy.to_dict()["autocast_dtype"] == "bfloat16"


@pytest.mark.parametrize(
    "name,major,minor,expected,dtype,scaling",
    [
        ("NVIDIA A100", 8, 0, "bf16-mixed", torch.bfloat16, False),
        ("NVIDIA H100", 9, 0, "bf16-mixed", torch.bfloat16, False),
        ("Tesla T4", 7, 5, "16-mixed", torch.float16, True),
        ("Tesla V100", 7, 0, "16-mixed", torch.float16, True),
        ("Tesla P100", 6, 0, "32", None, False),
    ],
)
def test_auto_policy_per_gpu(fake_machine, name, major, minor, expected, dtype, scaling):
    fake_machine.install(make_facts([make_gpu(0, name, major, minor)], ("sm_60", "sm_70", "sm_75", "sm_80", "sm_90")))
    policy = gpucore.resolve_precision("auto", "cuda:0")
    assert policy.precision == expected
    assert policy.autocast_dtype == dtype
    assert policy.loss_scaling == scaling
    assert policy.tf32 == (major >= 8)
    assert policy.cudnn_benchmark


def test_deterministic_turns_the_cudnn_autotuner_off_and_refuses_it_asked_for(fake_machine):
    """On an H200 two runs of one config with deterministic: true still differed in 22 of 26 tensors while the
    autotuner chose cuDNN's algorithms anew in each process (2026-11-29); auto is off with deterministic."""
    fake_machine.install(make_facts([make_gpu(0, "NVIDIA H200", 9, 0)], ("sm_80", "sm_90")))
    assert gpucore.resolve_precision("auto", "cuda:0").cudnn_benchmark
    for asked in ("auto", "false", False):
        assert not gpucore.resolve_precision("auto", "cuda:0", cudnn_benchmark=asked, deterministic=True).cudnn_benchmark
    for asked in ("true", True):
        with pytest.raises(gpucore.ConfigError, match="cudnn_benchmark' is true with deterministic: true.*auto or false"):
            gpucore.resolve_precision("auto", "cuda:0", cudnn_benchmark=asked, deterministic=True)
    assert gpucore.resolve_precision("auto", "cuda:0", cudnn_benchmark="true").cudnn_benchmark
    # a CUDA knob: the same config still runs on the CPU, with no autotuner to refuse
    assert not gpucore.resolve_precision("auto", "cpu", cudnn_benchmark="true", deterministic=True).cudnn_benchmark


def test_bf16_demanded_on_v100_is_an_error(fake_machine):
    fake_machine.install(make_facts([make_gpu(0, "Tesla V100-SXM2-16GB", 7, 0)], ("sm_70", "sm_80")))
    with pytest.raises(gpucore.ConfigError, match=r"bf16-mixed.*Tesla V100.*8\.0"):
        gpucore.resolve_precision("bf16-mixed", "cuda:0")


def test_bad_values_name_the_key():
    with pytest.raises(gpucore.ConfigError, match="precision 'fp16'.*16-mixed"):
        gpucore.resolve_precision("fp16", "cpu")
    with pytest.raises(gpucore.ConfigError, match="tf32 'maybe'"):
        gpucore.resolve_precision("32", "cpu", tf32="maybe")
    with pytest.raises(gpucore.ConfigError, match="16-mixed"):
        gpucore.resolve_precision("16-mixed", "cpu")


def test_apply_sets_torch_flags():
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    try:
        policy = gpucore.resolve_precision("32", "cpu")
        policy.apply()
        assert not torch.backends.cuda.matmul.allow_tf32
        assert not torch.backends.cudnn.allow_tf32
        assert not torch.backends.cudnn.benchmark
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = before


@pytest.fixture
def restores_backend_switches():
    """policy.apply() sets torch's global TF32 and cuDNN benchmark switches: put back for the tests after."""
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = before


@pytest.mark.needs_cuda
def test_live_cuda_policy_applies(restores_backend_switches):
    policy = gpucore.resolve_precision("auto", "cuda:0")
    policy.apply()
    assert torch.backends.cudnn.benchmark
    assert torch.backends.cuda.matmul.allow_tf32 == policy.tf32


def test_memory_stats_cpu():
    before = gpucore.memory_stats("cpu")
    # 256 MiB of fresh pages, touched: mapped here rather than malloc'd, since gpucore.train's malloc settings (an
    # earlier test's run) keep freed heap memory resident for reuse
    pages = mmap.mmap(-1, 256 << 20)
    block = torch.frombuffer(pages, dtype=torch.uint8).fill_(1)
    after = gpucore.memory_stats("cpu")
    assert set(after) == {"device", "allocated", "reserved", "peak_allocated", "free", "total"}
    assert after["total"] > 0
    assert after["peak_allocated"] >= after["allocated"] > 0
    assert after["allocated"] - before["allocated"] > 128 << 20
    del block
    pages.close()


@pytest.mark.needs_cuda
def test_memory_stats_cuda():
    before = gpucore.memory_stats("cuda:0")
    block = torch.empty(256 << 20, dtype=torch.uint8, device="cuda:0")
    after = gpucore.memory_stats("cuda:0")
    assert after["allocated"] - before["allocated"] == 256 << 20
    assert after["peak_allocated"] >= after["allocated"]
    assert 0 < after["free"] < after["total"]
    del block
