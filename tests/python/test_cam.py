"""Grad-CAM against a plain PyTorch reference written here with pytorch-grad-cam's formulas."""
import importlib.util
import os

import pytest
import torch
from torch import nn

import gpucore
from gpucore import cam as gcam
from gpucore.models import FashionMnistCNN
from conftest import assert_no_growth, gpucore_command, require



class Block(nn.Module):
    """A torchvision-style basic residual block."""

    def __init__(self, channels_in, channels_out, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(channels_in, channels_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels_out)
        self.conv2 = nn.Conv2d(channels_out, channels_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels_out)
        self.downsample = (nn.Sequential(nn.Conv2d(channels_in, channels_out, 1, stride, bias=False),
                                         nn.BatchNorm2d(channels_out)) if stride != 1 or channels_in != channels_out else None)

    def forward(self, x):
        identity = self.downsample(x) if self.downsample is not None else x
        return torch.relu(self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))) + identity)


class TinyResNet(nn.Module):
    def __init__(self, classes=7):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.layer1 = Block(8, 8, 1)
        self.layer2 = Block(8, 16, 2)
        self.layer3 = Block(16, 24, 2)
        self.fc = nn.Linear(24, classes)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(x.mean((2, 3)))


def make_model(seed=0):
    torch.manual_seed(seed)
    model = TinyResNet()
    # Random batch-norm statistics, so eval mode differs from train mode.
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.2, 0.2)
            module.running_var.uniform_(0.5, 1.5)
    return model


def scale(cam, size=None):
    """pytorch-grad-cam's scale_cam_image."""
    cam = cam - cam.amin((1, 2), keepdim=True)
    cam = cam / (1e-7 + cam.amax((1, 2), keepdim=True))
    if size is not None:
        cam = nn.functional.interpolate(cam[:, None], size=size, mode="bilinear", align_corners=False)[:, 0]
    return cam


def reference(model, layer_names, x, method, targets=None, reshape=None):
    """targets: None (the top class), a class or one per sample, or a function of the output giving one score per
    sample; reshape: what turns the layer's output (and its gradient) into N x C x H x W."""
    model.eval()
    layers = [dict(model.named_modules())[name] for name in layer_names]
    store = {}
    handles = [layer.register_forward_hook(lambda m, i, o, k=k: store.__setitem__(k, o)) for k, layer in enumerate(layers)]
    try:
        out = model(x)
        if callable(targets):
            score = targets(out)
        else:
            index = out.argmax(1) if targets is None else torch.as_tensor(targets).expand(x.shape[0])
            score = out.gather(1, index[:, None])
        activations = [store[k] for k in range(len(layers))]
        grads = torch.autograd.grad(score.sum(), activations)
    finally:
        for handle in handles:
            handle.remove()
    cams = []
    for a, g in zip(activations, grads):
        a, g = a.detach(), g.detach()
        if reshape is not None:
            a, g = reshape(a), reshape(g)
        if method == "gradcam":
            cam = (g.mean((2, 3))[:, :, None, None] * a).sum(1)
        elif method == "gradcam++":
            g2, g3 = g**2, g**3
            sum_a = a.sum((2, 3))[:, :, None, None]
            aij = g2 / (2 * g2 + sum_a * g3 + 1e-6)
            aij = torch.where(g != 0, aij, torch.zeros_like(aij))
            cam = ((torch.relu(g) * aij).sum((2, 3))[:, :, None, None] * a).sum(1)
        elif method == "xgradcam":
            sum_a = a.sum((2, 3))[:, :, None, None]
            cam = ((g * a / (sum_a + 1e-7)).sum((2, 3))[:, :, None, None] * a).sum(1)
        elif method == "hirescam":
            cam = (g * a).sum(1)
        elif method == "layercam":
            cam = (torch.relu(g) * a).sum(1)
        elif method in ("eigencam", "eigengradcam"):
            m = a if method == "eigencam" else a * g
            cam = []
            for sample in m:
                flat = sample.reshape(sample.shape[0], -1).T
                flat = flat - flat.mean(0)
                _, _, vt = torch.linalg.svd(flat, full_matrices=False)
                projection = flat @ vt[0]
                projection = projection * (1 if projection[projection.abs().argmax()] >= 0 else -1)
                cam.append(projection.reshape(sample.shape[1:]))
            cam = torch.stack(cam)
        elif method == "scorecam":
            with torch.no_grad():
                up = nn.functional.interpolate(a, size=x.shape[-2:], mode="bilinear", align_corners=True)
                low, high = up.flatten(2).amin(2)[..., None, None], up.flatten(2).amax(2)[..., None, None]
                up = (up - low) / (high - low + 1e-8)
                weights = []
                for i in range(x.shape[0]):
                    scores = model(x[i][None] * up[i][:, None])[:, index[i]]
                    weights.append(torch.softmax(scores, 0))
                cam = (torch.stack(weights)[:, :, None, None] * a).sum(1)
        cams.append(scale(torch.relu(cam), x.shape[-2:]))
    return scale(torch.stack(cams, 1).clamp_min(0).mean(1))


@pytest.mark.parametrize("method", gcam.METHODS)
def test_methods_match_the_reference(method):
    model = make_model()
    x = torch.randn(5, 3, 32, 28)
    ours = gpucore.gradcam(model, "layer2", x, method=method).cams
    expected = reference(model, ["layer2"], x, method)
    assert ours.shape == (5, 32, 28)
    torch.testing.assert_close(ours, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("method", ["eigencam", "eigengradcam"])
def test_eigen_methods_match_the_svd_when_the_map_has_fewer_pixels_than_channels(method):
    """layer3's map of a 16 x 16 input is 4 x 4 with 24 channels: the component comes from the 16 x 16 Gram
    matrix (a ResNet-50's layer4: 49 pixels, 2048 channels), not the 24 x 24 one the test above uses."""
    model = make_model(2)
    x = torch.randn(4, 3, 16, 16)
    ours = gpucore.gradcam(model, "layer3", x, method=method).cams
    torch.testing.assert_close(ours, reference(model, ["layer3"], x, method), rtol=1e-4, atol=1e-4)


def test_several_layers_explicit_targets_and_chunks():
    model = make_model(1)
    x = torch.randn(6, 3, 24, 24)
    ours = gpucore.CAM(model, ["layer2", model.layer3], "gradcam", batch_size=4)(x, targets=3).cams
    torch.testing.assert_close(ours, reference(model, ["layer2", "layer3"], x, "gradcam", targets=3), rtol=1e-4,
                               atol=1e-4)
    per_sample = gpucore.gradcam(model, "layer3", x, targets=[0, 1, 2, 3, 4, 5]).cams
    torch.testing.assert_close(per_sample, reference(model, ["layer3"], x, "gradcam", targets=[0, 1, 2, 3, 4, 5]),
                               rtol=1e-4, atol=1e-4)
    class_3 = reference(model, ["layer3"], x, "gradcam", targets=3)
    assert (per_sample - class_3).abs().max() > 0.05  # not class 3's maps: each sample's own class


@pytest.mark.parametrize("method,class_name", [
    ("gradcam", "GradCAM"), ("gradcam++", "GradCAMPlusPlus"), ("xgradcam", "XGradCAM"), ("hirescam", "HiResCAM"),
    ("layercam", "LayerCAM"), ("scorecam", "ScoreCAM"),
])
def test_pytorch_grad_cam_agrees_when_installed(method, class_name):
    # EigenCAM/EigenGradCAM are left out: pytorch-grad-cam leaves the SVD's sign to chance.
    if importlib.util.find_spec("pytorch_grad_cam") is None:  # installed but broken: the import below fails the test
        pytest.skip("needs pytorch-grad-cam (scripts/bootstrap.sh --tests installs it)")
    import pytorch_grad_cam as pgc
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    model = make_model()
    x = torch.randn(3, 3, 32, 32)
    with getattr(pgc, class_name)(model=model, target_layers=[model.layer3]) as theirs:
        expected = theirs(input_tensor=x, targets=[ClassifierOutputTarget(2)] * 3)
    ours = gpucore.gradcam(model, "layer3", x, targets=2, method=method).numpy()
    assert abs(ours - expected).max() < 1e-4


def test_gradients_do_not_touch_parameters_and_mode_is_restored():
    model = make_model()
    model.train()
    x = torch.randn(2, 3, 16, 16)
    gpucore.gradcam(model, "layer3", x)
    assert model.training
    assert all(p.grad is None for p in model.parameters())
    for module in model.modules():
        assert not module._forward_hooks


def test_hooks_removed_and_mode_restored_after_a_failure():
    model = make_model()
    model.eval()
    x = torch.randn(2, 3, 16, 16)
    with pytest.raises(gpucore.ConfigError, match="out of range"):
        gpucore.gradcam(model, "layer3", x, targets=99)
    assert not model.training
    assert all(not m._forward_hooks for m in model.modules())


BF16_ATOL = 0.03  # measured: 0.011


def test_frozen_models_and_half_precision_inputs_work():
    model = make_model()
    for p in model.parameters():
        p.requires_grad_(False)
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(229))
    expected = reference(make_model(), ["layer3"], x, "gradcam")  # the same weights, trainable, in float32
    result = gpucore.gradcam(model, "layer3", x)
    torch.testing.assert_close(result.cams, expected, rtol=1e-4, atol=1e-4)
    assert all(not p.requires_grad for p in model.parameters())
    bf16 = make_model().to(torch.bfloat16)
    cams = gpucore.gradcam(bf16, "layer3", x.to(torch.bfloat16)).cams
    assert cams.dtype == torch.float32
    torch.testing.assert_close(cams, expected, rtol=0, atol=BF16_ATOL)  # bfloat16's 8 bits, through 3 layers


def test_errors_name_the_problem():
    model = make_model()
    x = torch.randn(2, 3, 16, 16)
    with pytest.raises(gpucore.ConfigError, match=r"no layer 'layr3'.*Closest: layer3"):
        gpucore.gradcam(model, "layr3", x)
    with pytest.raises(gpucore.ConfigError, match="did not run"):
        unused = nn.Conv2d(1, 1, 1)
        model.add_module("unused", unused)
        gpucore.gradcam(model, "unused", x)
    with pytest.raises(gpucore.ConfigError, match="N x C x H x W"):
        gpucore.gradcam(model, "layer3", torch.randn(3, 16, 16))
    with pytest.raises(gpucore.ConfigError, match=r"inputs of shape \(2, 5, 16, 16\).*do not fit the model"):
        gpucore.gradcam(model, "layer3", torch.randn(2, 5, 16, 16))
    with pytest.raises(gpucore.ConfigError, match="not one of gradcam"):
        gpucore.gradcam(model, "layer3", x, method="gradcam+++")
    with pytest.raises(gpucore.ConfigError, match="2 entries for 3 inputs|3 inputs"):
        gpucore.gradcam(model, "layer3", torch.randn(3, 3, 16, 16), targets=[1, 2])
    with pytest.raises(gpucore.ConfigError, match="reshape_transform"):
        gpucore.gradcam(model, "fc", x)


def test_segmentation_and_multi_head_targets():
    torch.manual_seed(0)
    seg = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 1))
    x = torch.randn(2, 3, 12, 12)
    mask = torch.zeros(12, 12)
    mask[3:8, 3:8] = 1
    cams = gpucore.gradcam(seg, "1", x, targets=gcam.segmentation_target(2, mask)).cams
    by_hand = lambda out: (out[:, 2] * mask).sum((1, 2))  # class 2's logits summed over the mask
    torch.testing.assert_close(cams, reference(seg, ["1"], x, "gradcam", targets=by_hand), rtol=1e-4, atol=1e-4)
    whole = gpucore.gradcam(seg, "1", x, targets=gcam.segmentation_target(2)).cams
    torch.testing.assert_close(whole, reference(seg, ["1"], x, "gradcam", targets=lambda out: out[:, 2].sum((1, 2))),
                               rtol=1e-4, atol=1e-4)
    head_model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                               nn.Linear(32, 4 * 10))
    cams = gpucore.gradcam(head_model, "1", x, targets=gcam.head_target(3, 7, classes=10)).cams
    head_3_class_7 = lambda out: out[:, 3 * 10 + 7]  # head 3's block of 10 outputs, its 8th
    torch.testing.assert_close(cams, reference(head_model, ["1"], x, "gradcam", targets=head_3_class_7), rtol=1e-4,
                               atol=1e-4)


def test_reshape_transform_for_tokens():
    class Tokens(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Conv2d(3, 16, 4, 4)
            self.mix = nn.Linear(16, 16)
            self.head = nn.Linear(16, 5)

        def forward(self, x):
            tokens = self.embed(x).flatten(2).transpose(1, 2)  # N x 16 tokens x 16
            tokens = self.mix(tokens)
            return self.head(tokens.mean(1))

    to_map = lambda t: t.transpose(1, 2).reshape(t.shape[0], 16, 4, 4)
    torch.manual_seed(0)
    model, x = Tokens(), torch.randn(2, 3, 16, 16)
    cams = gpucore.gradcam(model, "mix", x, reshape_transform=to_map).cams
    torch.testing.assert_close(cams, reference(model, ["mix"], x, "gradcam", reshape=to_map), rtol=1e-4, atol=1e-4)


def test_overlay_matches_show_cam_on_image_and_opencv_jet():
    torch.manual_seed(0)
    images = torch.randint(0, 256, (2, 10, 12, 3), dtype=torch.uint8)
    cams = torch.rand(2, 10, 12)
    result = gcam.CamResult(cams, "gradcam", ["x"])
    ours = result.overlay(images, alpha=0.4)
    ramp = torch.arange(256.0).div(255).reshape(1, 1, 256) + 1e-6
    jet = gcam.CamResult(ramp, "gradcam", ["x"]).heatmaps()[0, 0]
    heat = jet[(255 * cams).to(torch.uint8).long()].float() / 255
    blend = 0.4 * heat + 0.6 * images.float() / 255
    expected = (255 * (blend / blend.amax((1, 2, 3), keepdim=True))).to(torch.uint8)
    assert torch.equal(ours, expected)
    cv2 = require("cv2")
    import numpy as np

    table = cv2.applyColorMap(np.arange(256, dtype=np.uint8).reshape(1, 256), cv2.COLORMAP_JET)[0][:, ::-1].copy()
    heatmaps = gcam.CamResult(ramp, "gradcam", ["x"]).heatmaps()
    assert np.array_equal(heatmaps[0, 0].numpy(), table)


def test_png_files_and_notebook_display(tmp_path):
    model = make_model()
    x = torch.rand(3, 3, 16, 16)
    result = gpucore.gradcam(model, "layer3", x)
    paths = result.save(str(tmp_path / "out"), images=x)
    assert len(paths) == 3
    data = open(paths[0], "rb").read()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and b"IEND" in data
    png = result._repr_png_()
    assert png.startswith(b"\x89PNG") and "data:image/png;base64," in result._repr_html_()
    if importlib.util.find_spec("PIL") is None:
        pytest.skip("needs Pillow (for its last part: the saved PNG decodes to the overlay)")
    from PIL import Image
    decoded = torch.from_numpy(__import__("numpy").array(Image.open(paths[0])))
    assert torch.equal(decoded, result.overlay(x)[0])


def test_ops_pass_opcheck():
    torch.manual_seed(0)
    a, g = torch.randn(2, 4, 5, 6), torch.randn(2, 4, 5, 6)
    for method in ("gradcam", "gradcam++", "xgradcam"):
        torch.library.opcheck(torch.ops.gpucore.cam_weights, (a, g, method))
    torch.library.opcheck(torch.ops.gpucore.cam_weighted_sum, (a, torch.randn(2, 4)))
    torch.library.opcheck(torch.ops.gpucore.cam_weighted_sum, (a, g))
    torch.library.opcheck(torch.ops.gpucore.cam_normalize, (torch.rand(2, 5, 6), [9, 11]))
    torch.library.opcheck(torch.ops.gpucore.cam_normalize, (torch.rand(2, 5, 6), []))
    torch.library.opcheck(torch.ops.gpucore.cam_overlay,
                          (torch.randint(0, 256, (2, 5, 6, 3), dtype=torch.uint8), torch.rand(2, 5, 6), 0.5))


@pytest.mark.slow
def test_memory_is_flat_over_200_calls():
    # 200 calls may grow the process by a quarter CAM each: keeping every call's CAM (8 KB) alive fails.
    model = make_model()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(311))
    cam_bytes = gpucore.gradcam(model, "layer3", x).cams.nbytes  # with the 19 more: 20 calls before measuring
    assert_no_growth(lambda: gpucore.gradcam(model, "layer3", x), 200, 200 * cam_bytes // 4, warmup=19, each=False,
                     what=f"over 200 calls of {cam_bytes}-byte CAMs")
    assert all(not m._forward_hooks and not m._backward_hooks for m in model.modules())


@pytest.mark.needs_cuda
@pytest.mark.parametrize("method", gcam.METHODS)
def test_cuda_kernels_match_cpu(method):
    model = make_model()
    x = torch.randn(3, 3, 32, 32)
    cpu = gpucore.gradcam(model, "layer2", x, method=method).cams
    gpu = gpucore.gradcam(model.cuda(), "layer2", x.cuda(), method=method).cams
    assert gpu.device.type == "cuda"
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-3, atol=1e-3)
    images = torch.randint(0, 256, (3, 32, 32, 3), dtype=torch.uint8)
    assert torch.equal(gcam.CamResult(cpu, method, []).overlay(images),
                       gcam.CamResult(cpu.cuda(), method, []).overlay(images.cuda()).cpu())


@pytest.mark.slow
def test_cli_gradcam_on_a_trained_checkpoint(tmp_path, fashion_run, capsys):
    import json

    import numpy as np

    from gpucore.data.synthetic import synthetic_fashion

    trained = fashion_run  # the session's finished run of the Fashion-MNIST CNN
    (images, labels), _ = synthetic_fashion(train_size=4, val_size=1, seed=5)
    np.save(tmp_path / "images.npy", images[:, 0].numpy())
    out = tmp_path / "cams"
    command = ["gradcam", "--checkpoint", f"{trained.checkpoint_dir}/best.pt", "--layer", "features.4", "--images",
               str(tmp_path / "images.npy"), "--out", str(out), "--method", "gradcam++"]
    result = gpucore_command(capsys, *command)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["images"] == 4
    assert sorted(p.name for p in out.iterdir())[:2] == ["cams_gradcam++.pt", "image_0000_gradcam++.png"]
    assert torch.load(out / "cams_gradcam++.pt").shape == (4, 28, 28)
    bad = gpucore_command(capsys, *command[:-4], "--layer", "feature.4", "--out", str(out))
    assert bad.returncode == 2 and "no layer 'feature.4'" in bad.stderr
    folder = tmp_path / "pictures"
    folder.mkdir()
    from gpucore import cli
    from gpucore.data.png import encode_png

    for name, picture in (("a", images[0, 0]), ("b", torch.randint(0, 256, (40, 36), dtype=torch.uint8))):
        (folder / f"{name}.png").write_bytes(encode_png(picture))
    from_folder = command[:3] + ["--images", str(folder), "--out", str(tmp_path / "folder_cams")]
    assert cli.main(from_folder) == 0  # resized to the checkpoint's 28 x 28; the automatic layer
    assert torch.load(tmp_path / "folder_cams" / "cams_gradcam.pt").shape == (2, 28, 28)
    assert cli.main(from_folder + ["--size", "40", "36"]) == 2  # the model was not trained at that size


def test_each_entry_point_takes_its_kind_of_model_and_names_it_for_another(fashion_run):
    """gradcam takes an nn.Module and inputs as it takes them, photo_gradcam a gpucore.load result and photos: the
    same maps for photos at the model's own size; either given the other kind (or a path) is a ConfigError saying
    what to pass, not an AttributeError from inside."""
    from gpucore.data.synthetic import synthetic_fashion

    checkpoint = f"{fashion_run.checkpoint_dir}/best.pt"
    loaded = gpucore.load(checkpoint, "cpu")
    (images, _), _ = synthetic_fashion(train_size=3, val_size=1, seed=7)  # 3 x 1 x 28 x 28 uint8: the model's size
    photos = gcam.photo_gradcam(loaded, list(images), "features.4")
    direct = gpucore.gradcam(loaded.module, "features.4", loaded.preprocess(images))
    torch.testing.assert_close(photos.cams.cams, direct.cams, rtol=0, atol=0)
    for model in (loaded, checkpoint):
        with pytest.raises(gpucore.ConfigError, match=rf"gradcam's model must be a torch.nn.Module, got "
                                                      rf"{type(model).__name__} \(for a gpucore.load result: its "
                                                      r"\.module, with inputs prepared by its \.preprocess"):
            gpucore.gradcam(model, "features.4", loaded.preprocess(images))
    with pytest.raises(gpucore.ConfigError, match=r"CAM's model must be a torch.nn.Module, got LoadedModel"):
        gpucore.CAM(loaded, "features.4")
    for model in (loaded.module, checkpoint):
        with pytest.raises(gpucore.ConfigError, match=rf"photo_gradcam's model must be a gpucore.load result "
                                                      rf"\(LoadedModel\), got {type(model).__name__} \(for an "
                                                      r"nn.Module and its inputs: gpucore.gradcam\)"):
            gcam.photo_gradcam(model, list(images))


def test_auto_layer_is_the_last_spatial_block_and_gives_its_cams():
    model = make_model()
    x = torch.randn(3, 3, 32, 28)
    result = gpucore.gradcam(model, "auto", x)
    assert result.layers == ["layer3"]  # layer3 is the last 4-D output; the mean and fc follow
    torch.testing.assert_close(result.cams, reference(model, ["layer3"], x, "gradcam"), rtol=1e-4, atol=1e-4)
    cnn = FashionMnistCNN()
    assert gcam.find_target_layer(cnn, torch.randn(1, 1, 28, 28)) == "features"


def test_auto_layer_skips_the_output_of_a_segmentation_model_and_says_when_there_is_none():
    torch.manual_seed(0)
    segmenter = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 2, 1))
    assert gcam.find_target_layer(segmenter, torch.randn(1, 3, 8, 8)) == "1"
    with pytest.raises(gpucore.ConfigError, match="layer 'auto' found no layer"):
        gpucore.gradcam(nn.Sequential(nn.Flatten(), nn.Linear(12, 3)), "auto", torch.randn(2, 3, 2, 2))


def test_the_notebook_grid_shows_each_map_at_a_readable_size():
    """16 maps of 28 x 28 were a 238 x 58 strip; now 4 a row, each enlarged 4x (112 px), with 4 px gaps."""
    import io

    import numpy as np
    Image = require("PIL.Image")
    cams = torch.rand(16, 28, 28)
    result = gcam.CamResult(cams, "gradcam", ["x"])
    picture = np.array(Image.open(io.BytesIO(result._repr_png_())))
    assert picture.shape == (4 * 112 + 3 * 4, 4 * 112 + 3 * 4, 3)
    heat = result.heatmaps()[5].numpy()  # row 1, column 1: at (116, 116), each pixel a 4 x 4 block
    assert np.array_equal(picture[116:116 + 112, 116:116 + 112], heat.repeat(4, axis=0).repeat(4, axis=1))
    # Maps already large enough are shown at their size; at most 32.
    big = gcam.CamResult(torch.rand(40, 100, 120), "gradcam", ["x"])
    picture = np.array(Image.open(io.BytesIO(big._repr_png_())))
    assert picture.shape == (8 * 100 + 7 * 4, 4 * 120 + 3 * 4, 3)


TINY_MODELS = '''
import torch
from torch import nn


def segmenter():
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 1, 1))


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU())
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))

    def forward(self, x):
        return self.head(self.features(x))
'''


def _gradcam_cli(capsys, *args):
    from gpucore.cli import main

    code = main(["gradcam", *map(str, args), "--device", "cpu"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture()
def tiny_models(tmp_path, monkeypatch):
    (tmp_path / "cam_tiny_models.py").write_text(TINY_MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    import cam_tiny_models
    return cam_tiny_models


def _one_epoch_checkpoint(tmp_path, model, images, targets, **keys):
    """best.pt of one epoch on the CPU, the last 8 samples held out for validation."""
    torch.manual_seed(0)
    run = gpucore.train(dict(run_dir=str(tmp_path / "runs"), progress=False, report=False, epochs=1, batch_size=8,
                             device="cpu", precision="32", loggers=[], **keys),
                        model=model, train_data=(images[:-8], targets[:-8]), val_data=(images[-8:], targets[-8:]))
    return os.path.join(run.checkpoint_dir, "best.pt")


def test_gradcam_cli_explains_a_chosen_class_of_a_segmentation_model(tmp_path, capsys, tiny_models):
    import numpy as np

    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (40, 1, 16, 16), dtype=torch.uint8, generator=generator)
    masks = (images[:, 0] > 127).long()  # bright pixels are the foreground
    best = _one_epoch_checkpoint(tmp_path, tiny_models.segmenter(), images, masks, loss="dice_bce", lr=0.05)
    np.save(tmp_path / "inputs.npy", images[32:36, 0].numpy())
    common = ("--checkpoint", best, "--images", tmp_path / "inputs.npy", "--model", "cam_tiny_models:segmenter",
              "--layer", "1")
    # Without a class: refused, naming the option and the classes it takes (no Python callable asked for).
    code, out, err = _gradcam_cli(capsys, *common, "--out", tmp_path / "none")
    assert code == 2 and "segmentation model (outputs N x 1 x H x W)" in err and "--class" in err, err
    assert "an index 0 to 1" in err and "callable" not in err
    loaded = gpucore.load(best, "cpu", model="cam_tiny_models:segmenter")
    x = loaded.preprocess(images[32:36])
    for chosen, sign in (("1", 1.0), ("0", -1.0)):
        code, out, err = _gradcam_cli(capsys, *common, "--class", chosen, "--out", tmp_path / f"class{chosen}")
        assert code == 0, err
        cams = torch.load(tmp_path / f"class{chosen}" / "cams_gradcam.pt")
        expected = gpucore.gradcam(loaded.module, "1", x, targets=lambda o: sign * o[:, 0].flatten(1).sum(1)).cams
        torch.testing.assert_close(cams, expected.cpu(), rtol=1e-5, atol=1e-6)
        assert cams.shape == (4, 16, 16) and float(cams.max()) > 0
    background = torch.load(tmp_path / "class0" / "cams_gradcam.pt")
    foreground = torch.load(tmp_path / "class1" / "cams_gradcam.pt")
    assert not torch.allclose(background, foreground)
    code, out, err = _gradcam_cli(capsys, *common, "--class", "7", "--out", tmp_path / "bad")
    assert code == 2 and "--class '7' is not a class of this model: give an index 0 to 1" in err, err


def test_gradcam_cli_class_overrides_a_classifiers_top_class(tmp_path, capsys, tiny_models):
    import numpy as np

    generator = torch.Generator().manual_seed(1)
    images = torch.randint(0, 256, (24, 1, 12, 12), dtype=torch.uint8, generator=generator)
    labels = torch.randint(0, 3, (24,), generator=generator)
    best = _one_epoch_checkpoint(tmp_path, tiny_models.Classifier(), images, labels, top_k=0)
    np.save(tmp_path / "inputs.npy", images[16:20, 0].numpy())
    common = ("--checkpoint", best, "--images", tmp_path / "inputs.npy", "--model", "cam_tiny_models:Classifier",
              "--layer", "features")
    loaded = gpucore.load(best, "cpu", model="cam_tiny_models:Classifier")
    x = loaded.preprocess(images[16:20])
    code, out, err = _gradcam_cli(capsys, *common, "--class", "2", "--out", tmp_path / "two")
    assert code == 0, err
    cams = torch.load(tmp_path / "two" / "cams_gradcam.pt")
    torch.testing.assert_close(cams, gpucore.gradcam(loaded.module, "features", x, targets=2).cams, rtol=1e-5,
                               atol=1e-6)
    top = gpucore.gradcam(loaded.module, "features", x).cams
    code, out, err = _gradcam_cli(capsys, *common, "--out", tmp_path / "top")
    torch.testing.assert_close(torch.load(tmp_path / "top" / "cams_gradcam.pt"), top, rtol=1e-5, atol=1e-6)
    assert loaded.classes is None  # tensors: no class names (names: the test below)
    code, out, err = _gradcam_cli(capsys, *common, "--class", "3", "--target", "1", "--out", tmp_path / "both")
    assert code == 2 and "--target and --class both name the class to explain" in err
    code, out, err = _gradcam_cli(capsys, *common, "--class", "cat", "--out", tmp_path / "bad")
    assert code == 2 and "--class 'cat' is not a class of this model: give an index 0 to 2" in err, err


def test_gradcam_cli_class_of_a_several_class_segmentation_model_by_index_or_name():
    import argparse

    from gpucore.cli import _cam_targets
    from gpucore.config import load_config
    from gpucore.evaluation.load import LoadedModel

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 3, 1)).eval()
    loaded = LoadedModel(model, load_config({"loss": "dice_bce"}), ["sky", "road", "car"], {"mean": [0.5], "std": [1.0]},
                         [1, 8, 8], torch.device("cpu"), "seg.pt")
    x = torch.randn(2, 1, 8, 8)

    def args(category=None, target=None):
        return argparse.Namespace(category=category, target=target, checkpoint="seg.pt")

    expected = gpucore.gradcam(model, "1", x, targets=gcam.segmentation_target(2)).cams
    for chosen in ("2", "car"):
        cams = gpucore.gradcam(model, "1", x, targets=_cam_targets(args(chosen), loaded, x)).cams
        torch.testing.assert_close(cams, expected, rtol=0, atol=0)
    with pytest.raises(gpucore.ConfigError, match=r"segmentation model \(outputs N x 3 x H x W\): name the class to "
                                                  r"explain with --class: an index 0 to 2; or a name: sky, road, car"):
        _cam_targets(args(), loaded, x)
    with pytest.raises(gpucore.ConfigError, match=r"--class 'boat' is not a class of this model: give an index 0 to "
                                                  r"2; or a name: sky, road, car"):
        _cam_targets(args("boat"), loaded, x)
    # a classifier with class names: the name is its index; --target is the same by index
    classifier = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                               nn.Linear(4, 3)).eval()
    named = LoadedModel(classifier, load_config({}), ["cat", "dog", "bird"], {"mean": [0.5], "std": [1.0]},
                        [1, 8, 8], torch.device("cpu"), "cls.pt")
    assert _cam_targets(args("dog"), named, x) == 1 and _cam_targets(args("2"), named, x) == 2
    assert _cam_targets(args(target=0), named, x) == 0 and _cam_targets(args(), named, x) is None
