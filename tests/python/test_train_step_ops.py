"""The lean training step: the train-step ops (gpucore::accumulate_metrics, count_step, learning_rate)
against plain PyTorch, and the step's buffers keeping their addresses across epochs."""
import math
import warnings

import pytest
import torch
from torch import nn

import gpucore  # noqa: F401  (registers the ops' fake kernels)
from gpucore import _C

from conftest import assert_states_equal, engine, schedule

SLOTS = 12  # the engine's metric sums; the op owns the first five


def reference_sums(output, target, loss, top_k, ignore_index=-100):
    """What the op adds, in plain PyTorch, over the targets that are not ignore_index: loss * their number, their
    number, argmax hits, top-k hits, their number."""
    classes = output.shape[1]
    counted = target != ignore_index
    hits = (output.argmax(1) == target) & counted
    count = counted.sum().double()
    sums = torch.zeros(SLOTS, dtype=torch.float64)
    sums[0], sums[1] = (loss.double() * count if count > 0 else 0.0), count
    sums[2], sums[4] = hits.sum().double(), count
    if top_k:
        top = output.topk(min(top_k, classes), 1).indices
        sums[3] = ((top == target.unsqueeze(1)).any(1) & counted).sum().double()
    return sums


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_accumulate_metrics_matches_argmax_and_topk(dtype):
    # Each row a permutation of ten half-integers, exact in bfloat16 too: no ties (ties have their own test below).
    generator = torch.Generator().manual_seed(3)
    output = torch.stack([torch.randperm(10, generator=generator) for _ in range(257)]).to(dtype) - 4.5
    target = torch.randint(0, 10, (257,), generator=generator)
    target[:5] = -100  # ignored labels: neither hits nor counted
    loss = torch.rand((), generator=generator)
    sums = torch.rand(SLOTS, dtype=torch.float64, generator=generator)  # adds to what is there
    expected = sums + reference_sums(output, target, loss, 5)
    torch.ops.gpucore.accumulate_metrics(sums, output, target, loss, 5)
    assert torch.equal(sums, expected)


def test_accumulate_metrics_per_pixel_and_without_targets():
    output, target, loss = torch.randn(3, 4, 5, 6), torch.randint(0, 4, (3, 5, 6)), torch.rand(())
    sums = torch.zeros(SLOTS, dtype=torch.float64)
    torch.ops.gpucore.accumulate_metrics(sums, output, target, loss, 0)
    assert torch.equal(sums, reference_sums(output, target, loss, 0))
    only_loss = torch.zeros(SLOTS, dtype=torch.float64)
    torch.ops.gpucore.accumulate_metrics(only_loss, output, None, loss, 0)
    assert only_loss.tolist() == [loss.double().item() * 3, 3.0] + [0.0] * (SLOTS - 2)


def test_accumulate_metrics_leaves_ignore_index_out_of_every_sum():
    generator = torch.Generator().manual_seed(11)
    output, target = torch.randn(4, 3, 5, 6, generator=generator), torch.randint(0, 3, (4, 5, 6), generator=generator)
    target[torch.rand(target.shape, generator=generator) < 0.3] = 255
    loss = torch.rand((), generator=generator)
    sums = torch.zeros(SLOTS, dtype=torch.float64)
    torch.ops.gpucore.accumulate_metrics(sums, output, target, loss, 0, 255)
    assert torch.equal(sums, reference_sums(output, target, loss, 0, ignore_index=255))
    assert 0 < sums[4] < target.numel()
    # A batch with every target ignored: its mean loss is NaN, and it adds nothing.
    torch.ops.gpucore.accumulate_metrics(sums, output, torch.full_like(target, 255), torch.tensor(float("nan")), 0, 255)
    assert torch.equal(sums, reference_sums(output, target, loss, 0, ignore_index=255))


def test_accumulate_metrics_ties_and_nan_follow_argmax():
    output = torch.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0], [0.0, float("nan"), 5.0], [1.0, 1.0, 1.0]])
    target = torch.tensor([2, 0, 1, 2])
    sums = torch.zeros(SLOTS, dtype=torch.float64)
    torch.ops.gpucore.accumulate_metrics(sums, output, target, torch.zeros(()), 2)
    assert sums[2] == (output.argmax(1) == target).sum()  # the first maximum, NaN the largest
    assert sums[2] == 2
    assert sums[3] == 3  # the last row's target comes third in argmax's order (ties: the first index wins)


def test_count_step_advances_the_counters_and_clears_found_inf():
    counters = torch.tensor([7.0, 2.0, 1.0])
    found_inf = torch.tensor(1.0)
    torch.ops.gpucore.count_step(counters, found_inf)
    assert counters.tolist() == [7.0, 3.0, 2.0] and found_inf.item() == 0.0
    torch.ops.gpucore.count_step(counters, found_inf)
    assert counters.tolist() == [8.0, 3.0, 0.0] and found_inf.item() == 0.0


def test_learning_rate_op_writes_the_schedule_in_place():
    lr = torch.empty(())
    address = lr.data_ptr()
    packed = _C.pack_schedule(schedule("cosine", base_lr=0.1, warmup_steps=3, total_steps=50, min_lr=0.001))
    for step in (0.0, 2.0, 17.0, 60.0):
        torch.ops.gpucore.learning_rate(torch.tensor(step), lr, packed)
        assert lr.data_ptr() == address
        # Cosine from 0.1 to 0.001 over the 47 steps after the warm-up, times the warm-up's ramp, in double.
        fraction = min(max(step - 3, 0.0) / 47, 1.0)
        expected = ((math.cos(fraction * math.pi) + 1) * ((0.1 - 0.001) / 2) + 0.001) * min((step + 1) / 3, 1.0)
        assert lr.item() == torch.tensor(expected, dtype=torch.float32).item()


def test_learning_rate_op_refuses_what_pack_schedule_did_not_make():
    packed = _C.pack_schedule(schedule("constant"))
    with pytest.raises(RuntimeError, match="bytes of pack_schedule_params"):
        torch.ops.gpucore.learning_rate(torch.tensor(0.0), torch.empty(()), packed[1:])


def test_train_step_ops_pass_opcheck():
    output, target = torch.randn(6, 7), torch.randint(0, 7, (6,))
    torch.library.opcheck(torch.ops.gpucore.accumulate_metrics,
                          (torch.zeros(SLOTS, dtype=torch.float64), output, target, torch.rand(()), 3))
    torch.library.opcheck(torch.ops.gpucore.accumulate_metrics,
                          (torch.zeros(SLOTS, dtype=torch.float64), output, None, torch.rand(()), 0))
    torch.library.opcheck(torch.ops.gpucore.count_step, (torch.tensor([3.0, 1.0, 0.0]), torch.tensor(1.0)))
    torch.library.opcheck(torch.ops.gpucore.learning_rate,
                          (torch.tensor(4.0), torch.empty(()), _C.pack_schedule(schedule("onecycle", total_steps=20))))


def addresses(buffers):
    return {name: tensor.data_ptr() for name, tensor in buffers.items()}


def test_step_buffers_keep_their_addresses_across_epochs():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(2 * 6 * 6, 5))
    x, y = torch.randint(0, 256, (40, 2, 6, 6), dtype=torch.uint8), torch.randint(0, 5, (40,))
    transform = _C.AugmentConfig()
    transform.enabled = True
    transform.transforms = gpucore.transforms.specs(gpucore.transforms.training_form([], 2, True, (6, 6)))
    source = _C.TensorBatches(x, y, 8, True, False, 3, torch.device("cpu"), transform)
    eng = engine(list(model.parameters()), kind="adamw", lr=0.01)
    first_data, first_engine = addresses(source.step_buffers()), addresses(eng.step_buffers())
    draws = {f"transforms[{i}][{j}]" for i in range(2) for j in range(2)}  # crop, flip: offsets and flips each
    assert set(first_data) == {"order", "cursor", "index"} | draws
    assert set(first_engine) == {"metric_sums", "counters", "found_inf", "lr"}
    eng.train_epoch(source, model, None, None)
    source.start_epoch(1)
    eng.train_epoch(source, model, None, None)
    assert addresses(source.step_buffers()) == first_data
    assert addresses(eng.step_buffers()) == first_engine
    # refilled, not stale: epoch 1's draws are those of a fresh source started at epoch 1
    fresh = _C.TensorBatches(x, y, 8, True, False, 3, torch.device("cpu"), transform)
    fresh.start_epoch(1)
    assert_states_equal(source.step_buffers(), fresh.step_buffers(), keys=["order", *draws])
    # the cursor is the epoch's position on the device; index holds the last batch served
    assert source.step_buffers()["cursor"].item() == 40
    assert torch.equal(source.step_buffers()["index"], fresh.step_buffers()["order"][32:40])
    assert eng.step_buffers()["counters"].tolist() == [10.0, 0.0, 0.0]  # 2 epochs of 5 steps, none skipped


@pytest.mark.needs_cuda  # host syncs are CUDA's
def test_training_steps_do_not_sync_with_the_host():
    """An epoch of 12 steps syncs as often as one of 4: only the end-of-epoch read syncs, no step does."""
    device = torch.device("cuda")

    def syncs(steps):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 10)).to(device)
        x, y = torch.randint(0, 256, (steps * 16, 3, 8, 8), dtype=torch.uint8), torch.randint(0, 10, (steps * 16,))
        transform = _C.AugmentConfig()
        transform.enabled = True
        transform.transforms = gpucore.transforms.specs(gpucore.transforms.training_form([], 2, True, (8, 8)))
        source = _C.TensorBatches(x, y, 16, True, False, 0, device, transform)
        config = engine_on(device, [p for p in model.parameters()])
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                config.train_epoch(source, model, None, None)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        return sum("synchronizing CUDA operation" in str(w.message) for w in caught)

    syncs(2)  # warm-up: handles and kernels load once
    assert syncs(12) == syncs(4)


def engine_on(device, params):
    config = _C.EngineConfig()
    config.device = device
    config.log_every_n_steps = 10**6
    config.schedule = schedule("cosine", base_lr=1e-3, total_steps=100)
    return _C.Engine([_C.ParamGroup(params, weight_decay=0.0)], config)
