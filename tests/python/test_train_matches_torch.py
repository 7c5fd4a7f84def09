"""gpucore.train's numerics against plain PyTorch: float32 runs on the CPU whose weights (optimizers, gradient
accumulation, label smoothing, gradient clipping, eps, drop_last) and learning rates (lr scaling, onecycle, warm-up
then cosine) match a plain torch loop's."""
import pytest
import torch
from torch import nn

import gpucore
from conftest import mlp, plain, tensors


@pytest.mark.parametrize("optimizer,extra", [
    ("adamw", {"weight_decay": 0.05}),
    ("adam", {"weight_decay": 0.0}),
    ("sgd", {"momentum": 0.9, "nesterov": True, "weight_decay": 1e-3}),
    ("sgd", {"momentum": 0.0, "weight_decay": 0.0}),
])
def test_steps_match_torch_optim(tmp_path, optimizer, extra):
    x, y = tensors(256)
    model = mlp()
    reference = mlp()
    result = gpucore.train(plain(tmp_path, optimizer=optimizer, lr=0.05, batch_size=32,
                                 no_decay_norm_and_bias=False, **extra), model=model, train_data=(x, y))
    assert result.steps == 8
    torch_optimizer = {
        "adamw": lambda p: torch.optim.AdamW(p, lr=0.05, weight_decay=extra["weight_decay"]),
        "adam": lambda p: torch.optim.Adam(p, lr=0.05),
        "sgd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=extra["momentum"], weight_decay=extra["weight_decay"],
                                         nesterov=extra.get("nesterov", False)),
    }[optimizer](reference.parameters())
    for start in range(0, 256, 32):
        torch_optimizer.zero_grad()
        nn.functional.cross_entropy(reference(x[start:start + 32]), y[start:start + 32]).backward()
        torch_optimizer.step()
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_accumulating_4_by_32_equals_one_batch_of_128(tmp_path):
    x, y = tensors(128)
    accumulated, whole = mlp(), mlp()
    gpucore.train(plain(tmp_path, batch_size=32, accumulate_grad_batches=4, name="acc"), model=accumulated,
                  train_data=(x, y))
    gpucore.train(plain(tmp_path, batch_size=128, name="whole"), model=whole, train_data=(x, y))
    for a, b in zip(accumulated.parameters(), whole.parameters()):
        assert (a - b).abs().max().item() <= 1e-6


def test_short_last_window_is_divided_by_its_real_length(tmp_path):
    # 5 micro-batches with accumulation 4: windows of 4 and 1; the second must be a full-size step.
    x, y = tensors(160)
    model, reference = mlp(), mlp()
    gpucore.train(plain(tmp_path, batch_size=32, accumulate_grad_batches=4, optimizer="sgd", momentum=0.0,
                        weight_decay=0.0, lr=0.1), model=model, train_data=(x, y))
    sgd = torch.optim.SGD(reference.parameters(), lr=0.1)
    for start, stop in ((0, 128), (128, 160)):
        sgd.zero_grad()
        nn.functional.cross_entropy(reference(x[start:stop]), y[start:stop]).backward()
        sgd.step()
    for a, b in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_lr_scaling_and_no_decay_groups(tmp_path):
    x, y = tensors(64)
    result = gpucore.train(plain(tmp_path, batch_size=64, lr=0.1, lr_scaling="linear", base_batch_size=256),
                           model=mlp(), train_data=(x, y))
    assert result.history[0]["lr"] == pytest.approx(0.025)
    result = gpucore.train(plain(tmp_path, batch_size=64, lr=0.1, lr_scaling="sqrt", base_batch_size=256, name="s"),
                           model=mlp(), train_data=(x, y))
    assert result.history[0]["lr"] == pytest.approx(0.05)


def test_label_smoothing_clip_grad_value_and_eps_match_torch(tmp_path):
    # Each of the three changes the weights here: smoothing 0.2 the loss, a clip at 0.01 most gradients (checked
    # below), eps 0.1 every Adam step (gradients are about its size).
    x, y = tensors(128, seed=7)
    model, reference = mlp(), mlp()
    gpucore.train(plain(tmp_path, optimizer="adamw", lr=0.05, batch_size=32, weight_decay=0.0, label_smoothing=0.2,
                        clip_grad_value=0.01, eps=0.1), model=model, train_data=(x, y))
    adamw = torch.optim.AdamW(reference.parameters(), lr=0.05, eps=0.1, weight_decay=0.0)
    clipped = 0
    for start in range(0, 128, 32):
        adamw.zero_grad()
        nn.functional.cross_entropy(reference(x[start:start + 32]), y[start:start + 32],
                                    label_smoothing=0.2).backward()
        clipped += sum(int((p.grad.abs() > 0.01).sum()) for p in reference.parameters())
        torch.nn.utils.clip_grad_value_(reference.parameters(), 0.01)
        adamw.step()
    assert clipped > 100  # the clip was active
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_drop_last_and_eval_batch_size(tmp_path):
    x, y = tensors(100, seed=8)
    sizes = []

    class Recording(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = mlp()

        def forward(self, inputs):
            sizes.append((self.training, inputs.shape[0]))
            return self.net(inputs)

    model, reference = Recording(), mlp()
    result = gpucore.train(plain(tmp_path, optimizer="sgd", momentum=0.0, weight_decay=0.0, lr=0.1, batch_size=32,
                                 drop_last=True, eval_batch_size=48), model=model, train_data=(x, y),
                           val_data=(x, y))
    assert result.steps == 3  # 100 samples: three full batches of 32, the last 4 dropped
    assert [n for training, n in sizes if training] == [32, 32, 32]
    assert [n for training, n in sizes if not training] == [48, 48, 4]  # validation keeps every sample
    sgd = torch.optim.SGD(reference.parameters(), lr=0.1)
    for start in (0, 32, 64):
        sgd.zero_grad()
        nn.functional.cross_entropy(reference(x[start:start + 32]), y[start:start + 32]).backward()
        sgd.step()
    for ours, theirs in zip(model.net.parameters(), reference.parameters()):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def step_lrs(tmp_path, **config):
    """The learning rate logged after each of 16 steps (2 epochs of 8): the rate of the step after it."""
    seen = []

    class Recorder:
        def on_log(self, trainer, step, metrics):
            seen.append(metrics["lr"])

    x, y = tensors(128)
    gpucore.train(plain(tmp_path, batch_size=16, epochs=2, lr=0.1, log_every_n_steps=1, **config), model=mlp(),
                  train_data=(x, y), callbacks=[Recorder()])
    assert len(seen) == 16
    return seen


def test_onecycle_div_factor_and_final_div_factor_match_torch(tmp_path):
    ours = step_lrs(tmp_path, schedule="onecycle", div_factor=5.0, final_div_factor=50.0, pct_start=0.25)
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=16, pct_start=0.25,
                                                    div_factor=5.0, final_div_factor=50.0)
    theirs = []
    for _ in range(15):
        optimizer.step()
        scheduler.step()
        theirs.append(optimizer.param_groups[0]["lr"])
    assert ours[:15] == pytest.approx(theirs, rel=1e-5)
    assert ours[-1] == pytest.approx(0.1 / 5.0 / 50.0, rel=1e-5)  # the end: initial / final_div_factor


def test_warmup_epochs_then_cosine(tmp_path):
    import math

    ours = step_lrs(tmp_path, schedule="cosine", warmup_epochs=0.5, min_lr=0.0)  # 4 warm-up steps of 16
    # steps 0-3 rise linearly to the peak, steps 4-15 are a cosine over the other 12 steps, from the peak
    by_hand = [0.1 * (k + 1) / 4 for k in range(4)] + [0.1 * (1 + math.cos(math.pi * j / 12)) / 2 for j in range(12)]
    assert ours == pytest.approx(by_hand[1:] + [0.0], rel=1e-5, abs=1e-7)
