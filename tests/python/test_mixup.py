"""Mixup and CutMix in the engine against timm's Mixup and SoftTargetCrossEntropy: the mixed inputs and soft targets
for the same lambda and box, the loss, the draws' distribution, accuracy on the true labels, a bitwise resume."""
import json

import numpy as np
import pytest
import torch
from torch import nn

import gpucore
from conftest import assert_resume_matches, assert_states_equal, require
from gpucore import _C
from gpucore.config import load_config
from gpucore.training.engine_config import mixup_config

# The columns of a mix row (csrc/ops/mix_params.h).
INPUT_SELF, INPUT_PARTNER, TARGET_SELF, TARGET_PARTNER, Y0, Y1, X0, X1 = range(8)


@pytest.fixture
def timm_mixup():
    return require("timm.data.mixup")


def mix_config(**values):
    config = _C.MixupConfig()
    for name, value in values.items():
        setattr(config, name, value)
    return config


def first_draw(config, n, h, w, *wanted):
    """The rows of the first batch (epoch 0) with each `wanted` kind of row ('mixup', 'cutmix', 'none') among the
    first n // 2 (batch mode: the first)."""
    for batch in range(200):
        rows = _C.draw_mix(config, 0, batch, n, h, w)
        if {kind(row) for row in rows[:max(n // 2, 1)]} >= set(wanted):
            return rows
    raise AssertionError(f"no draw with {wanted} in 200 batches")


def kind(row):
    if row[TARGET_SELF] == 1 and row[Y1] == row[Y0]:
        return "none"
    return "cutmix" if row[INPUT_SELF] == 0 and row[INPUT_PARTNER] == 1 else "mixup"


def box(row):
    return tuple(int(row[k]) for k in (Y0, Y1, X0, X1))


def patch_timm_draws(monkeypatch, timm_mixup, mixer, rows, mode):
    """timm's Mixup drawing what `rows` hold: its random parameters and boxes replaced by ours."""
    n = rows.shape[0]
    lams = rows[:, TARGET_SELF].numpy().astype(np.float32)  # the corrected lambda: timm recomputes it from the box
    cutmix = np.array([kind(r) == "cutmix" for r in rows])
    for i, row in enumerate(rows):
        if kind(row) == "mixup":
            lams[i] = row[INPUT_SELF].item()
    # rand_bbox / rand_bbox_minmax are called once per CutMix sample (per pair in pair mode), in sample order.
    count = n // 2 if mode == "pair" else n
    boxes = iter([box(rows[i]) for i in range(count) if cutmix[i] and kind(rows[i]) != "none"])
    monkeypatch.setattr(timm_mixup, "rand_bbox", lambda *args, **kwargs: next(boxes))
    monkeypatch.setattr(timm_mixup, "rand_bbox_minmax", lambda *args, **kwargs: next(boxes))
    if mode == "batch":
        monkeypatch.setattr(mixer, "_params_per_batch", lambda: (float(lams[0]), bool(cutmix[0])))
    else:
        monkeypatch.setattr(mixer, "_params_per_elem", lambda size: (lams[:size].copy(), cutmix[:size].copy()))


CASES = [  # (our config, timm's Mixup arguments, the kind of draw to compare)
    (dict(mixup_alpha=0.8), dict(mixup_alpha=0.8, cutmix_alpha=0.0), "mixup"),
    (dict(cutmix_alpha=1.0), dict(mixup_alpha=0.0, cutmix_alpha=1.0), "cutmix"),
    (dict(cutmix_alpha=1.0, correct_lam=False), dict(mixup_alpha=0.0, cutmix_alpha=1.0, correct_lam=False), "cutmix"),
    (dict(cutmix_minmax=[0.2, 0.8]), dict(mixup_alpha=0.0, cutmix_minmax=[0.2, 0.8]), "cutmix"),
    (dict(mixup_alpha=0.5, prob=0.5), dict(mixup_alpha=0.5, prob=0.5), "none"),
]


@pytest.mark.parametrize("ours,theirs,wanted", CASES)
@pytest.mark.parametrize("channels_last", [False, True])
def test_batch_mode_mixes_inputs_and_targets_as_timm(monkeypatch, timm_mixup, ours, theirs, wanted, channels_last):
    n, classes, smoothing = 6, 5, 0.1
    x, y = torch.randn(n, 3, 9, 11), torch.randint(0, classes, (n,))
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    rows = first_draw(mix_config(**ours), n, 9, 11, wanted)
    assert all(torch.equal(row, rows[0]) for row in rows)  # batch mode: one draw for all
    mixer = timm_mixup.Mixup(label_smoothing=smoothing, num_classes=classes, **theirs)
    patch_timm_draws(monkeypatch, timm_mixup, mixer, rows, "batch")
    their_x, their_y = mixer(x.clone(), y)
    mixed = torch.ops.gpucore.mix_inputs(x, rows)
    assert mixed.is_contiguous(memory_format=torch.channels_last) == channels_last
    torch.testing.assert_close(mixed, their_x, rtol=0, atol=1e-6)
    if wanted != "mixup":
        assert torch.equal(mixed, their_x)  # pasted or untouched pixels are copies
    torch.testing.assert_close(torch.ops.gpucore.mix_targets(y, rows, classes, smoothing), their_y, rtol=0, atol=1e-6)


@pytest.mark.parametrize("mode", ["elem", "pair"])
def test_elem_and_pair_modes_mix_as_timm(monkeypatch, timm_mixup, mode):
    n, classes = 8, 7
    x, y = torch.randn(n, 2, 10, 10), torch.randint(0, classes, (n,))
    config = mix_config(mixup_alpha=0.4, cutmix_alpha=1.0, prob=0.8, mode=mode)
    rows = first_draw(config, n, 10, 10, "mixup", "cutmix", "none")
    if mode == "pair":
        assert all(torch.equal(rows[i], rows[n - 1 - i]) for i in range(n))
    mixer = timm_mixup.Mixup(mixup_alpha=0.4, cutmix_alpha=1.0, prob=0.8, mode=mode, label_smoothing=0.0,
                             num_classes=classes)
    patch_timm_draws(monkeypatch, timm_mixup, mixer, rows, mode)
    their_x, their_y = mixer(x.clone(), y)
    torch.testing.assert_close(torch.ops.gpucore.mix_inputs(x, rows), their_x, rtol=0, atol=1e-6)
    torch.testing.assert_close(torch.ops.gpucore.mix_targets(y, rows, classes, 0.0), their_y, rtol=0, atol=1e-6)


def test_an_odd_batch_in_pair_mode_keeps_its_middle_sample():
    rows = _C.draw_mix(mix_config(mixup_alpha=1.0, mode="pair"), 0, 0, 5, 4, 4)
    assert kind(rows[2]) == "none" and all(kind(rows[i]) == "mixup" for i in (0, 1, 3, 4))


def test_the_engine_trains_on_timm_mixed_batches_with_their_soft_target_loss_and_scores_the_true_labels(
        monkeypatch, timm_mixup):
    """One batch through the engine: the model sees timm's mixed inputs, the loss is timm's SoftTargetCrossEntropy of
    its soft targets, accuracy and top-2 accuracy count the true labels (by hand)."""
    timm_loss = require("timm.loss")
    n, classes, smoothing, epoch = 8, 5, 0.1, 2
    x, y = torch.randn(n, 1, 6, 6), torch.randint(0, classes, (n,))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(36, classes))
    seen = {}
    model.register_forward_hook(lambda module, args, output: seen.update(inputs=args[0].clone(),
                                                                          output=output.detach().clone()))
    config = _C.EngineConfig()
    config.top_k, config.loss.label_smoothing = 2, smoothing
    config.mixup = mix_config(mixup_alpha=0.5, cutmix_alpha=1.0, seed=11)
    engine = _C.Engine([_C.ParamGroup(list(model.parameters()))], config)
    stats = engine.train_epoch(_C.TensorBatches(x, y, n, False, False, 0, torch.device("cpu")), model, None, None,
                               epoch=epoch, first_batch=0)
    rows = _C.draw_mix(config.mixup, epoch, 0, n, 6, 6)
    assert kind(rows[0]) != "none"
    mixer = timm_mixup.Mixup(mixup_alpha=0.5, cutmix_alpha=1.0, label_smoothing=smoothing, num_classes=classes)
    patch_timm_draws(monkeypatch, timm_mixup, mixer, rows, "batch")
    their_x, their_y = mixer(x.clone(), y)
    torch.testing.assert_close(seen["inputs"], their_x, rtol=0, atol=1e-6)
    their_loss = timm_loss.SoftTargetCrossEntropy()(seen["output"], their_y).item()
    assert stats["metrics"]["loss"] == pytest.approx(their_loss, rel=1e-5)
    assert stats["metrics"]["accuracy"] == (seen["output"].argmax(1) == y).float().mean().item()
    top2 = (seen["output"].topk(2, 1).indices == y[:, None]).any(1).float().mean().item()
    assert stats["metrics"]["top2_accuracy"] == top2


def test_draws_follow_timms_distribution(timm_mixup):
    """Many draws of ours and of timm's: the share mixed, the share CutMix, lambda's distribution (two-sample
    Kolmogorov-Smirnov), with the box's clipping (correct_lam) and without."""
    stats = require("scipy.stats")
    draws = 20000
    for correct_lam in (False, True):
        ours = _C.draw_mix(mix_config(mixup_alpha=0.4, cutmix_alpha=1.0, prob=0.7, switch_prob=0.4, mode="elem",
                                      correct_lam=correct_lam, seed=5), 0, 0, draws, 32, 32)
        our_kinds = [kind(r) for r in ours]
        mixer = timm_mixup.Mixup(mixup_alpha=0.4, cutmix_alpha=1.0, prob=0.7, switch_prob=0.4, correct_lam=correct_lam)
        np.random.seed(5)
        lams, cutmixes = mixer._params_per_elem(draws)
        their_kinds, their_lams = [], {"mixup": [], "cutmix": []}
        for lam, cutmix in zip(lams.tolist(), cutmixes.tolist()):
            if lam == 1.0:
                their_kinds.append("none")
                continue
            if cutmix:
                _, lam = timm_mixup.cutmix_bbox_and_lam((32, 32), lam, correct_lam=correct_lam)
            their_kinds.append("cutmix" if cutmix else "mixup")
            their_lams[their_kinds[-1]].append(lam)
        for name in ("none", "cutmix"):
            p1, p2 = our_kinds.count(name) / draws, their_kinds.count(name) / draws
            spread = np.sqrt((p1 * (1 - p1) + p2 * (1 - p2)) / draws)
            assert abs(p1 - p2) < 4 * spread, (name, p1, p2)
        for name in ("mixup", "cutmix"):
            our_lams = [r[TARGET_SELF].item() for r, k in zip(ours, our_kinds) if k == name]
            assert stats.ks_2samp(our_lams, their_lams[name]).pvalue > 1e-3, (name, correct_lam)


def test_batch_mode_draws_depend_on_seed_epoch_and_batch_only():
    config = mix_config(mixup_alpha=1.0, cutmix_alpha=1.0, seed=3)
    assert torch.equal(_C.draw_mix(config, 4, 7, 8, 16, 16), _C.draw_mix(config, 4, 7, 8, 16, 16))
    others = [_C.draw_mix(config, 4, 8, 8, 16, 16), _C.draw_mix(config, 5, 7, 8, 16, 16),
              _C.draw_mix(mix_config(mixup_alpha=1.0, cutmix_alpha=1.0, seed=4), 4, 7, 8, 16, 16)]
    assert all(not torch.equal(other, _C.draw_mix(config, 4, 7, 8, 16, 16)) for other in others)


def test_mix_ops_pass_opcheck():
    rows = _C.draw_mix(mix_config(mixup_alpha=1.0, cutmix_alpha=1.0, mode="elem"), 0, 0, 6, 5, 7)
    torch.library.opcheck(torch.ops.gpucore.mix_inputs, (torch.randn(6, 3, 5, 7), rows))
    torch.library.opcheck(torch.ops.gpucore.mix_targets, (torch.randint(0, 4, (6,)), rows, 4, 0.1))


@pytest.mark.slow
def test_a_mixed_run_with_accumulation_and_bf16_resumes_bitwise_mid_epoch(tmp_path):
    class StopInEpoch2:
        def on_log(self, trainer, step, metrics):
            if metrics["epoch"] == 2 and step == 5:  # 3 steps an epoch: mid-epoch 2
                raise KeyboardInterrupt

    config = dict(data="synthetic_fashion", data_kwargs={"train_size": 192, "val_size": 32, "seed": 3},
                  progress=False, report=False, batch_size=32, epochs=2, seed=7, log_every_n_steps=1,
                  accumulate_grad_batches=2, precision="bf16-mixed", channels_last="true", mixup_alpha=0.4,
                  cutmix_alpha=1.0, label_smoothing=0.1, device="cpu")
    straight, _, resumed = assert_resume_matches(tmp_path, config, StopInEpoch2())
    assert resumed.status == "completed"
    # Mixed batches: a different model than without mixup, with the true labels' accuracy reported.
    plain = gpucore.train(dict(config, run_dir=str(tmp_path / "c"), mixup_alpha=0.0, cutmix_alpha=0.0))
    first = next(iter(plain.model.state_dict()))
    assert not torch.equal(plain.model.state_dict()[first], straight.model.state_dict()[first])
    assert 0 <= straight.history[-1]["train_accuracy"] <= 1


@pytest.mark.parametrize("overrides,key", [
    ({"mixup_alpha": -0.1}, "mixup_alpha"),
    ({"cutmix_alpha": -1}, "cutmix_alpha"),
    ({"cutmix_minmax": [0.8, 0.2]}, "cutmix_minmax"),
    ({"cutmix_minmax": [0.5]}, "cutmix_minmax"),
    ({"mixup_prob": 1.5}, "mixup_prob"),
    ({"mixup_switch_prob": -0.2}, "mixup_switch_prob"),
    ({"mixup_mode": "row"}, "mixup_mode"),
])
def test_bad_values_are_config_errors_naming_the_key(overrides, key):
    with pytest.raises(gpucore.ConfigError, match=key):
        load_config(None, overrides)


@pytest.mark.parametrize("loss,heads,said", [("multilabel_soft_margin", 0, "multilabel_soft_margin"),
                                             ("dice_bce", 0, "dice_bce"), ("ctc", 0, "ctc"),
                                             ("multilabel_soft_margin", 4, "multilabel_soft_margin with 4 heads")])
def test_mixing_other_tasks_is_a_config_error_naming_the_key_and_the_loss(loss, heads, said):
    engine = _C.EngineConfig()
    engine.loss.kind, engine.loss.heads = loss, heads
    engine.mixup = mixup_config(load_config(None, {"cutmix_alpha": 1.0}))
    with pytest.raises(gpucore.ConfigError, match=f"config key 'cutmix_alpha' mixes one-hot class targets.*loss is "
                                                  f"{said}: set cutmix_alpha to its default"):
        _C.Engine([_C.ParamGroup([nn.Parameter(torch.zeros(2))])], engine)


def test_engine_checks_of_what_it_can_only_see_in_the_batch():
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))

    def train(mixup, x):
        config = _C.EngineConfig()
        config.mixup = mixup
        engine = _C.Engine([_C.ParamGroup(list(model.parameters()))], config)
        engine.train_epoch(_C.TensorBatches(x, torch.randint(0, 3, (4,)), 4, False, False, 0, torch.device("cpu")),
                           model)

    with pytest.raises(gpucore.ConfigError, match="cutmix_alpha.*N x C x H x W"):
        train(mix_config(cutmix_alpha=1.0), torch.randn(4, 4))
    with pytest.raises(gpucore.ConfigError, match="cutmix_minmax.*2 x 2"):
        train(mix_config(cutmix_minmax=[0.1, 0.3]), torch.randn(4, 1, 2, 2))
    train(mix_config(mixup_alpha=1.0), torch.randn(4, 4))  # mixup alone mixes any floating-point inputs


@pytest.mark.slow
def test_two_data_parallel_ranks_mix_their_shards_and_agree(tmp_path):
    from test_distributed import MODELS, WORKER, run_jobs

    (tmp_path / "ddp_models.py").write_text(MODELS)
    (tmp_path / "worker.py").write_text(WORKER)
    keys = {"mixup_alpha": 0.4, "cutmix_alpha": 1.0, "label_smoothing": 0.1}
    # Unmixed, one process with the same global batch trains as the two ranks do to 1e-5 (test_distributed).
    two, (plain,) = run_jobs(((tmp_path, tmp_path / "two", 2, 16, 2), {"keys": keys}),
                             ((tmp_path, tmp_path / "plain", 1, 32, 2), {}))
    assert_states_equal(two[1], two[0])
    assert not torch.allclose(two[0]["1.weight"], plain["1.weight"], rtol=1e-3, atol=1e-4)
    stats = json.load(open(tmp_path / "two" / "ddp" / "training_stats.json"))
    assert stats["status"] == "completed" and "train_accuracy" in stats["epochs"][-1]
