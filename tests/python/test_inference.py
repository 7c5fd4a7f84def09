"""gpucore.load: a checkpoint back as a model with its run's preprocessing."""
import copy

import pytest
import torch

import gpucore
from conftest import CAPTCHA_KWARGS, FASHION_KWARGS
from gpucore.data.builtin import CLASS_NAMES
from gpucore.data.synthetic import CAPTCHA_ALPHABET, synthetic_captcha, synthetic_fashion
from gpucore.tasks import task_for
from gpucore.tasks.decode import as_text, ctc_greedy

def test_loaded_model_reproduces_the_runs_validation_accuracy(fashion_run):
    result = fashion_run
    loaded = gpucore.load(f"{result.checkpoint_dir}/last.pt", device="cpu")
    assert loaded.classes == CLASS_NAMES["synthetic_fashion"] and loaded.input_shape == [1, 28, 28]
    _, (x_val, y_val) = synthetic_fashion(**FASHION_KWARGS)
    samples = len(y_val)
    logits = loaded(x_val, batch_size=64)  # raw uint8 images: load() applies the run's standardisation
    # At most one of the samples apart (the run evaluated in its precision, this in float32), counted in samples:
    # a mean of one sample's difference can land a rounding error past abs=1/samples.
    hits = int((logits.argmax(1) == y_val).sum())
    assert abs(hits - round(result.history[-1]["val_accuracy"] * samples)) <= 1
    # the same as the trained model in memory on hand-standardised inputs (a float32 copy: the run is shared)
    stats = torch.load(f"{result.checkpoint_dir}/last.pt", weights_only=True)["input_stats"]
    by_hand = (x_val.float() / 255 - stats["mean"][0]) / stats["std"][0]
    model = copy.deepcopy(result.model).float().eval()
    with torch.no_grad():
        torch.testing.assert_close(logits, model(by_hand), rtol=1e-4, atol=1e-4)


def test_inputs_of_the_wrong_shape_and_bad_checkpoints_are_named(fashion_run, tmp_path):
    loaded = gpucore.load(f"{fashion_run.checkpoint_dir}/best.pt", device="cpu")
    with pytest.raises(gpucore.ConfigError, match=r"trained on images of 1 x 28 x 28.*\(2, 3, 28, 28\)"):
        loaded(torch.zeros(2, 3, 28, 28, dtype=torch.uint8))
    with pytest.raises(gpucore.ConfigError, match="does not exist"):
        gpucore.load(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(gpucore.ConfigError, match="cannot be read"):
        gpucore.load(tmp_path / "junk.pt")


def test_decoded_predictions_score_what_the_engine_reported(captcha_run):
    """The task's decoding follows the engine's metric rules: its whole-captcha accuracy equals val_seq_accuracy."""
    result = captcha_run
    loaded = gpucore.load(f"{result.checkpoint_dir}/last.pt", device="cpu")
    _, (x_val, y_val) = synthetic_captcha(**CAPTCHA_KWARGS)
    characters = loaded.task.decode(loaded(x_val))
    assert characters.shape == (CAPTCHA_KWARGS["val_size"], 4)
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
