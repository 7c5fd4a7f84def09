"""The C++ engine's pieces against PyTorch: schedules, loss scaling, clipping, losses, metrics."""

import pytest
import torch
from torch import nn

from gpucore import _C


def schedule(kind, **values):
    config = _C.ScheduleConfig()
    config.kind = kind
    for name, value in values.items():
        setattr(config, name, value)
    return config


def lrs(config, steps):
    return [_C.learning_rate(config, torch.tensor(float(s))).item() for s in range(steps)]


def torch_lrs(make_scheduler, steps, lr=0.1):
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=lr)
    scheduler = make_scheduler(optimizer)
    values = []
    for _ in range(steps):
        values.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return values


@pytest.mark.parametrize("ours,theirs", [
    (schedule("cosine", base_lr=0.1, total_steps=50, min_lr=0.001),
     lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=50, eta_min=0.001)),
    (schedule("step", base_lr=0.1, total_steps=50, step_size=7, gamma=0.5),
     lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=7, gamma=0.5)),
    (schedule("multistep", base_lr=0.1, total_steps=50, milestones=[10, 25, 40], gamma=0.3),
     lambda o: torch.optim.lr_scheduler.MultiStepLR(o, milestones=[10, 25, 40], gamma=0.3)),
    (schedule("onecycle", base_lr=0.1, total_steps=50, pct_start=0.3),
     lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=50, pct_start=0.3,
                                                   cycle_momentum=False)),
])
def test_schedules_match_torch(ours, theirs):
    assert lrs(ours, 50) == pytest.approx(torch_lrs(theirs, 50), rel=1e-5, abs=1e-8)


def test_linear_warmup_then_constant():
    values = lrs(schedule("constant", base_lr=0.1, warmup_steps=4, total_steps=20), 8)
    assert values == pytest.approx([0.025, 0.05, 0.075, 0.1, 0.1, 0.1, 0.1, 0.1])


@pytest.mark.parametrize("values,message", [
    ({"kind": "cosine", "warmup_steps": 10, "total_steps": 10}, "warm-up"),
    ({"kind": "onecycle", "warmup_steps": 2, "total_steps": 10}, "own warm-up"),
    ({"kind": "multistep", "milestones": [5, 3], "total_steps": 10}, "increasing"),
])
def test_schedule_validation(values, message):
    config = schedule(values.pop("kind"), **values)
    with pytest.raises(_C.ConfigError, match=message):
        _C.learning_rate(config, torch.tensor(0.0))


def engine(params, *, lr=1.0, scaler=False, clip=0.0, kind="sgd", accumulate=1, loss="cross_entropy", heads=0,
           label_smoothing=0.0):
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
    return _C.Engine([_C.ParamGroup(params)], config)


def batches(x, y, batch_size):
    return _C.TensorBatches(x, y, batch_size, False, False, 0, torch.device("cpu"))


def test_scaler_skips_inf_steps_halves_the_scale_and_holds_the_schedule():
    model = nn.Linear(4, 3)
    x, y = torch.randn(12, 4), torch.randint(0, 3, (12,))
    eng = engine(list(model.parameters()), scaler=True)
    calls = {"n": 0}

    def loss(output, target):
        calls["n"] += 1
        value = nn.functional.cross_entropy(output, target)
        return value * float("inf") if calls["n"] == 2 else value  # the second of three steps overflows

    logged = []
    weights = []
    hook = lambda m: (logged.append(dict(m)), weights.append(model.weight.detach().clone()))
    eng.train_epoch(batches(x, y, 4), model, loss, hook)
    assert eng.steps_skipped() == 1 and eng.steps_taken() == 2
    assert [m["loss_scale"] for m in logged] == [65536.0, 32768.0, 32768.0]
    assert torch.equal(weights[0], weights[1])      # the skipped step changed nothing
    assert not torch.equal(weights[1], weights[2])
    # the step schedule halves per taken step: after 2 taken steps lr is 0.25, not 0.125
    assert eng.current_lr() == pytest.approx(0.25)


def test_scale_grows_after_growth_interval_good_steps():
    model = nn.Linear(4, 3)
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    eng = engine(list(model.parameters()), scaler=True)
    eng.train_epoch(batches(x, y, 4), model, None, None)
    assert eng.loss_scale() == 65536.0 * 4  # growth_interval 2, 4 good steps


def test_clipping_sees_unscaled_gradients():
    torch.manual_seed(0)
    model, reference = nn.Linear(8, 4), nn.Linear(8, 4)
    reference.load_state_dict(model.state_dict())
    x, y = torch.randn(16, 8) * 10, torch.randint(0, 4, (16,))
    eng = engine(list(model.parameters()), scaler=True, clip=0.5, lr=1.0)
    eng.train_epoch(batches(x, y, 16), model, None, None)
    nn.functional.cross_entropy(reference(x), y).backward()
    norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5)
    assert norm > 0.5  # the clip was active
    with torch.no_grad():
        for p in reference.parameters():
            p -= 1.0 * p.grad
    for a, b in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def evaluate(loss, output, target, heads=0, label_smoothing=0.0):
    """The engine's loss and metrics for one batch, with an identity 'model'."""
    eng = engine([nn.Parameter(torch.zeros(1))], loss=loss, heads=heads, label_smoothing=label_smoothing)
    return eng.evaluate(batches(output, target, output.shape[0]), lambda x: x, None)["metrics"]


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1, 0.35])
def test_cross_entropy_with_label_smoothing_and_accuracy(label_smoothing):
    generator = torch.Generator().manual_seed(145)
    output, target = torch.randn(64, 10, generator=generator), torch.randint(0, 10, (64,), generator=generator)
    metrics = evaluate("cross_entropy", output, target, label_smoothing=label_smoothing)
    expected = nn.functional.cross_entropy(output, target, label_smoothing=label_smoothing).item()
    assert metrics["loss"] == pytest.approx(expected, rel=1e-6), f"label_smoothing {label_smoothing}, seed 145"
    assert metrics["accuracy"] == pytest.approx((output.argmax(1) == target).float().mean().item())
    top5 = (output.topk(5, 1).indices == target[:, None]).any(1).float().mean().item()
    assert metrics["top5_accuracy"] == pytest.approx(top5)


def test_multilabel_soft_margin_and_multi_head_metrics():
    heads, classes = 4, 36
    output = torch.randn(32, heads * classes)
    target = torch.randint(0, classes, (32, heads))
    target[:8] = output.reshape(32, heads, classes)[:8].argmax(-1)  # 8 samples fully right
    metrics = evaluate("multilabel_soft_margin", output, target, heads=heads)
    one_hot = nn.functional.one_hot(target, classes).reshape(32, -1).float()
    expected = nn.MultiLabelSoftMarginLoss()(output, one_hot).item()
    assert metrics["loss"] == pytest.approx(expected, rel=1e-6)
    hits = output.reshape(32, heads, classes).argmax(-1) == target
    assert metrics["char_accuracy"] == pytest.approx(hits.float().mean().item())
    assert metrics["seq_accuracy"] == pytest.approx(hits.all(1).float().mean().item())
    assert metrics["seq_accuracy"] >= 8 / 32


def test_bce_and_dice_bce_with_iou():
    output = torch.randn(6, 1, 16, 16)
    mask = (torch.rand(6, 16, 16) > 0.6).float()
    metrics = evaluate("bce_with_logits", output, mask)
    assert metrics["loss"] == pytest.approx(
        nn.functional.binary_cross_entropy_with_logits(output, mask.unsqueeze(1)).item(), rel=1e-6)
    predicted, truth = output > 0, mask.unsqueeze(1) > 0.5
    assert metrics["iou"] == pytest.approx(((predicted & truth).sum() / (predicted | truth).sum()).item())
    dice_metrics = evaluate("dice_bce", output, mask)
    p = torch.sigmoid(output).reshape(6, -1)
    m = mask.reshape(6, -1)
    dice = (2 * (p * m).sum(1) + 1) / (p.sum(1) + m.sum(1) + 1)
    expected = nn.functional.binary_cross_entropy_with_logits(output, mask.unsqueeze(1)) + (1 - dice).mean()
    assert dice_metrics["loss"] == pytest.approx(expected.item(), rel=1e-5)
    assert dice_metrics["dice"] == pytest.approx((2 * (predicted & truth).sum() / (predicted.sum() + truth.sum())).item())


def test_loss_shape_mismatch_names_both_shapes():
    with pytest.raises(_C.ConfigError, match=r"cross_entropy.*\[8, 10\].*\[8, 3\]"):
        evaluate("cross_entropy", torch.randn(8, 10), torch.randint(0, 10, (8, 3)))
    with pytest.raises(_C.ConfigError, match=r"heads = 4"):
        evaluate("multilabel_soft_margin", torch.randn(8, 10), torch.randint(0, 10, (8, 3)), heads=4)


def test_ctc_loss_and_greedy_sequence_accuracy():
    torch.manual_seed(0)
    output = torch.randn(6, 12, 5)
    targets = torch.tensor([[1, 2, 3], [4, 4, -1], [2, -1, -1], [1, 3, 1], [3, 2, -1], [4, 1, 2]])
    # make samples 0 and 2 decode exactly: 1 1 _ 2 3 3 ... and 2 2 _ _
    output[0] = -5
    for step, token in enumerate([1, 1, 0, 2, 3, 3, 0, 0, 0, 0, 0, 0]):
        output[0, step, token] = 5
    output[2] = -5
    output[2, :, 0] = 5
    output[2, 3:5, 2] = 10
    metrics = evaluate("ctc", output, targets)
    lengths = (targets >= 0).sum(1)
    expected = nn.functional.ctc_loss(output.log_softmax(-1).transpose(0, 1), targets.clamp_min(0),
                                      torch.full((6,), 12), lengths, zero_infinity=True)
    assert metrics["loss"] == pytest.approx(expected.item(), rel=1e-5)

    def greedy(sequence):
        out, previous = [], None
        for token in sequence.argmax(-1).tolist():
            if token != 0 and token != previous:
                out.append(token)
            previous = token
        return out

    right = sum(greedy(output[i]) == [t for t in targets[i].tolist() if t >= 0] for i in range(6))
    assert right >= 2
    assert metrics["seq_accuracy"] == pytest.approx(right / 6)


def test_ctc_shape_error():
    with pytest.raises(_C.ConfigError, match=r"ctc expects an output of \(N, T, classes\)"):
        evaluate("ctc", torch.randn(4, 10), torch.randint(1, 5, (4, 3)))


def test_tensor_batches_order_depends_only_on_seed_and_epoch():
    x = torch.arange(100).float().unsqueeze(1)
    y = torch.arange(100)

    def epoch_order(seed, epoch):
        source = _C.TensorBatches(x, y, 10, True, False, seed, torch.device("cpu"))
        source.start_epoch(epoch)
        out = []
        while (batch := source.next()) is not None:
            out.append(batch[1])
        return torch.cat(out)

    first = epoch_order(5, 0)
    assert sorted(first.tolist()) == list(range(100))
    assert torch.equal(first, epoch_order(5, 0))
    assert not torch.equal(first, epoch_order(5, 1))
    assert not torch.equal(first, epoch_order(6, 0))
    skipped = _C.TensorBatches(x, y, 10, True, False, 5, torch.device("cpu"))
    skipped.start_epoch(0, 3)
    assert skipped.remaining() == 7
    assert torch.equal(skipped.next()[1], first[30:40])


def test_tensor_batches_errors():
    with pytest.raises(_C.ConfigError, match=r"same number of samples, got 10 inputs and targets of shape \[9\]"):
        _C.TensorBatches(torch.zeros(10, 2), torch.zeros(9), 4, True, False, 0, torch.device("cpu"))
    with pytest.raises(_C.ConfigError, match="batch_size"):
        _C.TensorBatches(torch.zeros(10, 2), torch.zeros(10), 0, True, False, 0, torch.device("cpu"))


def test_config_kinds_read_back():
    for config, kind in ((_C.LossConfig(), "dice_bce"), (_C.OptimizerConfig(), "adamw"),
                         (_C.ScheduleConfig(), "onecycle")):
        config.kind = kind
        assert config.kind == kind


def test_engine_config_takes_torch_dtypes_and_devices():
    config = _C.EngineConfig()
    assert (config.device, config.autocast_dtype, config.param_dtype) == (torch.device("cpu"), None, torch.float32)
    config.autocast_dtype, config.param_dtype = torch.bfloat16, torch.float64
    assert (config.autocast_dtype, config.param_dtype) == (torch.bfloat16, torch.float64)
    with pytest.raises(TypeError):
        config.param_dtype = "float64"
    params = [nn.Parameter(torch.zeros(2))]
    config.param_dtype = torch.int32
    with pytest.raises(_C.ConfigError, match="param_dtype must be float32 or float64, got 'int32'"):
        _C.Engine([_C.ParamGroup(params)], config)
    config.param_dtype, config.autocast_dtype = torch.float32, torch.float32
    with pytest.raises(_C.ConfigError, match="autocast_dtype must be bfloat16, float16 or None, got 'float32'"):
        _C.Engine([_C.ParamGroup(params)], config)


def test_step_counters_are_exact_to_2_24_steps_and_a_longer_run_is_refused():
    # float32 counters hold every step count up to 2^24; one more step than that would round back down.
    limit = 2**24
    counters = torch.tensor([limit - 1.0, 0.0, 0.0])
    torch.ops.gpucore.count_step(counters, torch.tensor(0.0))
    assert counters[0].item() == limit
    config = _C.EngineConfig()
    config.schedule = schedule("cosine", total_steps=limit)
    _C.Engine([_C.ParamGroup([nn.Parameter(torch.zeros(2))])], config)
    config.schedule = schedule("cosine", total_steps=limit + 1)
    with pytest.raises(_C.ConfigError, match=r"a run of 16777217 optimizer steps .* at most 16777216 \(2\^24"):
        _C.Engine([_C.ParamGroup([nn.Parameter(torch.zeros(2))])], config)


def test_init_scale_and_growth_interval_reach_the_engines_scaler():
    # Loss scaling is on for 16-mixed on a GPU; here the CPU engine with the scaler on, built from config keys:
    # after 7 good steps the scale is init_scale doubled once per growth_interval (3) good steps.
    from types import SimpleNamespace

    import gpucore
    from gpucore.config import load_config
    from gpucore.tasks import task_of
    from gpucore.training.engine_config import engine_config

    config = load_config({"init_scale": 1024.0, "growth_interval": 3, "optimizer": "sgd", "schedule": "constant"})
    cpu = gpucore.resolve_precision("32", "cpu")
    policy = SimpleNamespace(autocast_dtype=cpu.autocast_dtype, param_dtype=cpu.param_dtype, loss_scaling=True)
    model = nn.Linear(4, 3)
    eng = _C.Engine([_C.ParamGroup(list(model.parameters()))],
                    engine_config(config, task_of(config), "cpu", policy, steps_per_epoch=7, channels_last=False))
    generator = torch.Generator().manual_seed(7)
    x, y = torch.randn(28, 4, generator=generator), torch.randint(0, 3, (28,), generator=generator)
    eng.train_epoch(batches(x, y, 4), model, None, None)
    assert eng.steps_taken() == 7 and eng.steps_skipped() == 0
    assert eng.loss_scale() == 1024.0 * 2 ** (7 // 3)
