"""Config key val_fraction on the caller's data (gpucore.train(train_data=...) without val_data): a seeded split of
tensors, gpucore data sets and torch Datasets, recorded in training_stats.json, the same after a resume; data it
cannot split (a DataLoader) is a ConfigError, never a run that silently skips validation."""
import json

import pytest
import torch
from torch import nn

import gpucore
from conftest import Pairs, assert_resume_matches

SAMPLES, SEED = 200, 5


def samples(n=SAMPLES, seed=1):
    """(inputs, targets); column 0 of each input is its position, so a model can tell which samples it saw."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=generator)
    x[:, 0] = torch.arange(n, dtype=torch.float32)
    return x, torch.randint(0, 5, (n,), generator=generator)


class Seen(nn.Module):
    """A small MLP that records the positions (input column 0) it is given in training and in evaluation."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.net = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 5))
        self.trained_on, self.evaluated_on = [], []

    def forward(self, x):
        (self.trained_on if self.training else self.evaluated_on).extend(x[:, 0].long().tolist())
        return self.net(x)


FORMS = {"tensors": lambda x, y: (x, y), "gpucore data set": gpucore.data.from_tensors, "torch Dataset": Pairs}


def config(tmp_path, name, **overrides):
    return dict(dict(run_dir=str(tmp_path), name=name, progress=False, device="cpu", precision="32", epochs=1,
                     batch_size=32, normalize=False, val_fraction=0.25, seed=SEED), **overrides)


def validation(result):
    return json.load(open(result.stats_path))["validation"]


def by_hand(seed, n=SAMPLES, fraction=0.25):
    """The split val_fraction promises, computed here: the first round(n x fraction) of a seeded permutation."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    held_out = round(n * fraction)
    return order[held_out:], order[:held_out]


@pytest.mark.parametrize("form", FORMS)
def test_val_fraction_validates_on_the_recorded_split_and_trains_on_the_rest(tmp_path, form):
    x, y = samples()
    model = Seen()
    result = gpucore.train(config(tmp_path, "run"), model=model, train_data=FORMS[form](x, y))
    train_index, val_index = by_hand(SEED)
    recorded = validation(result)
    assert recorded["source"] == "val_fraction" and recorded["of"] == "train_data"
    assert (recorded["val_fraction"], recorded["seed"], recorded["samples"]) == (0.25, SEED, SAMPLES)
    assert (recorded["val_samples"], recorded["train_samples"]) == (50, 150)
    assert recorded["val_indices"] == val_index
    assert model.evaluated_on == val_index  # validated on exactly those, once, in that order
    assert sorted(model.trained_on) == sorted(train_index)  # trained on the rest, each once in the epoch
    assert result.steps == 5  # ceil(150 / 32)
    row = result.history[0]
    assert result.monitor == "val_accuracy" and result.best_metric == row["val_accuracy"]
    with torch.no_grad():  # plain PyTorch on the held-out samples, with the trained model
        outputs = model.net(x[val_index])
        loss = nn.functional.cross_entropy(outputs, y[val_index]).item()
        accuracy = (outputs.argmax(1) == y[val_index]).float().mean().item()
    assert row["val_loss"] == pytest.approx(loss, rel=1e-5)
    assert row["val_accuracy"] == pytest.approx(accuracy, abs=1e-6)


def test_the_split_follows_the_seed_and_not_the_global_random_state(tmp_path):
    x, y = samples()
    first = gpucore.train(config(tmp_path, "first"), model=Seen(), train_data=(x, y))
    torch.manual_seed(1234)
    torch.rand(100)
    again = gpucore.train(config(tmp_path, "again"), model=Seen(), train_data=(x, y))
    other = gpucore.train(config(tmp_path, "other", seed=6), model=Seen(), train_data=(x, y))
    assert validation(again)["val_indices"] == validation(first)["val_indices"]
    assert validation(other)["val_indices"] == by_hand(6)[1] != validation(first)["val_indices"]
    assert again.history[0]["val_loss"] == first.history[0]["val_loss"]


@pytest.mark.parametrize("form", ["tensors", "torch Dataset"])
def test_resume_keeps_the_split_and_is_bitwise_exact(tmp_path, one_thread, form):
    class StopInEpoch2:
        def on_log(self, trainer, step, metrics):
            if metrics["epoch"] == 2:
                raise KeyboardInterrupt

    x, y = samples()
    straight, stopped, resumed = assert_resume_matches(
        tmp_path, config(tmp_path, "run", epochs=3, log_every_n_steps=2), StopInEpoch2(),
        given=lambda: dict(model=Seen(), train_data=FORMS[form](x, y)))
    assert len(stopped.history) == 1
    assert validation(resumed) == validation(straight) == validation(stopped)
    assert [r["val_loss"] for r in resumed.history] == [r["val_loss"] for r in straight.history]


def test_val_data_given_turns_val_fraction_off(tmp_path):
    x, y = samples()
    model = Seen()
    xv, yv = samples(40, seed=2)
    result = gpucore.train(config(tmp_path, "given"), model=model, train_data=(x, y), val_data=(xv, yv))
    assert validation(result) == {"source": "val_data"}
    assert sorted(model.trained_on) == list(range(SAMPLES)) and len(model.evaluated_on) == 40


def test_the_callers_data_is_not_split_unless_val_fraction_is_set(tmp_path):
    x, y = samples()
    model = Seen()
    result = gpucore.train(config(tmp_path, "unset", val_fraction=None), model=model, train_data=(x, y))
    assert validation(result) is None and "val_loss" not in result.history[0]
    assert sorted(model.trained_on) == list(range(SAMPLES)) and model.evaluated_on == []


def test_data_that_cannot_be_split_is_a_clear_error(tmp_path):
    x, y = samples()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=32)
    with pytest.raises(gpucore.ConfigError, match=r"'val_fraction'.*DataLoader.*pass val_data, set val_fraction: 0 "
                                                  r"\(no validation\), or pass the DataLoader's Dataset"):
        gpucore.train(config(tmp_path, "loader"), model=Seen(), train_data=loader)

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(zip(x, y))

    with pytest.raises(gpucore.ConfigError, match=r"'val_fraction'.*train_data is a Stream, which has no samples to "
                                                  r"pick by position.*val_fraction: 0"):
        gpucore.train(config(tmp_path, "stream"), model=Seen(), train_data=Stream())
    with pytest.raises(gpucore.ConfigError, match=r"'val_fraction': 0.5 of 1 training sample\(s\) leaves none"):
        gpucore.train(config(tmp_path, "one", val_fraction=0.5), model=Seen(), train_data=(x[:1], y[:1]))
    loaded = gpucore.train(config(tmp_path, "loader0", val_fraction=0), model=Seen(), train_data=loader)
    assert validation(loaded) is None and loaded.steps == 7  # val_fraction 0: the whole loader, no validation


def test_config_data_is_split_by_the_same_code_and_recorded_alike(tmp_path):
    kwargs = {"train_size": 100, "val_size": 0, "seed": 2}
    linear = lambda: nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 10))  # noqa: E731
    named = dict(config(tmp_path, "named", val_fraction=None, batch_size=30), data="synthetic_fashion",
                 data_kwargs=kwargs)
    result = gpucore.train(named, model=linear())
    recorded = validation(result)
    assert recorded["source"] == "val_fraction" and recorded["of"] == "data: synthetic_fashion"
    assert recorded["val_indices"] == by_hand(SEED, 100, 0.1)[1] and recorded["val_fraction"] == 0.1
    (x, _), (xv, _) = gpucore.data.builtin.load_data("synthetic_fashion", kwargs, None, SEED)  # what evaluate reads
    assert torch.equal(xv, gpucore.data.synthetic.synthetic_fashion(**kwargs)[0][0][recorded["val_indices"]])
    assert result.steps == 3 and len(x) == 90  # 90 in batches of 30
    given = gpucore.train(dict(named, name="given"), model=linear(), val_data=(xv, torch.zeros(10, dtype=torch.long)))
    assert validation(given) == {"source": "val_data"} and given.steps == 4  # all 100
    own = gpucore.train(dict(named, name="own", data_kwargs=dict(kwargs, val_size=20)), model=linear())
    assert validation(own) == {"source": "held_out_split", "of": "data: synthetic_fashion"}
