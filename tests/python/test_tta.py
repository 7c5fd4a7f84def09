"""Config key tta: hflip: validation, gpucore evaluate, predict and the ONNX export all run the mean of the model's
outputs on each image and on its mirror, checked against that mean computed here in plain PyTorch."""
import pytest
import torch
from torch import nn

import gpucore
from gpucore.data.synthetic import synthetic_fashion
from gpucore.errors import ConfigError
from gpucore.models.tta import FlipAverage, with_tta
from conftest import require

KWARGS = {"train_size": 384, "val_size": 160, "seed": 3}


def test_flip_average_is_the_mean_over_the_image_and_its_mirror():
    torch.manual_seed(0)
    classifier = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.LazyLinear(5))
    images = torch.randn(6, 3, 9, 11)
    expected = (classifier(images) + classifier(torch.flip(images, dims=[3]))) / 2
    torch.testing.assert_close(FlipAverage(classifier)(images), expected, rtol=0, atol=1e-6)
    assert with_tta(classifier, "none") is classifier
    # segmentation logits have a width of their own: the mirror's are mirrored back before the mean
    segmenter = nn.Conv2d(3, 2, 3, padding=1)
    expected = (segmenter(images) + torch.flip(segmenter(torch.flip(images, dims=[3])), dims=[3])) / 2
    torch.testing.assert_close(FlipAverage(segmenter)(images), expected, rtol=0, atol=1e-6)


def test_flip_average_refuses_what_it_cannot_mirror():
    with pytest.raises(ConfigError, match=r"'tta'.*N x C x H x W.*\(6, 20\)"):
        FlipAverage(nn.Linear(20, 3))(torch.randn(6, 20))
    with pytest.raises(ConfigError, match=r"'tta'.*returns tuple"):
        FlipAverage(lambda x: (x, x))(torch.randn(2, 1, 4, 4))
    with pytest.raises(ConfigError, match=r"'tta'.*'vflip'.*none, hflip"):
        with_tta(nn.Identity(), "vflip")
    with pytest.raises(ConfigError, match=r"tta.*hflip"):
        gpucore.train(tta="vflip", data="synthetic_fashion", epochs=1)


@pytest.mark.slow
@pytest.mark.usefixtures("figures_skipped")  # checks numbers, rows and files: no figure
def test_validation_evaluate_predict_and_export_run_the_flip_average(tmp_path):
    result = gpucore.train(run_dir=str(tmp_path), epochs=2, lr=3e-3, progress=False, device="cpu", precision="32",
                           data="synthetic_fashion", data_kwargs=KWARGS, tta="hflip", report=False, loggers=[])
    checkpoint = f"{result.checkpoint_dir}/last.pt"
    model = gpucore.load(checkpoint, "cpu")
    _, (x_val, y_val) = synthetic_fashion(**KWARGS)
    inputs = model.preprocess(x_val)
    with torch.no_grad():
        bare = model.module(inputs)
        averaged = (bare + model.module(torch.flip(inputs, dims=[3]))) / 2
    assert not torch.equal(bare.argmax(1), averaged.argmax(1))  # the mirror changes some predictions
    accuracy = (averaged.argmax(1) == y_val).float().mean().item()
    assert result.history[-1]["val_accuracy"] == pytest.approx(accuracy, abs=1 / 160)  # a near tie may flip
    torch.testing.assert_close(model(x_val), averaged, rtol=1e-4, atol=1e-5)
    assert torch.equal(gpucore.predict(model, x_val).predicted, averaged.argmax(1))
    evaluated = gpucore.evaluate(checkpoint, device="cpu", out=str(tmp_path / "evaluate"))["metrics"]["accuracy"]
    assert evaluated == pytest.approx(accuracy, abs=1 / 160)
    require("onnxruntime")
    import onnxruntime

    written = gpucore.export(model, "onnx", str(tmp_path / "model.onnx"))
    session = onnxruntime.InferenceSession(written["out"], providers=["CPUExecutionProvider"])
    onnx_outputs = session.run(None, {session.get_inputs()[0].name: inputs[:7].numpy()})[0]
    torch.testing.assert_close(torch.from_numpy(onnx_outputs), averaged[:7], rtol=1e-4, atol=1e-4)
