"""Built-in models (the seeds' small CNNs) and `package.module:factory` loading."""
from __future__ import annotations

import difflib
import importlib

from torch import nn

from .errors import ConfigError


class FashionMnistCNN(nn.Module):
    """The Fashion-MNIST network of the usual mnist-gpu.py script: two conv blocks and a classifier, 1x28x28 in."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1, dropout: float = 0.25):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Dropout(dropout), nn.Linear(64 * 7 * 7, 128), nn.ReLU(inplace=True), nn.Linear(128, num_classes)
        )

    def forward(self, x):
        return self.classifier(self.features(x))


class CaptchaCNN(nn.Module):
    """The captcha recogniser of captcha-trainer scripts: a conv stack and one classifier head per character.

    Returns logits of shape (N, heads * classes), the layout MultiLabelSoftMarginLoss expects.
    """

    def __init__(self, heads: int = 4, classes: int = 36, in_channels: int = 3, height: int = 60, width: int = 160):
        super().__init__()
        layers, channels = [], in_channels
        for out in (32, 64, 128):
            layers += [nn.Conv2d(channels, out, 3, padding=1), nn.BatchNorm2d(out), nn.ReLU(inplace=True), nn.MaxPool2d(2)]
            channels = out
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d((max(height // 8, 1), max(width // 8, 1)))
        flat = channels * max(height // 8, 1) * max(width // 8, 1)
        self.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(0.3), nn.Linear(flat, 512), nn.ReLU(inplace=True),
                                        nn.Linear(512, heads * classes))

    def forward(self, x):
        return self.classifier(self.pool(self.features(x)))


BUILTIN = {"fashion_mnist_cnn": FashionMnistCNN, "captcha_cnn": CaptchaCNN}


def build_model(name: str, kwargs: dict) -> nn.Module:
    """A built-in model by name, or `package.module:factory` called with `kwargs`."""
    if ":" in name:
        module_name, _, attribute = name.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(f"config key 'model': cannot import module '{module_name}' ({exc})") from exc
        factory = getattr(module, attribute, None)
        if factory is None or not callable(factory):
            raise ConfigError(f"config key 'model': module '{module_name}' has no callable '{attribute}'")
    elif name in BUILTIN:
        factory = BUILTIN[name]
    else:
        close = difflib.get_close_matches(name, BUILTIN, n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ConfigError(
            f"config key 'model': '{name}' is not a built-in model ({', '.join(BUILTIN)}) nor of the form "
            f"'package.module:factory'.{hint}"
        )
    try:
        model = factory(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"config key 'model_kwargs' does not fit model '{name}': {exc}") from exc
    if not isinstance(model, nn.Module):
        raise ConfigError(f"config key 'model': '{name}' returned {type(model).__name__}, not a torch.nn.Module")
    return model
