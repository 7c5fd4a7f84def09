"""gpucore.load: a checkpoint back as a model with its run's preprocessing."""
import pytest
import torch

import gpucore
from gpucore.builtin_data import CLASS_NAMES, synthetic_fashion

DATA = {"data": "synthetic_fashion", "data_kwargs": {"train_size": 512, "val_size": 300, "seed": 5}}


def test_loaded_model_reproduces_the_runs_validation_accuracy(tmp_path):
    result = gpucore.train(run_dir=str(tmp_path), epochs=1, progress=False, device="cpu", **DATA)
    loaded = gpucore.load(f"{result.checkpoint_dir}/last.pt", device="cpu")
    assert loaded.classes == CLASS_NAMES["synthetic_fashion"] and loaded.input_shape == [1, 28, 28]
    _, (x_val, y_val) = synthetic_fashion(train_size=512, val_size=300, seed=5)
    logits = loaded(x_val, batch_size=64)  # raw uint8 images: load() applies the run's standardisation
    accuracy = (logits.argmax(1) == y_val).float().mean().item()
    assert accuracy == pytest.approx(result.history[-1]["val_accuracy"], abs=1 / 300)
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
