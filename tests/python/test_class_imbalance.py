"""A user's loss (float32 outputs outside autocast, named in errors, config.json and evaluate) and class imbalance
(config keys class_weights and sampler, the support in plots/per_class.png, monitor: auto following balanced accuracy
and best.pt its best epoch), each against plain PyTorch or scikit-learn on fresh random data or real photos' crops."""
import copy
import functools
import json
import os

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn
from torch.nn import functional as F

import gpucore
from gpucore.config import KEY_BY_NAME, load_config
from gpucore.data.class_balance import (IMBALANCE_RATIO, balanced_sampling_weights, class_labels, imbalance,
                                        resolve_class_weights)
from gpucore.data.epoch_data import training_set
from gpucore.data.torch_samples import dataset_samples
from gpucore.report import plots
from gpucore.report.page import confusion, per_class
from conftest import Pairs, assert_resume_matches, require

FEATURES, CLASSES = 12, 4
# One epoch in fixed batches, a plain optimizer in float32 (auto is bf16 on a CPU with native bf16): a plain PyTorch
# loop can take the same steps.
PLAIN = dict(epochs=1, batch_size=16, shuffle=False, normalize=False, optimizer="sgd", momentum=0.0,
             weight_decay=0.0, schedule="constant", lr=0.1, device="cpu", precision="32", progress=False,
             report=False, log_every_n_steps=1, val_fraction=0.0)


def data(samples, generator, counts=None):
    """(inputs, labels): float features and class indices, `counts` samples per class when given (shuffled)."""
    labels = (torch.randint(0, CLASSES, (samples,), generator=generator) if counts is None else
              torch.cat([torch.full((n,), c) for c, n in enumerate(counts)])[torch.randperm(sum(counts),
                                                                                          generator=generator)])
    return torch.randn(len(labels), FEATURES, generator=generator), labels


def mlp(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, 16), nn.ReLU(), nn.Linear(16, CLASSES))


class StepLosses(gpucore.Callback):
    """The running mean of the training loss after each optimizer step (log_every_n_steps: 1)."""

    def __init__(self):
        self.losses = []

    def on_log(self, trainer, step, metrics):
        self.losses.append(metrics["loss"])


def plain_loop(model, x, y, batch_size, lr, loss, autocast_dtype=None):
    """Each batch's loss in a plain PyTorch (AMP) loop: forward and loss under autocast, SGD."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for start in range(0, len(x), batch_size):
        with torch.autocast("cpu", dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
            value = loss(model(x[start:start + batch_size]), y[start:start + batch_size])
        optimizer.zero_grad()
        value.backward()
        optimizer.step()
        losses.append(value.item())
    return losses


def running_means(losses):
    return [float(np.mean(losses[:i + 1])) for i in range(len(losses))]


def test_a_weighted_user_loss_under_bf16_mixed_trains_as_a_plain_amp_loop(tmp_path):
    # bf16-mixed is what precision: auto picks on a GPU with bfloat16 (the CPU here picks 32).
    generator = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    x, y = data(96, generator)
    weight = torch.rand(CLASSES, generator=generator) + 0.25
    loss = functools.partial(F.cross_entropy, weight=weight)
    model, steps = mlp(1), StepLosses()
    reference = plain_loop(copy.deepcopy(model), x, y, 16, 0.1, loss, torch.bfloat16)
    result = gpucore.train(dict(PLAIN, precision="bf16-mixed", run_dir=str(tmp_path)), model=model,
                           train_data=(x, y), loss=loss, callbacks=[steps])
    assert result.precision == "bf16-mixed"
    np.testing.assert_allclose(steps.losses, running_means(reference), rtol=2e-2)
    np.testing.assert_allclose(result.history[0]["train_loss"], np.mean(reference), rtol=2e-2)


def test_the_loss_receives_float32_outputs_outside_autocast(tmp_path):
    seen = []

    def loss(output, target):
        seen.append((output.dtype, torch.is_autocast_enabled("cpu"), target.dtype))
        return F.cross_entropy(output, target)

    x, y = data(32, torch.Generator().manual_seed(2))
    gpucore.train(dict(PLAIN, precision="bf16-mixed", run_dir=str(tmp_path)), model=mlp(0), train_data=(x, y),
                  loss=loss)
    assert set(seen) == {(torch.float32, False, torch.int64)}


def test_an_error_inside_the_loss_names_the_loss_not_the_models_input(tmp_path):
    def shape_blind_loss(output, target):
        return F.nll_loss(output, target.float())  # wrong target dtype: raises inside the loss

    x, y = data(32, torch.Generator().manual_seed(3))
    with pytest.raises(gpucore.TrainingError) as raised:
        gpucore.train(dict(PLAIN, run_dir=str(tmp_path)), model=mlp(0), train_data=(x, y), loss=shape_blind_loss)
    message = str(raised.value)
    assert "the loss callable test_class_imbalance:test_an_error_inside_the_loss_names_the_loss_not_the_models_input" \
           ".<locals>.shape_blind_loss" in message and "raised RuntimeError" in message
    assert "fits the data" not in message and "image size" not in message


@pytest.mark.usefixtures("figures_skipped")  # checks numbers, rows and files: no figure
def test_config_json_names_the_callable_and_evaluate_says_which_loss_it_used_instead(tmp_path):
    generator = torch.Generator().manual_seed(4)
    (x, y), (xv, yv) = data(64, generator), data(32, generator)
    loss = functools.partial(F.cross_entropy, weight=torch.tensor([1.0, 2.0, 3.0, 4.0]))
    result = gpucore.train(dict(PLAIN, run_dir=str(tmp_path)), model=mlp(0), train_data=(x, y), val_data=(xv, yv),
                           loss=loss)
    with open(os.path.join(result.run_dir, "config.json")) as handle:
        recorded = json.load(handle)
    assert recorded["loss_callable"] == "functools.partial(torch.nn.functional:cross_entropy, weight=...)"
    summary = gpucore.evaluate(os.path.join(result.checkpoint_dir, "last.pt"), data=(xv, yv), model=mlp(0))
    assert summary["loss"] == "cross_entropy"
    assert "functools.partial(torch.nn.functional:cross_entropy, weight=...)" in summary["loss_note"]
    assert "not the loss of the run's val_loss" in summary["loss_note"]
    with open(os.path.join(result.run_dir, "evaluate-all", "evaluation.json")) as handle:
        assert json.load(handle)["loss_note"] == summary["loss_note"]
    # The built-in loss it reports is the unweighted one, which differs from the run's weighted val_loss.
    model = result.model.eval()
    with torch.no_grad():
        assert summary["metrics"]["loss"] == pytest.approx(F.cross_entropy(model(xv), yv).item(), rel=1e-5)
    # A config that records a loss callable does not train silently with the built-in loss.
    with pytest.raises(gpucore.ConfigError, match="config key 'loss_callable'.*pass it to gpucore.train"):
        gpucore.train(dict(recorded, run_dir=str(tmp_path / "again"), resume=None), model=mlp(0), train_data=(x, y))


def test_balanced_class_weights_are_scikit_learns():
    utils = require("sklearn.utils")
    generator = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    counts = (torch.randint(1, 60, (7,), generator=generator)).tolist()
    labels = torch.cat([torch.full((n,), c) for c, n in enumerate(counts)])
    expected = utils.compute_class_weight("balanced", classes=np.arange(7), y=labels.numpy())
    np.testing.assert_allclose(resolve_class_weights("balanced", labels, 7, None), expected, rtol=1e-12)


def test_a_balanced_run_trains_with_and_records_scikit_learns_weights(tmp_path):
    utils = require("sklearn.utils")
    generator = torch.Generator().manual_seed(5)
    x, y = data(0, generator, counts=[50, 20, 8, 2])
    expected = utils.compute_class_weight("balanced", classes=np.arange(CLASSES), y=y.numpy())
    model = mlp(0)
    reference = plain_loop(copy.deepcopy(model), x, y, 16, 0.1,
                           functools.partial(F.cross_entropy, weight=torch.tensor(expected, dtype=torch.float32)))
    result = gpucore.train(dict(PLAIN, class_weights="balanced", run_dir=str(tmp_path)), model=model,
                           train_data=(x, y))
    with open(result.stats_path) as handle:
        stats = json.load(handle)
    np.testing.assert_allclose([stats["class_weights"][str(c)] for c in range(CLASSES)], expected, rtol=1e-12)
    assert stats["config"]["class_weights"] == "balanced" and stats["config"]["sampler"] == "none"
    np.testing.assert_allclose(result.history[0]["train_loss"], np.mean(reference), rtol=1e-5)


def test_listed_class_weights_train_and_validate_as_torchs_weighted_cross_entropy(tmp_path):
    generator = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    (x, y), (xv, yv) = data(64, generator), data(40, generator)
    weights = (torch.rand(CLASSES, generator=generator) * 3 + 0.1).tolist()
    model, steps = mlp(2), StepLosses()
    reference_model = copy.deepcopy(model)
    weighted = functools.partial(F.cross_entropy, weight=torch.tensor(weights))
    reference = plain_loop(reference_model, x, y, 16, 0.1, weighted)
    result = gpucore.train(dict(PLAIN, class_weights=weights, run_dir=str(tmp_path)), model=model,
                           train_data=(x, y), val_data=(xv, yv), callbacks=[steps])
    np.testing.assert_allclose(steps.losses, running_means(reference), rtol=1e-5)
    for ours, theirs in zip(result.model.parameters(), reference_model.parameters()):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    with torch.no_grad():  # validation's loss is weighted too: sum(w[t] * l) / sum(w[t]) over the validation set
        expected_val = weighted(reference_model(xv), yv).item()
    assert result.history[0]["val_loss"] == pytest.approx(expected_val, rel=1e-5)
    with open(result.stats_path) as handle:
        assert list(json.load(handle)["class_weights"].values()) == pytest.approx(weights, rel=1e-7)


@pytest.mark.parametrize("overrides,match", [
    ({"class_weights": [1.0, -2.0]}, r"config key 'class_weights' is \[1.0, -2.0\]; it must be"),
    ({"class_weights": [1.0, float("nan")]}, r"config key 'class_weights' is \[1.0, nan\]"),
    ({"class_weights": "inverse"}, r"config key 'class_weights' must be a list .* or one of none, balanced"),
    ({"sampler": "weighted"}, r"config key 'sampler' is 'weighted'; valid values: none, balanced"),
])
def test_bad_values_of_the_keys_are_config_errors_naming_the_key(overrides, match):
    with pytest.raises(gpucore.ConfigError, match=match):
        load_config(None, overrides)


def test_class_weights_that_do_not_fit_the_run_are_config_errors(tmp_path):
    x, y = data(0, torch.Generator().manual_seed(6), counts=[10, 6, 0, 4])
    run = dict(PLAIN, run_dir=str(tmp_path))
    with pytest.raises(gpucore.ConfigError, match=r"config key 'class_weights' has 3 weights, but the data has 4 "
                                                  r"classes"):
        gpucore.train(dict(run, class_weights=[1, 2, 3]), model=mlp(0), train_data=(x, y))
    with pytest.raises(gpucore.ConfigError, match=r"class_weights' is balanced, but class 2 has no training samples"):
        gpucore.train(dict(run, class_weights="balanced"), model=mlp(0), train_data=(x, y))
    with pytest.raises(gpucore.ConfigError, match=r"loss 'ctc' \(CTC.*\) takes no class weights"):
        gpucore.train(dict(run, class_weights="balanced", loss="ctc"), model=mlp(0), train_data=(x, y))
    with pytest.raises(gpucore.ConfigError, match=r"loss 'bce_with_logits' .* takes no class weights"):
        gpucore.train(dict(run, class_weights=[1, 1, 1, 1], loss="bce_with_logits"), model=mlp(0), train_data=(x, y))
    with pytest.raises(gpucore.ConfigError, match=r"class_weights' weighs the built-in loss 'cross_entropy', which "
                                                  r"train\(\)'s loss argument \(torch.nn.functional:cross_entropy\)"):
        gpucore.train(dict(run, class_weights="balanced"), model=mlp(0), train_data=(x, y), loss=F.cross_entropy)


def epoch_labels(train_data, seed, epoch, **overrides):
    """The labels of the training samples sampler: balanced serves in epoch `epoch`, in order."""
    config = load_config(None, dict(sampler="balanced", seed=seed, batch_size=64, normalize=False, **overrides))
    labels = class_labels(dataset_samples(train_data), "sampler")
    weights = balanced_sampling_weights(labels, int(labels.max()) + 1)
    source = training_set(train_data, config, torch.device("cpu"), sampling_weights=weights)
    return torch.cat([targets for _, targets in source.batches(epoch)])


def test_the_balanced_sampler_draws_each_class_equally_often_seeded_by_seed_and_epoch():
    generator = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    x, y = data(0, generator, counts=[1800, 200])  # 9:1
    drawn = epoch_labels((x, y), seed=3, epoch=0)
    assert len(drawn) == 2000
    counts = torch.bincount(drawn, minlength=2)
    # Each draw is class 0 with probability 1/2: 1000 each, binomial sd sqrt(2000 / 4) = 22.4; 5 sd.
    assert abs(int(counts[0]) - 1000) < 112, counts
    # Exactly torch.multinomial's draws from the shuffle's generator (seed * 1000003 + epoch), by 1 / class count.
    weights = 1.0 / torch.bincount(y).double()[y]
    expected = torch.multinomial(weights, 2000, True, generator=torch.Generator().manual_seed(3 * 1000003 + 0))
    assert torch.equal(drawn, y[expected])
    assert torch.equal(epoch_labels((x, y), seed=3, epoch=0), drawn)
    assert not torch.equal(epoch_labels((x, y), seed=4, epoch=0), drawn)
    assert not torch.equal(epoch_labels((x, y), seed=3, epoch=1), drawn)
    # A torch Dataset's loader draws the same samples, from the same generator.
    assert torch.equal(epoch_labels(Pairs(x, y), seed=3, epoch=0), drawn)


def test_a_run_with_the_balanced_sampler_resumes_mid_epoch_bitwise(tmp_path):
    class StopInEpoch2:
        def on_log(self, trainer, step, metrics):
            if metrics["epoch"] == 2 and step == 6:  # 4 steps an epoch: mid-epoch 2
                raise KeyboardInterrupt

    x, y = data(0, torch.Generator().manual_seed(7), counts=[90, 10, 20, 8])
    config = dict(PLAIN, epochs=2, batch_size=32, shuffle=True, sampler="balanced", optimizer="adamw", seed=11)
    straight, _, _ = assert_resume_matches(tmp_path, config, StopInEpoch2(),
                                           given=lambda: dict(model=mlp(3), train_data=(x, y)))
    with open(straight.stats_path) as handle:
        assert json.load(handle)["sampler"] == "balanced"


def test_per_class_png_labels_each_class_with_its_support():
    generator = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    targets = torch.randint(0, 5, (int(torch.randint(20, 200, (), generator=generator)),), generator=generator)
    predicted = torch.randint(0, 5, targets.shape, generator=generator)
    names = ["cat", "dog", "bird", "fish", "frog"]
    figure = plots.per_class_figure(per_class(confusion(targets, predicted, 5), names))
    labels = [tick.get_text() for tick in figure.axes[0].get_xticklabels()]
    support = np.bincount(targets.numpy(), minlength=5)
    assert labels == [f"{name} (n={n})" for name, n in zip(names, support)]


@pytest.mark.parametrize("cache", ["none", "host"])
def test_an_image_folder_weighs_and_samples_its_classes_by_their_counts(tmp_path, cache):
    from conftest import write_png
    from gpucore.data import read_image_folder

    utils = require("sklearn.utils")
    generator = torch.Generator().manual_seed(8)
    counts = {"cat": 18, "dog": 2}  # 9:1
    for name, count in counts.items():
        os.makedirs(tmp_path / "folder" / name)
        for i in range(count):
            write_png(tmp_path / "folder" / name / f"{i}.png", torch.randint(0, 255, (6, 6, 3), generator=generator,
                                                                             dtype=torch.uint8))
    folder = read_image_folder(str(tmp_path / "folder"))
    drawn = epoch_labels(folder, seed=5, epoch=3, cache=cache)  # streamed (FileBatches) or cached (TensorBatches)
    expected = torch.multinomial(1.0 / torch.bincount(folder.targets).double()[folder.targets], 20, True,
                                 generator=torch.Generator().manual_seed(5 * 1000003 + 3))
    assert torch.equal(drawn, folder.targets[expected])
    result = gpucore.train(dict(PLAIN, data=str(tmp_path / "folder"), cache=cache, class_weights="balanced",
                                sampler="balanced", run_dir=str(tmp_path / "run")),
                           model=nn.Sequential(nn.Flatten(), nn.Linear(3 * 6 * 6, 2)))
    with open(result.stats_path) as handle:
        weights = json.load(handle)["class_weights"]
    expected_weights = utils.compute_class_weight("balanced", classes=np.arange(2), y=folder.targets.numpy())
    assert list(weights) == ["cat", "dog"]
    np.testing.assert_allclose(list(weights.values()), expected_weights, rtol=1e-12)


def test_weighted_sample_losses_over_the_weights_sum_are_the_weighted_loss():
    from gpucore.tasks import task_for

    generator = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    outputs, targets = torch.randn(30, CLASSES, generator=generator), torch.randint(0, CLASSES, (30,),
                                                                                    generator=generator)
    weights = torch.rand(CLASSES, generator=generator) + 0.1
    per_sample = task_for("cross_entropy").with_class_weights(weights.tolist()).sample_losses(outputs, targets)
    torch.testing.assert_close(per_sample.sum() / weights[targets].sum(),
                               F.cross_entropy(outputs, targets, weight=weights))


def test_a_loss_is_named_by_module_and_qualname():
    from gpucore.training.user_loss import callable_name

    assert callable_name(F.cross_entropy) == "torch.nn.functional:cross_entropy"
    assert callable_name(nn.CrossEntropyLoss(weight=torch.ones(3))) == "torch.nn.modules.loss:CrossEntropyLoss()"
    assert (callable_name(functools.partial(F.cross_entropy, torch.ones(1), label_smoothing=0.1))
            == "functools.partial(torch.nn.functional:cross_entropy, ..., label_smoothing=...)")


def test_the_imbalance_ratio_counts_the_classes_with_samples():
    labels = lambda *counts: torch.cat([torch.full((n,), c) for c, n in enumerate(counts)])  # noqa: E731
    assert imbalance(labels(99, 10, 50), ["a", "b", "c"]) is None  # 9.9:1
    assert imbalance(labels(100, 10, 50), ["a", "b", "c"]) == ("the training classes are imbalanced: 'a' has 100 "
                                                             "samples, 'b' 10 (10:1, at least 10:1)")
    assert imbalance(labels(0, 95, 5, 0), None) == ("the training classes are imbalanced: class 1 has 95 samples, "
                                                    "class 2 5 (19:1, at least 10:1)")  # classes 0 and 3: none
    assert imbalance(labels(40), ["a"]) is None
    assert f"at least {IMBALANCE_RATIO}x the samples" in KEY_BY_NAME["monitor"].doc  # the reference states the ratio


def choose_monitor(tmp_path, counts, capsys, **keys):
    """The monitor of a one-epoch run on tensors with `counts` samples per class (training and validation)."""
    generator = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    result = gpucore.train(dict(PLAIN, run_dir=str(tmp_path), **keys), model=mlp(0),
                           train_data=data(0, generator, counts=counts), val_data=data(0, generator, counts=[4] * 4))
    return result.monitor, [line for line in capsys.readouterr().err.splitlines() if "monitor: auto" in line]


@pytest.mark.parametrize("counts, keys, monitor, because", [
    ([30, 30, 30, 3], {}, "val_balanced_accuracy", "the training classes are imbalanced: class 0 has 30 samples, "
                                                    "class 3 3 (10:1, at least 10:1)"),
    ([30, 30, 30, 4], {}, "val_accuracy", None),
    ([20, 20, 20, 20], {"sampler": "balanced"}, "val_balanced_accuracy", "config key sampler is balanced"),
    ([20, 20, 20, 20], {"class_weights": [1, 1, 2, 1]}, "val_balanced_accuracy", "config key class_weights is set"),
    ([30, 30, 30, 3], {"monitor": "val_accuracy"}, "val_accuracy", None),  # only auto is decided
])
def test_monitor_auto_follows_balanced_accuracy_under_imbalance_and_says_why(tmp_path, capsys, counts, keys, monitor,
                                                                            because):
    chosen, lines = choose_monitor(tmp_path, counts, capsys, **keys)
    assert chosen == monitor
    assert lines == ([f"gpucore: monitor: auto follows val_balanced_accuracy, not val_accuracy, because {because}"]
                     if because else [])


def rare_class_folder(root, train, val):
    """train/ and val/ folders of classes "common" (crops of china.jpg) and "rare" (crops of flower.jpg), 32 x 32
    JPEGs, `train` and `val` (common, rare) images each."""
    from test_photo_folders import _photos

    china, flower = _photos()
    for split, counts in (("train", train), ("val", val)):
        for name, photo, count in (("common", china, counts[0]), ("rare", flower, counts[1])):
            os.makedirs(os.path.join(root, split, name))
            for i in range(count):
                top, left = (20 if split == "train" else 250) + 3 * i, 37 * i % 600  # no crop in both splits
                Image.fromarray(photo[top:top + 32, left:left + 32]).save(os.path.join(root, split, name, f"{i}.jpg"))
    return str(root)


@pytest.mark.slow
@pytest.mark.usefixtures("figures_skipped")  # checks numbers, rows and files: no figure
def test_on_a_95_to_5_folder_best_pt_is_the_epoch_of_the_best_balanced_accuracy(tmp_path, capsys):
    sk_metrics = require("sklearn.metrics")
    folder = rare_class_folder(tmp_path / "photos", train=(57, 3), val=(12, 6))
    result = gpucore.train(dict(PLAIN, data=folder, model="fast_cnn", data_kwargs={"size": [32, 32]}, epochs=4,
                                batch_size=12, shuffle=True, normalize=True, optimizer="adamw", lr=0.003,
                                run_dir=str(tmp_path / "runs"), name="rare", seed=3))
    assert ("gpucore: monitor: auto follows val_balanced_accuracy, not val_accuracy, because the training classes "
            "are imbalanced: 'common' has 57 samples, 'rare' 3 (19:1, at least 10:1)") in capsys.readouterr().err
    with open(result.stats_path) as handle:
        stats = json.load(handle)
    history = [row["val_balanced_accuracy"] for row in stats["epochs"]]
    best = history.index(max(history)) + 1  # the first epoch of the best
    assert stats["best"] == {"metric": max(history), "epoch": best, "monitor": "val_balanced_accuracy"}
    checkpoint = os.path.join(result.run_dir, "checkpoints", "best.pt")
    assert torch.load(checkpoint, weights_only=False)["best"]["epoch"] == best
    # best.pt's predictions on the validation photos: their balanced accuracy and macro F1 are scikit-learn's.
    predictions = gpucore.predict(checkpoint, os.path.join(folder, "val"), device="cpu")
    truth, predicted = predictions.labels.numpy(), predictions.predicted.numpy()
    assert sk_metrics.balanced_accuracy_score(truth, predicted) == pytest.approx(history[best - 1], abs=1e-12)
    assert (sk_metrics.f1_score(truth, predicted, average="macro")
            == pytest.approx(stats["epochs"][best - 1]["val_f1_macro"], abs=1e-12))
    summary = gpucore.evaluate(checkpoint, device="cpu")  # evaluate's output has them too
    assert summary["metrics"]["balanced_accuracy"] == pytest.approx(history[best - 1], abs=1e-12)
