"""Grad-CAM throughput, side by side in one run, on torchvision's ResNet-50 (random weights; the same layout
built here when torchvision is not installed), target layer4, each image's top class.

Default: CAMs plus overlays per second (batch 64, 224 px) with gpucore, a plain PyTorch reference on the
same device, and pytorch-grad-cam (GradCAM + show_cam_on_image) when it is installed. --methods: maps
per second of each method named (or all), gpucore against pytorch-grad-cam's class for it.

    python bench/cam_bench.py [--device auto] [--batch 64] [--size 224] [--repeats 3] [--json out.json]
    python bench/cam_bench.py --methods all|gradcam,eigencam,... [--batch 16] [--size 224]

Not a test: run it on purpose and quote the numbers with the device.
"""
import argparse
import os
import sys
import time

import torch
from torch import nn

import gpucore

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import device_label, import_torchvision, report, result_json, sync  # noqa: E402


class Bottleneck(nn.Module):
    def __init__(self, channels_in, width, stride):
        super().__init__()
        out = width * 4
        self.body = nn.Sequential(
            nn.Conv2d(channels_in, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out))
        self.downsample = (nn.Sequential(nn.Conv2d(channels_in, out, 1, stride, bias=False), nn.BatchNorm2d(out))
                           if stride != 1 or channels_in != out else nn.Identity())

    def forward(self, x):
        return torch.relu(self.body(x) + self.downsample(x))


class ResNet50(nn.Module):
    """torchvision's resnet50 layout (3-4-6-3 bottlenecks), 25.6 M parameters, random weights: the model
    where torchvision is not installed."""

    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        layers, channels = [], 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            stage = []
            for index in range(blocks):
                stage.append(Bottleneck(channels, width, stride if index == 0 else 1))
                channels = width * 4
            layers.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(2048, classes)

    def forward(self, x):
        x = self.layer4(self.layer3(self.layer2(self.layer1(self.stem(x)))))
        return self.fc(x.mean((2, 3)))


def resnet50():
    """torchvision's ResNet-50 (random weights) and its name, or the same layout built here."""
    try:
        return import_torchvision().models.resnet50(), "torchvision ResNet-50"
    except ImportError:
        return ResNet50(), "ResNet-50 layout"


# pytorch-grad-cam's class for each gpucore method
PEER_CLASSES = {"gradcam": "GradCAM", "gradcam++": "GradCAMPlusPlus", "xgradcam": "XGradCAM", "hirescam": "HiResCAM",
                "layercam": "LayerCAM", "eigencam": "EigenCAM", "eigengradcam": "EigenGradCAM", "scorecam": "ScoreCAM"}


def plain_reference(model, x, images, jet):
    """Grad-CAM written directly in PyTorch on the same device: hooks, autograd.grad, tensor math."""
    store = {}
    handle = model.layer4.register_forward_hook(lambda m, i, o: store.__setitem__("a", o))
    try:
        x = x.detach().requires_grad_(True)
        out = model(x)
        (grad,) = torch.autograd.grad(out.gather(1, out.argmax(1, keepdim=True)).sum(), store["a"])
    finally:
        handle.remove()
    a = store["a"].detach()
    cam = torch.relu((grad.mean((2, 3), keepdim=True) * a).sum(1))
    cam = cam - cam.amin((1, 2), keepdim=True)
    cam = cam / (cam.amax((1, 2), keepdim=True) + 1e-7)
    cam = nn.functional.interpolate(cam[:, None], size=x.shape[-2:], mode="bilinear", align_corners=False)[:, 0]
    heat = jet[(255 * cam).to(torch.uint8).long()].float() / 255
    blend = 0.5 * heat + 0.5 * images.float() / 255
    return (255 * (blend / blend.amax((1, 2, 3), keepdim=True))).to(torch.uint8)


def timed(runners, repeats, device):
    """Median seconds of each runner over interleaved rounds (a shared, noisy machine hits all of them alike)."""
    for run in runners.values():
        run()  # warm-up
    seconds = {name: [] for name in runners}
    for _ in range(repeats):
        for name, run in runners.items():
            sync(device)
            start = time.perf_counter()
            run()
            sync(device)
            seconds[name].append(time.perf_counter() - start)
    return {name: sorted(times)[len(times) // 2] for name, times in seconds.items()}


def method_runners(model, x, methods):
    """gpucore and pytorch-grad-cam, maps only, for each method (pytorch-grad-cam must be installed)."""
    import_torchvision()  # pytorch-grad-cam imports it
    import pytorch_grad_cam

    def peer(method):
        def run():
            with getattr(pytorch_grad_cam, PEER_CLASSES[method])(model=model, target_layers=[model.layer4]) as cam:
                return cam(input_tensor=x, targets=None)
        return run

    runners = {}
    for method in methods:
        runners[f"gpucore {method}"] = lambda method=method: gpucore.gradcam(model, "layer4", x, method=method).cams
        runners[f"pytorch-grad-cam {method}"] = peer(method)
    return runners


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--methods", help="maps per second of these methods (comma-separated, or all) against "
                        "pytorch-grad-cam, instead of Grad-CAM with overlays")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)

    device = gpucore.select_device(args.device).device
    torch.manual_seed(0)
    model, model_name = resnet50()
    model = model.to(device).eval()
    x = torch.randn(args.batch, 3, args.size, args.size, device=device)
    facts = {"device": device_label(device), "batch": args.batch, "size": args.size, "model": model_name}
    title = f"device: {device_label(device)}, torch {torch.__version__}, batch {args.batch}, {args.size} px, {model_name} layer4"

    if args.methods:
        methods = list(PEER_CLASSES) if args.methods == "all" else args.methods.split(",")
        unknown = [method for method in methods if method not in PEER_CLASSES]
        if unknown:
            parser.error(f"unknown method {unknown[0]}; choose from {', '.join(PEER_CLASSES)}")
        seconds = timed(method_runners(model, x, methods), args.repeats, device)
        rate = {name: args.batch / value for name, value in seconds.items()}
        print(title)
        print(f"{'method':<14}{'gpucore maps/s':>16}{'pytorch-grad-cam':>18}   gpucore's speed-up")
        ratio = {}
        for method in methods:
            ours, theirs = rate[f"gpucore {method}"], rate[f"pytorch-grad-cam {method}"]
            ratio[method] = ours / theirs
            print(f"{method:<14}{ours:>16.2f}{theirs:>18.2f}{ratio[method]:>12.2f}x")
        return result_json(dict(facts, methods=methods, per_second=rate, speedup=ratio), args.json)

    images = torch.randint(0, 256, (args.batch, args.size, args.size, 3), dtype=torch.uint8, device=device)
    ramp = torch.arange(256.0, device=device).div(255).reshape(1, 1, 256) + 1e-6
    jet = gpucore.CamResult(ramp, "gradcam", []).heatmaps()[0, 0]

    runners = {
        "gpucore": lambda: gpucore.gradcam(model, "layer4", x).overlay(images),
        "plain PyTorch": lambda: plain_reference(model, x, images, jet),
    }
    try:
        import_torchvision()  # pytorch-grad-cam imports it
        from pytorch_grad_cam import GradCAM
        from pytorch_grad_cam.utils.image import show_cam_on_image

        host_images = images.float().div(255).cpu().numpy()

        def pytorch_grad_cam():
            with GradCAM(model=model, target_layers=[model.layer4]) as cam:
                maps = cam(input_tensor=x, targets=None)
            return [show_cam_on_image(img, m, use_rgb=True) for img, m in zip(host_images, maps)]

        runners["pytorch-grad-cam"] = pytorch_grad_cam
    except ImportError:
        pass

    rate = {name: args.batch / value for name, value in timed(runners, args.repeats, device).items()}
    # The two ratios that matter, equally prominent: against the same math in plain PyTorch (what gpucore's
    # fusion and dispatch cost or save) and against the library users replace.
    headline = {f"gpucore vs {peer}": rate["gpucore"] / rate[peer] for peer in ("plain PyTorch", "pytorch-grad-cam")
                if peer in rate}
    result = report(title, "CAMs+overlays/s", rate, "gpucore", dict(facts, headline=headline), args.json)
    print("   ".join(f"{name}: {value:.2f}x" for name, value in headline.items())
          + ("" if "pytorch-grad-cam" in rate else "   (pytorch-grad-cam is not installed)"))
    return result


if __name__ == "__main__":
    main()
