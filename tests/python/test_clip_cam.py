"""Grad-CAM over a clip's frames for one output step (gpucore.cam.clip_gradcam) against the same computation written
here in plain PyTorch (a forward hook for the layer's activations, a hook on them for their gradients), on clips cut
from a photo; and its bad input, each named."""
import pytest
import torch
from torch import nn

import gpucore
from gpucore.cam import clip_gradcam
from gpucore.models.cslr import TemporalHead


class FrameNet(nn.Module):
    """A CSLR model in small: a CNN on every frame (features), pooled, under the CSLR models' TemporalHead."""

    temporal_stride = 4

    def __init__(self, classes=6):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                      nn.Conv2d(8, 12, 3, stride=2, padding=1), nn.ReLU())
        self.head = TemporalHead(12, classes, hidden=16, lstm_layers=1)

    def forward(self, clips):
        n, steps = clips.shape[:2]
        return self.head(self.features(clips.flatten(0, 1)).mean((2, 3)).unflatten(0, (n, steps)))


def frame_net(seed):
    torch.manual_seed(seed)
    model = FrameNet()
    for module in model.modules():  # batch statistics of their own, so that eval mode is not train mode
        if isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d)):
            module.running_mean.uniform_(-0.2, 0.2)
            module.running_var.uniform_(0.5, 1.5)
    return model.train()


def photo_clip(seed, frames=11, size=16):
    """A crop of scikit-image's astronaut drifting a pixel a frame from a random corner, with noise, standardised."""
    from skimage import data

    generator = torch.Generator().manual_seed(seed)
    photo = torch.tensor(data.astronaut(), dtype=torch.float32).permute(2, 0, 1) / 255
    top, left = (int(v) for v in torch.randint(0, 400, (2,), generator=generator))
    clip = torch.stack([photo[:, top + k:top + k + size, left + 2 * k:left + 2 * k + size] for k in range(frames)])
    return (clip - 0.45) / 0.25 + 0.1 * torch.randn(clip.shape, generator=generator)


def by_hand(model, layer, clip, step, gloss):
    """Grad-CAM of output (step, gloss) at `layer` in plain PyTorch: weights the spatially averaged gradients per frame,
    ReLU of the weighted sum, one min-max over the clip, bilinear resize to the frames."""
    kept = {}

    def forward_hook(module, inputs, output):
        kept["activation"] = output
        output.register_hook(lambda gradient: kept.__setitem__("gradient", gradient))

    handle = layer.register_forward_hook(forward_hook)
    model.eval()
    try:
        output = model(clip[None])
        output[0, step, gloss].backward()
    finally:
        handle.remove()
    a, g = kept["activation"].detach(), kept["gradient"]
    maps = torch.relu((g.mean((2, 3))[:, :, None, None] * a).sum(1))
    maps = (maps - maps.min()) / (maps.max() - maps.min() + 1e-7)
    return nn.functional.interpolate(maps[:, None], size=clip.shape[-2:], mode="bilinear", align_corners=False)[:, 0]


@pytest.mark.parametrize("seed,step,gloss", [(0, 0, 3), (1, 2, None), (2, 1, 0)])
def test_clip_gradcam_is_grad_cam_by_hand(seed, step, gloss):
    model, clip = frame_net(seed), photo_clip(seed)
    result = clip_gradcam(model, clip, step, gloss, layer="features.2")
    assert model.training  # its mode restored
    assert all(p.grad is None for p in model.parameters())  # gradients went to the activations only
    with torch.no_grad():
        top = int(model.eval()(clip[None])[0, step].argmax())
    reference = frame_net(seed)
    expected = by_hand(reference, reference.features[2], clip, step, top if gloss is None else gloss)
    assert result.cams.shape == (11, 16, 16)
    assert torch.allclose(result.cams, expected, atol=1e-5), float((result.cams - expected).abs().max())
    assert result.layers == ["features.2"] and result.method == "gradcam"


def test_another_step_explains_other_frames_and_auto_picks_the_last_per_frame_layer():
    model, clip = frame_net(3), photo_clip(3, frames=16)  # 4 output steps
    first, last = clip_gradcam(model, clip, 0, 1), clip_gradcam(model, clip, 3, 1)
    assert not torch.allclose(first.cams, last.cams, atol=1e-3)
    auto = clip_gradcam(model, clip, 3, 1)  # layer auto: the last module with a spatial output, features (its ReLU)
    assert auto.layers == ["features"]
    assert torch.equal(auto.cams, clip_gradcam(model, clip, 3, 1, layer="features.4").cams)


def test_bad_clip_cam_input_is_named():
    model, clip = frame_net(4), photo_clip(4)  # 11 frames: 3 output steps
    with pytest.raises(gpucore.ConfigError, match=r"output step 3 is past .* 11 frames gives 3 steps, 0 to 2"):
        clip_gradcam(model, clip, 3)
    with pytest.raises(gpucore.ConfigError, match=r"output step -1 is past"):
        clip_gradcam(model, clip, -1)
    with pytest.raises(gpucore.ConfigError, match=r"gloss 6 is not in the model's vocabulary: its ids are 0 .* to 5"):
        clip_gradcam(model, clip, 0, 6)
    with pytest.raises(gpucore.ConfigError, match=r"no layer 'layer4'.*Layers: features, features.0"):
        clip_gradcam(model, clip, 0, layer="layer4")
    with pytest.raises(gpucore.ConfigError, match=r"layer 'head.temporal.0' gives \(1, 16, 11\), not one C x h x w map "
                                                  "per frame"):
        clip_gradcam(model, clip, 0, layer="head.temporal.0")
    with pytest.raises(gpucore.ConfigError, match=r"method 'scorecam' is not one of gradcam, gradcam\+\+"):
        clip_gradcam(model, clip, 0, method="scorecam")
    with pytest.raises(gpucore.ConfigError, match=r"one floating-point T x C x H x W clip, got \(1, 11, 3, 16, 16\)"):
        clip_gradcam(model, clip[None], 0)
    with pytest.raises(gpucore.ConfigError, match=r"clip_gradcam's model must be a torch.nn.Module, got str \(for a "
                                                  r"gpucore.load result: its \.module"):
        clip_gradcam("runs/sign/checkpoints/best.pt", clip, 0)
    assert model.training and all(p.grad is None for p in model.parameters())


def test_clip_gradcam_of_cslr_resnet18_at_layer4_is_grad_cam_by_hand():
    from gpucore.models.registry import build_model

    try:
        torch.manual_seed(5)
        model = build_model("cslr_resnet18", {"num_classes": 6, "hidden": 16})
    except (gpucore.ConfigError, RuntimeError, ImportError) as exc:  # torchvision missing, or not this torch's build
        pytest.skip(f"cslr_resnet18 needs a working torchvision: {exc}")
    reference = build_model("cslr_resnet18", {"num_classes": 6, "hidden": 16})
    reference.load_state_dict(model.state_dict())
    clip = photo_clip(5, frames=9, size=64)  # 3 output steps; layer4 maps of 2 x 2
    result = clip_gradcam(model, clip, 1)  # auto: layer4
    with torch.no_grad():
        top = int(reference.eval()(clip[None])[0, 1].argmax())
    assert result.layers == ["layer4"]
    assert torch.allclose(result.cams, by_hand(reference, reference.layer4, clip, 1, top), atol=1e-5)
