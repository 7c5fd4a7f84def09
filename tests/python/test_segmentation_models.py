"""Segmentation models by name (transformers' SegFormer, segmentation_models_pytorch, torchvision's): one logits
tensor at the input's size, weights from a Hugging Face model folder with the replaced head reported, the encoder as
the backbone, and a few real training steps through gpucore.train."""
import importlib.util

import pytest
import torch
from torch.nn import functional as F

import gpucore
from gpucore.models import backbone_split, build_model, classifier_head
from gpucore.models.pretrained import load_pretrained
from gpucore.models.segmentation_models import logits_of
from conftest import assert_states_equal, require

# Skipped where the library is not installed at all; a broken install fails loudly instead of skipping.
needs_transformers = pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")
needs_smp = pytest.mark.skipif(importlib.util.find_spec("segmentation_models_pytorch") is None,
                               reason="needs segmentation-models-pytorch")
needs_torchvision = pytest.mark.skipif(importlib.util.find_spec("torchvision") is None, reason="needs torchvision")

# A SegFormer of mit-b0's layout, smaller: it runs on the CPU in seconds.
SEGFORMER = {"depths": [1, 1, 1, 1], "hidden_sizes": [16, 32, 64, 128], "num_attention_heads": [1, 1, 2, 4],
             "decoder_hidden_size": 32}
# One model of each segmentation library, small enough to train on the CPU in seconds.
BY_NAME = [("transformers:SegformerForSemanticSegmentation", {"num_labels": 1, **SEGFORMER}),
           ("smp:Unet", {"encoder_name": "resnet18", "encoder_depth": 3, "decoder_channels": [32, 16, 8], "classes": 1})]


def test_logits_rule_takes_logits_or_out_and_resizes_to_the_input_as_interpolate_does():
    inputs = torch.randn(2, 3, 32, 48)
    small = torch.randn(2, 4, 8, 12)
    expected = F.interpolate(small, size=(32, 48), mode="bilinear", align_corners=False)

    class Output:
        logits = small

    assert torch.equal(logits_of(Output(), inputs), expected)
    assert torch.equal(logits_of({"out": small, "aux": torch.zeros(1)}, inputs), expected)
    full = torch.randn(2, 4, 32, 48)
    assert logits_of(full, inputs) is full  # already the masks' size: untouched
    classes = torch.randn(2, 10)
    assert logits_of(classes, inputs) is classes
    # By hand at one pixel: bilinear, align_corners=False maps output pixel y to input (y + 0.5) / 4 - 0.5.
    y, x = 5, 7
    sy, sx = (y + 0.5) / 4 - 0.5, (x + 0.5) / 4 - 0.5
    y0, x0 = int(sy), int(sx)
    wy, wx = sy - y0, sx - x0
    grid = small[0, 1]
    value = ((1 - wy) * (1 - wx) * grid[y0, x0] + (1 - wy) * wx * grid[y0, x0 + 1]
             + wy * (1 - wx) * grid[y0 + 1, x0] + wy * wx * grid[y0 + 1, x0 + 1])
    assert torch.allclose(expected[0, 1, y, x], value, atol=1e-6)


@needs_transformers
def test_segformer_from_config_fields_returns_the_library_logits_upsampled():
    from transformers import SegformerForSemanticSegmentation

    model = build_model("transformers:SegformerForSemanticSegmentation", {"num_labels": 2, **SEGFORMER})
    assert isinstance(model, SegformerForSemanticSegmentation)  # the library's model, names and all
    model.eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        library = SegformerForSemanticSegmentation.forward(model, x).logits  # the class's own forward
        got = model(x)
    assert library.shape == (2, 2, 16, 16)  # SegFormer predicts at 1/4 of the input
    assert torch.equal(got, F.interpolate(library, size=(64, 64), mode="bilinear", align_corners=False))
    assert classifier_head(model) == "decode_head.classifier"


@needs_transformers
def test_segformer_config_errors_name_the_field_or_folder(tmp_path):
    with pytest.raises(gpucore.ConfigError, match="hiden_sizes is not a field of SegformerConfig"):
        build_model("transformers:SegformerForSemanticSegmentation", {"hiden_sizes": [8]})
    with pytest.raises(gpucore.ConfigError, match="transformers has no vision model class 'SegformerForSemanticSegmentatio'.*"
                                                  "Close names: SegformerForSemanticSegmentation"):
        build_model("transformers:SegformerForSemanticSegmentatio", {})
    with pytest.raises(gpucore.ConfigError, match=f"config '{tmp_path}' .* must be a folder holding config.json"):
        build_model("transformers:SegformerForSemanticSegmentation", {"config": str(tmp_path)})
    with pytest.raises(gpucore.ConfigError, match="'pretrained_model_name_or_path' is not passed .* download"):
        build_model("transformers:SegformerForSemanticSegmentation", {"pretrained_model_name_or_path": "nvidia/mit-b0"})


@needs_transformers
def test_segformer_weights_from_a_model_folder_replace_only_the_head(tmp_path):
    # Guide 000's from_pretrained(..., num_labels=1, ignore_mismatched_sizes=True), from a local folder: a
    # save_pretrained folder of a 150-class model, loaded into a 1-class one built from that folder's config.
    torch.manual_seed(0)
    source = build_model("transformers:SegformerForSemanticSegmentation", {"num_labels": 150, **SEGFORMER})
    source.save_pretrained(tmp_path / "ade")
    model = build_model("transformers:SegformerForSemanticSegmentation",
                        {"config": str(tmp_path / "ade"), "num_labels": 1})
    assert model.config.hidden_sizes == SEGFORMER["hidden_sizes"]  # read from the folder's config.json
    report = load_pretrained(model, str(tmp_path / "ade"), strict=True)
    assert sorted(report.head) == ["decode_head.classifier.bias", "decode_head.classifier.weight"]
    assert report.problems == [] and report.loaded == len(model.state_dict()) - 2
    own, theirs = model.state_dict(), source.state_dict()
    assert_states_equal(own, theirs, keys=[name for name in own if not name.startswith("decode_head.classifier")])
    assert own["decode_head.classifier.weight"].shape == (1, 32, 1, 1)


@needs_transformers
def test_segformer_pretrained_folder_without_a_config_takes_the_folders_architecture(tmp_path):
    # pretrained: FOLDER and no model_kwargs config: built from the folder's config.json (as from_pretrained(folder,
    # num_labels=1, ignore_mismatched_sizes=True) does), not from the class's default mit-b0 layout.
    torch.manual_seed(1)
    source = build_model("transformers:SegformerForSemanticSegmentation", {"num_labels": 150, **SEGFORMER})
    source.save_pretrained(tmp_path / "ade")
    generator = torch.Generator().manual_seed(2)
    images = torch.randint(0, 256, (8, 3, 32, 32), dtype=torch.uint8, generator=generator)
    masks = (images.float().mean(1) > 127).float()
    result = gpucore.train({"model": "transformers:SegformerForSemanticSegmentation", "model_kwargs": {"num_labels": 1},
                            "pretrained": str(tmp_path / "ade"), "loss": "dice_bce", "epochs": 1, "batch_size": 4,
                            "device": "cpu", "precision": "32", "freeze": "backbone", "freeze_epochs": 1,
                            "run_dir": str(tmp_path / "runs"), "progress": False, "report": False},
                           train_data=(images, masks))
    assert result.model.config.hidden_sizes == SEGFORMER["hidden_sizes"]  # from the folder, not mit-b0's 32..256
    own, theirs = result.model.state_dict(), source.state_dict()
    encoder = [name for name in own if name.startswith("segformer.")]
    assert encoder
    assert_states_equal(own, theirs, keys=encoder)  # loaded, frozen in epoch 1


@needs_smp
def test_smp_unet_encoder_is_the_backbone_and_the_head_is_the_segmentation_head():
    model = build_model("smp:Unet", {"encoder_name": "resnet18", "encoder_depth": 3, "decoder_channels": [32, 16, 8],
                                     "classes": 1, "in_channels": 1})
    model.eval()
    x = torch.randn(2, 1, 32, 32)
    with torch.no_grad():
        assert model(x).shape == (2, 1, 32, 32)
    assert classifier_head(model) == "segmentation_head.0"
    split = backbone_split(model, "freeze")
    encoder = {id(p) for p in model.encoder.parameters()}
    assert {id(p) for p in split.backbone_params} == encoder
    assert {id(p) for p in split.head_params} == {id(p) for p in model.parameters()} - encoder
    assert split.head == ["decoder", "segmentation_head"]
    with pytest.raises(gpucore.ConfigError, match="'encoder_weights' is not passed to smp:Unet"):
        build_model("smp:Unet", {"encoder_weights": "imagenet"})
    with pytest.raises(gpucore.ConfigError, match="smp has no architecture 'Unett'.*Close names: Unet"):
        build_model("smp:Unett", {})


@needs_torchvision
def test_torchvision_segmentation_model_gives_its_out_logits_without_downloading():
    import torchvision

    model = build_model("torchvision:lraspp_mobilenet_v3_large", {"num_classes": 3})
    model.eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        expected = torchvision.models.segmentation.LRASPP.forward(model, x)["out"]
        assert torch.equal(model(x), expected)
    assert expected.shape == (1, 3, 64, 64)


@needs_transformers
@needs_smp
@pytest.mark.parametrize("name, kwargs", BY_NAME)
def test_segmentation_models_train_through_gpucore_with_a_frozen_encoder(tmp_path, name, kwargs):
    generator = torch.Generator().manual_seed(1)
    images = torch.randint(0, 256, (24, 3, 32, 32), dtype=torch.uint8, generator=generator)
    masks = (images.float().mean(1) > 127).float()  # bright pixels are the foreground
    torch.manual_seed(0)
    model = build_model(name, kwargs)
    encoder = dict(model.get_submodule("segformer" if "Segformer" in name else "encoder").named_parameters())
    before = {key: value.detach().clone() for key, value in model.named_parameters()}
    gpucore.train({"loss": "dice_bce", "epochs": 1, "batch_size": 8, "lr": 1e-3, "device": "cpu",
                            "precision": "32", "freeze": "backbone", "freeze_epochs": 1, "run_dir": str(tmp_path),
                            "progress": False, "report": False},
                           model=model, train_data=(images[:16], masks[:16]), val_data=(images[16:], masks[16:]))
    after = dict(model.named_parameters())
    frozen = [key for key, value in after.items() if torch.equal(value.detach(), before[key])]
    encoder_names = {key for key, value in after.items() if any(value is p for p in encoder.values())}
    assert encoder_names and encoder_names <= set(frozen)  # the encoder did not move in the frozen epoch
    assert set(after) - encoder_names - set(frozen)  # the decoder and head did


def test_fashion_mnist_foreground_masks_are_the_pasted_garments():
    from gpucore.data import builtin as builtin_data

    folder = builtin_data.find_fashion_mnist()
    if folder is None:
        pytest.skip("needs the real Fashion-MNIST files (Debian's dataset-fashion-mnist)")
    (x, y), (xv, yv) = builtin_data.fashion_mnist_foreground(train_size=40, val_size=20, seed=5)
    again = builtin_data.fashion_mnist_foreground(train_size=40, val_size=20, seed=5)
    assert torch.equal(x, again[0][0]) and torch.equal(yv, again[1][1])
    assert x.shape == (40, 3, 64, 64) and x.dtype == torch.uint8 and set(y.unique().tolist()) == {0.0, 1.0}
    (train, _), (test, _) = builtin_data._load_folder(folder, {})
    # Each mask is its garment enlarged 1.5 to 2.25 times: its area over the garment's lies between those squares
    # (a mask of another garment, a trouser's for a bag's, falls outside).
    for masks, garments in ((y, train[:40]), (yv, test[:20])):
        ratio = masks.flatten(1).sum(1) / (garments.float() / 255 > 0.1).flatten(1).sum(1)
        assert bool(((ratio > 1.5 ** 2 * 0.85) & (ratio < 2.25 ** 2 * 1.15)).all()), ratio
    with pytest.raises(gpucore.ConfigError, match="size of data set 'fashion_mnist_foreground' must be an integer >= 42"):
        builtin_data.fashion_mnist_foreground(train_size=2, val_size=1, size=32)


@needs_transformers
@needs_smp
@pytest.mark.slow
@pytest.mark.parametrize("name, kwargs", BY_NAME)
def test_segmentation_models_by_name_load_predict_masks_and_export_to_onnx(tmp_path, name, kwargs):
    require("onnxruntime")
    generator = torch.Generator().manual_seed(2)
    images = torch.randint(0, 256, (12, 3, 32, 32), dtype=torch.uint8, generator=generator)
    masks = (images.float().mean(1) > 127).float()
    result = gpucore.train({"model": name, "model_kwargs": kwargs, "loss": "dice_bce", "epochs": 1, "batch_size": 4,
                            "device": "cpu", "precision": "32", "run_dir": str(tmp_path), "progress": False,
                            "report": False}, train_data=(images[:8], masks[:8]), val_data=(images[8:], masks[8:]))
    checkpoint = f"{result.checkpoint_dir}/last.pt"
    loaded = gpucore.load(checkpoint, "cpu")  # rebuilt by name from the checkpoint's config
    with torch.no_grad():
        logits = loaded.module(loaded.preprocess(images[8:]))
    assert logits.shape == (4, 1, 32, 32)  # upsampled to the masks' size
    # The run's validation IoU (the engine's, after the one epoch last.pt holds) by hand from the loaded model.
    intersection = ((logits[:, 0] > 0) & masks[8:].bool()).sum().item()
    union = ((logits[:, 0] > 0) | masks[8:].bool()).sum().item()
    assert result.history[-1]["val_iou"] == pytest.approx(intersection / union, abs=1e-6)
    written = gpucore.export(checkpoint, "onnx", str(tmp_path / "model.onnx"))
    assert written["max_abs_diff"] <= 1e-4


@needs_transformers
def test_gradcam_of_a_segformer_mask_target_equals_the_plain_torch_computation():
    from gpucore.cam import segmentation_target

    torch.manual_seed(3)
    model = build_model("transformers:SegformerForSemanticSegmentation", {"num_labels": 2, **SEGFORMER}).eval()
    x = torch.randn(2, 3, 64, 64)
    mask = (torch.rand(2, 64, 64) > 0.5).float()
    got = gpucore.gradcam(model, "decode_head.linear_fuse", x, targets=segmentation_target(1, mask)).cams
    # Grad-CAM by hand: the layer's activations and the gradient of the class-1 logits summed over the mask.
    store = {}
    handle = model.decode_head.linear_fuse.register_forward_hook(lambda m, i, o: store.__setitem__("a", o))
    try:
        logits = model(x)
    finally:
        handle.remove()
    gradient, = torch.autograd.grad((logits[:, 1] * mask).flatten(1).sum(1).sum(), store["a"])
    cam = torch.relu((gradient.mean((2, 3))[:, :, None, None] * store["a"]).sum(1)).detach()

    def min_max(maps):  # pytorch-grad-cam's scale_cam_image
        maps = maps - maps.amin((1, 2), keepdim=True)
        return maps / (1e-7 + maps.amax((1, 2), keepdim=True))

    cam = min_max(F.interpolate(min_max(cam)[:, None], size=(64, 64), mode="bilinear", align_corners=False)[:, 0])
    assert torch.allclose(got, cam, atol=1e-4), (got - cam).abs().max()
