"""Fine-tuning: pretrained weights (files, the load report, the head, the first convolution), torchvision and
timm models by name, a frozen backbone, per-group learning rates, resume across the unfreeze, Grad-CAM."""
import importlib.util
import json
import os
import sys

import pytest
import torch
from torch import nn

import gpucore
from gpucore.training import engine_config
from gpucore.models import FashionMnistCNN, backbone_split, build_model, classifier_head
from gpucore.models.pretrained import load_pretrained, read_state_dict, resolve_weights_path
from conftest import assert_resume_matches, assert_states_equal

SMALL = {"data": "synthetic_fashion", "data_kwargs": {"train_size": 512, "val_size": 128, "seed": 3}, "progress": False,
         "batch_size": 64, "device": "cpu", "precision": "32"}


def _installed(name):
    """Installed at all. Only a missing package skips: one installed but broken fails the tests that import it."""
    return importlib.util.find_spec(name) is not None


needs_torchvision = pytest.mark.skipif(not _installed("torchvision"), reason="needs torchvision")
needs_timm = pytest.mark.skipif(not _installed("timm"), reason="needs timm (and torchvision)")
needs_safetensors = pytest.mark.skipif(not _installed("safetensors"), reason="needs safetensors")
needs_hub = pytest.mark.skipif(not _installed("huggingface_hub"), reason="needs huggingface_hub")


class Snapshots:
    """The model's state after each epoch."""

    def __init__(self, model):
        self.model, self.states = model, [{k: v.clone() for k, v in model.state_dict().items()}]

    def on_epoch_end(self, trainer, epoch, record):
        self.states.append({k: v.clone() for k, v in self.model.state_dict().items()})


# ---- freezing --------------------------------------------------------------------------------------------

def test_frozen_backbone_and_its_batchnorm_statistics_stay_bitwise_unchanged_then_train(tmp_path):
    torch.manual_seed(0)
    model = FashionMnistCNN()
    snapshots = Snapshots(model)
    result = gpucore.train(dict(SMALL, run_dir=str(tmp_path), epochs=3, freeze="backbone", freeze_epochs=2),
                           model=model, callbacks=[snapshots])
    assert result.status == "completed"
    start, epoch1, epoch2, epoch3 = snapshots.states
    head = ("classifier.4.weight", "classifier.4.bias")
    for name in start:
        if name in head:
            assert not torch.equal(start[name], epoch1[name]) and not torch.equal(epoch1[name], epoch2[name]), name
        elif name.endswith("num_batches_tracked"):
            assert epoch2[name] == start[name] == 0 and epoch3[name] > 0, name
        else:  # weights, biases, BatchNorm running means and variances of the backbone
            assert torch.equal(start[name], epoch1[name]) and torch.equal(start[name], epoch2[name]), name
            assert not torch.equal(epoch2[name], epoch3[name]), name
    assert all(param.requires_grad for param in result.model.parameters())
    assert result.model.features[1].training is False  # left in eval by validation, as every layer


class StopAtEpochEnd:
    def __init__(self, epoch):
        self.epoch = epoch

    def on_epoch_end(self, trainer, epoch, record):
        if epoch == self.epoch:
            raise KeyboardInterrupt


class StopMidEpoch:
    def __init__(self, epoch):
        self.epoch = epoch

    def on_log(self, trainer, step, metrics):
        if metrics["epoch"] == self.epoch:
            raise KeyboardInterrupt


@pytest.mark.slow
def test_resume_before_at_and_after_the_unfreeze_is_bitwise_exact(tmp_path):
    # Frozen in epochs 1-2 with a slower backbone afterwards: stopped after epoch 1 (frozen), after epoch 2 (the
    # last frozen one) and in the middle of epoch 3 (unfrozen), each resumed run equals the uninterrupted one.
    config = dict(SMALL, epochs=3, seed=5, freeze="backbone", freeze_epochs=2, lr_backbone=0.1, log_every_n_steps=3)
    straight = gpucore.train(dict(config, run_dir=str(tmp_path / "straight")))
    for name, stop in (("after1", StopAtEpochEnd(1)), ("after2", StopAtEpochEnd(2)), ("in3", StopMidEpoch(3))):
        _, _, resumed = assert_resume_matches(tmp_path, config, stop, straight=straight, name=name)
        assert [r["epoch"] for r in resumed.history] == [1, 2, 3], name
        if name != "in3":  # a run resumed mid-epoch averages that epoch's loss over the steps it trained
            assert resumed.history[-1]["train_loss"] == straight.history[-1]["train_loss"], name


# ---- per-group learning rates ---------------------------------------------------------------------------

class Net(nn.Module):
    """A backbone of two blocks and a classifier head, on 16 features."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.features = nn.Sequential(nn.Linear(16, 24), nn.Tanh(), nn.Linear(24, 24), nn.Tanh())
        self.fc = nn.Linear(24, 5)

    def forward(self, x):
        return self.fc(self.features(x))


def test_backbone_split_of_the_built_in_cnn_and_a_custom_net(tmp_path):
    cnn = FashionMnistCNN()
    split = backbone_split(cnn, "freeze")
    assert split.head == ["classifier.4"]
    assert [name for name, _ in split.blocks] == ["features.0", "features.1", "features.4", "features.5",
                                                  "classifier.2"]
    assert len(split.backbone_params) + len(split.head_params) == len(list(cnn.parameters()))
    assert [name for name, _ in backbone_split(Net(), "freeze").blocks] == ["features.0", "features.2"]
    with pytest.raises(gpucore.ConfigError, match="config key 'lr_backbone' needs the model's classifier head"):
        gpucore.train(dict(SMALL, run_dir=str(tmp_path), lr_backbone=0.5),
                      model=nn.Sequential(nn.Flatten(), nn.Linear(784, 10)))


@pytest.mark.parametrize("keys,scales", [
    ({"lr_backbone": 0.1}, {"features.0": 0.1, "features.2": 0.1}),
    ({"lr_backbone": 0.5, "lr_layer_decay": 0.25}, {"features.0": 0.5 * 0.25, "features.2": 0.5}),
])
def test_group_learning_rates_match_torch_adamw_with_param_groups(tmp_path, keys, scales):
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(256, 16, generator=generator), torch.randint(0, 5, (256,), generator=generator)
    model, reference = Net(), Net()
    lr, decay = 0.02, 0.05
    result = gpucore.train(dict(run_dir=str(tmp_path), progress=False, shuffle=False, normalize=False, seed=0,
                                schedule="constant", epochs=1, device="cpu", precision="32", optimizer="adamw",
                                lr=lr, weight_decay=decay, batch_size=32, **keys), model=model, train_data=(x, y))
    assert result.steps == 8
    groups = []
    for block, scale in scales.items():
        layer = reference.get_submodule(block)
        groups += [{"params": [layer.weight], "lr": lr * scale, "weight_decay": decay},
                   {"params": [layer.bias], "lr": lr * scale, "weight_decay": 0.0}]
    groups += [{"params": [reference.fc.weight], "lr": lr, "weight_decay": decay},
               {"params": [reference.fc.bias], "lr": lr, "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=lr)
    for start in range(0, 256, 32):
        optimizer.zero_grad()
        nn.functional.cross_entropy(reference(x[start:start + 32]), y[start:start + 32]).backward()
        optimizer.step()
    for (name, ours), theirs in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6, msg=name)


def test_lr_levels_of_a_layer_wise_decay():
    config = gpucore.config.load_config({"lr_backbone": 0.5, "lr_layer_decay": 0.5})
    levels = engine_config.lr_levels(FashionMnistCNN(), config)
    # five backbone blocks, the last one next to the head at lr x 0.5, each one before it halved again; the head at lr
    assert [scale for _, scale in levels] == [0.5 * 0.5 ** 4, 0.5 * 0.5 ** 3, 0.5 * 0.5 ** 2, 0.5 * 0.5, 0.5, 1.0]
    model = FashionMnistCNN()
    groups = engine_config.param_groups(model, config)
    assert sorted({group.lr_scale for group in groups}) == sorted(scale for _, scale in levels)
    assert sum(len(group.params) for group in groups) == len(list(model.parameters()))


def test_fine_tuning_keys_are_checked():
    with pytest.raises(gpucore.ConfigError, match="'freeze' is 'all'; valid values: none, backbone"):
        gpucore.config.load_config({"freeze": "all"})
    with pytest.raises(gpucore.ConfigError, match=r"'lr_layer_decay' is 1.5; it must be in \(0, 1\]"):
        gpucore.config.load_config({"lr_layer_decay": 1.5})
    with pytest.raises(gpucore.ConfigError, match="'freeze_epochs' is 0; it must be > 0"):
        gpucore.config.load_config({"freeze_epochs": 0})
    with pytest.raises(gpucore.ConfigError, match="Did you mean 'lr_layer_decay'"):
        gpucore.config.load_config({"layer_decay": 0.7})


# ---- pretrained weights ----------------------------------------------------------------------------------

def _rgb_cnn_weights(path, seed=1):
    torch.manual_seed(seed)
    state = FashionMnistCNN(num_classes=10, in_channels=3).state_dict()
    torch.save(state, path)
    return state


def test_pretrained_file_into_a_grey_model_with_a_new_head(tmp_path):
    state = _rgb_cnn_weights(tmp_path / "rgb.pth")
    torch.manual_seed(2)
    model = FashionMnistCNN(num_classes=4, in_channels=1)
    new_head = model.classifier[4].weight.detach().clone()
    report = load_pretrained(model, str(tmp_path / "rgb.pth"), strict=True)
    assert report.head == ["classifier.4.weight", "classifier.4.bias"]
    assert report.adapted == ["features.0.weight: 3 -> 1 channels"]
    assert report.loaded == len(state) - 2 and not report.problems
    # the first convolution's RGB weights summed over the colours, by hand
    hand_sum = state["features.0.weight"][:, 0] + state["features.0.weight"][:, 1] + state["features.0.weight"][:, 2]
    torch.testing.assert_close(model.features[0].weight[:, 0], hand_sum, rtol=0, atol=1e-6)
    assert torch.equal(model.features[4].weight, state["features.4.weight"])
    assert torch.equal(model.features[1].running_var, state["features.1.running_var"])
    assert model.classifier[4].weight.shape == (4, 128) and torch.equal(model.classifier[4].weight, new_head)
    assert "classifier head replaced" in report.summary()


def test_pretrained_report_strict_and_lenient(tmp_path):
    state = _rgb_cnn_weights(tmp_path / "rgb.pth")
    state = dict(state, **{"extra.weight": torch.zeros(2)})
    state["features.4.weight"] = torch.zeros(64, 32, 5, 5)
    del state["classifier.2.bias"]
    torch.save({"state_dict": state, "epoch": 3}, tmp_path / "odd.pth")  # timm's train.py layout
    with pytest.raises(gpucore.ConfigError) as error:
        load_pretrained(FashionMnistCNN(num_classes=10, in_channels=3), str(tmp_path / "odd.pth"), strict=True)
    message = str(error.value)
    assert "missing in the file: classifier.2.bias" in message and "not in the model: extra.weight" in message
    assert "shape mismatch: features.4.weight: (64, 32, 5, 5) in the file, (64, 32, 3, 3)" in message
    assert "pretrained_strict: false" in message
    with pytest.warns(RuntimeWarning, match="missing in the file: classifier.2.bias"):
        result = gpucore.train(dict(SMALL, run_dir=str(tmp_path / "runs"), epochs=1, pretrained=str(tmp_path / "odd.pth"),
                                    pretrained_strict=False))
    report = json.load(open(result.stats_path))["pretrained"]
    assert report["missing"] == ["classifier.2.bias"] and report["unexpected"] == ["extra.weight"]
    assert report["mismatched"] == ["features.4.weight: (64, 32, 5, 5) in the file, (64, 32, 3, 3) in the model"]
    assert report["adapted"] == ["features.0.weight: 3 -> 1 channels"] and report["head"] == []
    model = FashionMnistCNN(num_classes=10, in_channels=3)
    load_pretrained(model, str(tmp_path / "odd.pth"), strict=False)
    assert torch.equal(model.features[0].weight, state["features.0.weight"])


def test_pretrained_from_a_gpucore_checkpoint_and_a_safetensors_file_then_bad_files(tmp_path):
    first = gpucore.train(dict(SMALL, run_dir=str(tmp_path / "first"), epochs=1))
    checkpoint = os.path.join(first.checkpoint_dir, "last.pt")
    result = gpucore.train(dict(SMALL, run_dir=str(tmp_path / "second"), epochs=1, pretrained=checkpoint,
                                freeze="backbone"))
    stats = gpucore.checkpoint.load_checkpoint(os.path.join(result.checkpoint_dir, "last.pt"))
    assert stats["config"]["pretrained"] == checkpoint
    # frozen for its one epoch: the backbone is the file's
    backbone = [name for name in first.model.state_dict() if not name.startswith("classifier.4")]
    assert_states_equal(result.model, first.model, keys=backbone)
    report = json.load(open(result.stats_path))["pretrained"]
    assert report["loaded"] == len(first.model.state_dict()) and report["head"] == [] and report["missing"] == []
    (tmp_path / "junk.pth").write_bytes(b"not a pickle")
    with pytest.raises(gpucore.ConfigError, match="'.*junk.pth' cannot be read"):
        read_state_dict(str(tmp_path / "junk.pth"))
    with pytest.raises(gpucore.ConfigError, match="weights file '.*nothing.pth' does not exist"):
        read_state_dict(str(tmp_path / "nothing.pth"))
    torch.save({"fc.weight": torch.zeros(3)}, tmp_path / "other.pth")
    with pytest.raises(gpucore.ConfigError, match="no tensor of '.*other.pth' fits FashionMnistCNN"):
        load_pretrained(FashionMnistCNN(), str(tmp_path / "other.pth"), strict=False)
    with pytest.raises(gpucore.ConfigError, match="true means the library's own weights"):
        resolve_weights_path("true", "fashion_mnist_cnn", FashionMnistCNN())
    if not _installed("safetensors"):
        pytest.skip("needs safetensors (for its last part: the same weights from a .safetensors file)")
    from safetensors.torch import save_file
    save_file({k: v.contiguous() for k, v in first.model.state_dict().items()}, str(tmp_path / "w.safetensors"))
    model = FashionMnistCNN()
    assert load_pretrained(model, str(tmp_path / "w.safetensors"), strict=True).loaded == len(model.state_dict())
    assert torch.equal(model.features[0].weight, first.model.features[0].weight)


# ---- torchvision and timm models -------------------------------------------------------------------------

@needs_torchvision
def test_torchvision_resnet18_from_an_rgb_file_with_a_new_head_and_one_channel(tmp_path):
    import torchvision

    torch.manual_seed(0)
    rgb = torchvision.models.resnet18()  # what a torchvision .pth holds: 1000 classes, RGB
    torch.save(rgb.state_dict(), tmp_path / "resnet18.pth")
    torch.manual_seed(1)
    model = build_model("torchvision:resnet18", {"num_classes": 3, "in_channels": 1})
    fresh_head = model.fc.weight.detach().clone()
    assert classifier_head(model) == "fc" and model.conv1.weight.shape == (64, 1, 7, 7)
    report = load_pretrained(model, str(tmp_path / "resnet18.pth"), strict=True)
    assert report.head == ["fc.weight", "fc.bias"] and report.adapted == ["conv1.weight: 3 -> 1 channels"]
    assert not report.problems and report.loaded == len(rgb.state_dict()) - 2
    torch.testing.assert_close(model.conv1.weight, rgb.conv1.weight.sum(dim=1, keepdim=True), rtol=0, atol=1e-6)
    assert torch.equal(model.layer4[1].conv2.weight, rgb.layer4[1].conv2.weight)
    assert model.fc.weight.shape == (3, 512) and torch.equal(model.fc.weight, fresh_head)
    split = backbone_split(model, "freeze")
    assert [name for name, _ in split.blocks][:3] == ["conv1", "bn1", "layer1.0"] and split.blocks[-1][0] == "layer4.1"


@needs_torchvision
@pytest.mark.parametrize("name,head", [("convnext_tiny", "classifier.2"), ("efficientnet_b0", "classifier.1"),
                                       ("mobilenet_v3_small", "classifier.3"), ("vit_b_16", "heads.head")])
def test_torchvision_heads(name, head):
    model = build_model(f"torchvision:{name}", {"num_classes": 7})
    assert classifier_head(model) == head and model.get_submodule(head).out_features == 7


@needs_torchvision
def test_library_model_errors(monkeypatch):
    with pytest.raises(gpucore.ConfigError, match="torchvision has no model 'resnet19'. Close names: resnet18"):
        build_model("torchvision:resnet19", {})
    with pytest.raises(gpucore.ConfigError, match="'weights' is not passed to torchvision:resnet18.*config key 'pretrained'"):
        build_model("torchvision:resnet18", {"weights": "DEFAULT"})
    # None and False ask for no download: passed on (torchvision) or already gpucore's own (timm's pretrained)
    plain = build_model("torchvision:resnet18", {"weights": None})
    assert plain.fc.out_features == 1000 and sum(p.numel() for p in plain.parameters()) == 11_689_512
    with pytest.raises(gpucore.ConfigError, match="model_kwargs' does not fit model 'torchvision:resnet18'"):
        build_model("torchvision:resnet18", {"colour": 3})
    monkeypatch.setitem(sys.modules, "timm", None)  # as if not installed
    with pytest.raises(gpucore.ConfigError, match=r"'timm:resnet18' needs timm \(pip install timm"):
        build_model("timm:resnet18", {})


@needs_torchvision
def test_torchvision_weights_from_torch_hub_cache_or_where_to_put_them(tmp_path, monkeypatch):
    import torchvision

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    model = build_model("torchvision:resnet18", {})
    expected = tmp_path / "torch" / "hub" / "checkpoints" / "resnet18-f37072fd.pth"
    with pytest.raises(gpucore.ConfigError, match=f"download https://download.pytorch.org/models/resnet18-f37072fd.pth "
                                                  f"and put it at {expected}"):
        resolve_weights_path("true", "torchvision:resnet18", model)
    os.makedirs(expected.parent)
    torch.save(torchvision.models.resnet18().state_dict(), expected)
    assert resolve_weights_path("true", "torchvision:resnet18", model) == str(expected)


@needs_timm
@needs_safetensors
def test_timm_convnext_from_a_safetensors_file_one_channel_and_new_head(tmp_path):
    import timm
    from safetensors.torch import save_file

    torch.manual_seed(0)
    rgb = timm.create_model("convnext_atto", pretrained=False)
    save_file(rgb.state_dict(), str(tmp_path / "model.safetensors"))
    model = build_model("timm:convnext_atto", {"num_classes": 4, "in_channels": 1})
    report = load_pretrained(model, str(tmp_path / "model.safetensors"), strict=True)
    assert classifier_head(model) == "head.fc"
    assert sorted(report.head) == ["head.fc.bias", "head.fc.weight"] and report.adapted == ["stem.0.weight: 3 -> 1 channels"]
    torch.testing.assert_close(model.stem[0].weight, rgb.stem[0].weight.sum(dim=1, keepdim=True), rtol=0, atol=1e-6)
    split = backbone_split(model, "freeze")
    assert [name for name, _ in split.blocks] == ["stem.0", "stem.1", "stages.0", "stages.1", "stages.2", "stages.3",
                                                  "head"]  # the last: timm's head norm, before its fc
    with pytest.raises(gpucore.ConfigError, match="timm has no model 'convnext_tinny'. Close names: convnext_tiny"):
        build_model("timm:convnext_tinny", {})


@needs_timm
@pytest.mark.parametrize("precision", ["32", "bf16-mixed"])
def test_a_timm_vit_trains_as_with_torch_adamw_and_cosine(tmp_path, precision):
    # The 224-px bench saw a ViT's loss differ from a plain loop's after a tiny run; with the same batches the
    # engine's steps are torch.optim.AdamW's with gpucore's param groups (decay off for biases, norms, tokens).
    torch.manual_seed(0)
    model = build_model("timm:vit_small_patch16_224", {"img_size": 32, "patch_size": 8, "embed_dim": 64, "depth": 2,
                                                       "num_heads": 2, "num_classes": 10})
    reference = build_model("timm:vit_small_patch16_224", {"img_size": 32, "patch_size": 8, "embed_dim": 64,
                                                           "depth": 2, "num_heads": 2, "num_classes": 10})
    reference.load_state_dict(model.state_dict())
    x, y = torch.randn(64, 3, 32, 32), torch.randint(0, 10, (64,))
    config = gpucore.config.load_config({"optimizer": "adamw", "lr": 1e-3, "schedule": "cosine", "epochs": 6,
                                         "batch_size": 64, "precision": precision, "device": "cpu", "seed": 0,
                                         "progress": False, "report": False, "loggers": [], "val_fraction": 0.0,
                                         "run_dir": str(tmp_path)})
    losses = [row["train_loss"] for row in gpucore.train(config, model=model, train_data=(x, y)).history]
    groups = engine_config.param_groups(reference, config)
    assert sorted(len(g.params) for g in groups) == [12, 20]  # 12 matrices decay; biases, norms, tokens do not
    optimizer = torch.optim.AdamW([{"params": g.params, "weight_decay": g.weight_decay} for g in groups], lr=1e-3)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=6)
    expected = []
    for _ in range(6):  # one batch an epoch: the batch's order does not matter
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
            loss = nn.functional.cross_entropy(reference(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        expected.append(loss.item())
    assert losses == pytest.approx(expected, rel=5e-4 if precision == "32" else 5e-3)
    assert expected[-1] < expected[0] - 0.2  # it learns


@needs_timm
@needs_hub
def test_timm_weights_from_the_hugging_face_cache_or_where_to_get_them(tmp_path, monkeypatch):
    import huggingface_hub.constants  # a submodule: the package's lazy attributes do not include it

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    model = build_model("timm:convnext_atto", {"pretrained": False})  # False: no download asked, so allowed
    with pytest.raises(gpucore.ConfigError, match="'pretrained' is not passed to timm:convnext_atto"):
        build_model("timm:convnext_atto", {"pretrained": True})
    hub_id = model.pretrained_cfg["hf_hub_id"]
    with pytest.raises(gpucore.ConfigError, match=f"not in the Hugging Face cache.*hf download {hub_id}"):
        resolve_weights_path("true", "timm:convnext_atto", model)
    # the cache's layout: models--ORG--NAME/refs/main names the snapshot holding the files
    repo = tmp_path / "hub" / f"models--{hub_id.replace('/', '--')}"
    os.makedirs(repo / "refs")
    (repo / "refs" / "main").write_text("0" * 40)
    os.makedirs(repo / "snapshots" / ("0" * 40))
    torch.save(model.state_dict(), repo / "snapshots" / ("0" * 40) / "pytorch_model.bin")
    path = resolve_weights_path("true", "timm:convnext_atto", model)
    assert path == str(repo / "snapshots" / ("0" * 40) / "pytorch_model.bin")
    assert load_pretrained(model, path, strict=True).loaded == len(model.state_dict())


# ---- Grad-CAM's automatic layer on these models -----------------------------------------------------------

@needs_torchvision
@pytest.mark.parametrize("name,last_block", [("torchvision:resnet18", "layer4"), ("timm:convnext_atto", "stages.3")])
def test_gradcam_auto_layer_is_the_last_conv_block(name, last_block):
    if name.startswith("timm") and not _installed("timm"):
        pytest.skip("needs timm")
    torch.manual_seed(0)
    model = build_model(name, {"num_classes": 3}).eval()
    images = torch.randn(2, 3, 64, 64)
    auto = gpucore.gradcam(model, "auto", images, targets=1)
    named = gpucore.gradcam(model, last_block, images, targets=1)
    assert auto.cams.shape == (2, 64, 64)
    torch.testing.assert_close(auto.cams, named.cams)  # the same activations: layer4's output, the last stage's


# ---- the example -----------------------------------------------------------------------------------------

@needs_torchvision
def test_finetune_example_on_an_image_folder_from_a_weights_file_it_did_not_download(tmp_path):
    import runpy

    from gpucore.data.png import encode_png

    generator = torch.Generator().manual_seed(0)
    for split, count in (("train", 16), ("val", 6)):
        for label, name in enumerate(("red", "green", "blue")):
            os.makedirs(tmp_path / "images" / split / name)
            for i in range(count):
                image = torch.randint(0, 60, (24, 24, 3), generator=generator, dtype=torch.uint8)
                image[:, :, label] += 150
                (tmp_path / "images" / split / name / f"{i}.png").write_bytes(encode_png(image))
    torch.manual_seed(0)
    pretrained = build_model("torchvision:resnet18", {})  # randomly initialised, saved as torchvision saves its weights
    torch.save(pretrained.state_dict(), tmp_path / "weights.pth")
    example = runpy.run_path(os.path.join(os.path.dirname(__file__), "..", "..", "examples", "finetune",
                                          "finetune_folder.py"))
    result = example["main"](["--data", str(tmp_path / "images"), "--weights", str(tmp_path / "weights.pth"),
                              "--size", "24", "--epochs", "2", "--batch-size", "16", "--dir", str(tmp_path / "runs"),
                              "--device", "cpu"])
    assert result.status == "completed" and len(result.history) == 2
    report = json.load(open(result.stats_path))["pretrained"]
    assert report["head"] == ["fc.weight", "fc.bias"] and report["loaded"] == len(pretrained.state_dict()) - 2
    assert report["missing"] == report["unexpected"] == report["mismatched"] == []
    assert result.model.fc.out_features == 3
    # epoch 1 trained the head alone (tested above), epoch 2 the whole network
    assert not torch.equal(result.model.layer1[0].conv1.weight, pretrained.layer1[0].conv1.weight)
