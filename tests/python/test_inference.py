"""gpucore.load: a checkpoint back as a model with its run's preprocessing."""
import pytest
import torch

import gpucore
from gpucore.data.builtin import CLASS_NAMES
from gpucore.data.synthetic import CAPTCHA_ALPHABET, synthetic_captcha, synthetic_fashion
from gpucore.tasks import task_for
from gpucore.tasks.decode import as_text, ctc_greedy

DATA = {"data": "synthetic_fashion", "data_kwargs": {"train_size": 512, "val_size": 300, "seed": 5}}


def test_loaded_model_reproduces_the_runs_validation_accuracy(tmp_path):
    result = gpucore.train(run_dir=str(tmp_path), epochs=1, progress=False, device="cpu", **DATA)
    loaded = gpucore.load(f"{result.checkpoint_dir}/last.pt", device="cpu")
    assert loaded.classes == CLASS_NAMES["synthetic_fashion"] and loaded.input_shape == [1, 28, 28]
    _, (x_val, y_val) = synthetic_fashion(train_size=512, val_size=300, seed=5)
    logits = loaded(x_val, batch_size=64)  # raw uint8 images: load() applies the run's standardisation
    # At most one of the 300 samples apart (the run evaluated in its precision, this in float32), counted
    # in samples: a mean of one sample's difference can land a rounding error past abs=1/300.
    hits = int((logits.argmax(1) == y_val).sum())
    assert abs(hits - round(result.history[-1]["val_accuracy"] * 300)) <= 1
    # the same as the trained model in memory on hand-standardised inputs
    stats = torch.load(f"{result.checkpoint_dir}/last.pt", weights_only=True)["input_stats"]
    by_hand = (x_val.float() / 255 - stats["mean"][0]) / stats["std"][0]
    result.model.float().eval()
    with torch.no_grad():
        torch.testing.assert_close(logits, result.model(by_hand), rtol=1e-4, atol=1e-4)


def test_inputs_of_the_wrong_shape_and_bad_checkpoints_are_named(tmp_path):
    result = gpucore.train(run_dir=str(tmp_path), epochs=1, progress=False, device="cpu", **DATA)
    loaded = gpucore.load(f"{result.checkpoint_dir}/best.pt", device="cpu")
    with pytest.raises(gpucore.ConfigError, match=r"trained on images of 1 x 28 x 28.*\(2, 3, 28, 28\)"):
        loaded(torch.zeros(2, 3, 28, 28, dtype=torch.uint8))
    with pytest.raises(gpucore.ConfigError, match="does not exist"):
        gpucore.load(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(gpucore.ConfigError, match="cannot be read"):
        gpucore.load(tmp_path / "junk.pt")


@pytest.mark.slow
def test_decoded_predictions_score_what_the_engine_reported(tmp_path):
    """The task's decoding follows the engine's metric rules: its whole-captcha accuracy equals val_seq_accuracy."""
    kwargs = {"train_size": 256, "val_size": 64, "seed": 2}
    result = gpucore.train({"model": "captcha_cnn", "loss": "multilabel_soft_margin"}, run_dir=str(tmp_path), epochs=1, progress=False, device="cpu",
                           data="synthetic_captcha", data_kwargs=kwargs, heads=4,
                           batch_size=32, top_k=0)
    loaded = gpucore.load(f"{result.checkpoint_dir}/last.pt", device="cpu")
    _, (x_val, y_val) = synthetic_captcha(**kwargs)
    characters = loaded.task.decode(loaded(x_val))
    assert characters.shape == (64, 4)
    assert (characters == y_val).all(1).float().mean().item() == pytest.approx(result.history[-1]["val_seq_accuracy"])
    assert (characters == y_val).float().mean().item() == pytest.approx(result.history[-1]["val_char_accuracy"])
    assert as_text(y_val[:2], loaded.classes) == ["".join(CAPTCHA_ALPHABET[i] for i in row) for row in y_val[:2].tolist()]


def test_ctc_greedy_collapses_repeats_and_drops_blanks():
    best = torch.tensor([[0, 3, 3, 0, 3, 1, 1, 2], [2, 2, 2, 0, 0, 0, 0, 0]])
    assert ctc_greedy(best).tolist() == [[3, 3, 1, 2, -1, -1, -1, -1], [2, -1, -1, -1, -1, -1, -1, -1]]
    with pytest.raises(gpucore.ConfigError, match="N x steps x classes"):
        task_for("ctc").decode(torch.zeros(2, 5))


def test_as_text_runs_characters_together_and_separates_names_and_indices():
    sequences = torch.tensor([[1, 0, 2, -1], [2, -1, -1, -1]])
    assert as_text(sequences, ["a", "b", "c"]) == ["bac", "c"]
    assert as_text(sequences, ["cat", "dog", "owl"]) == ["dog cat owl", "owl"]
    assert as_text(sequences) == ["1 0 2", "2"]
