"""Continuous sign-language recognition (CSLR) models, as the public PyTorch CSLR code that TFNet, VAC and CorrNet
build on: per-frame features, 1D temporal convolutions that shorten the sequence four times (VAC's TemporalConv
'K5-P2-K5-P2'), a 2-layer BiLSTM and a gloss classifier over the vocabulary with the CTC blank (class 0). Outputs are
(N, T', classes) logits with T' = ceil(T / temporal_stride), which loss ctc reads with each clip's own output steps
(the targets' frame counts, tasks/sequences.py)."""
from __future__ import annotations

import torch
from torch import nn

from ..errors import ConfigError
from ..values import is_int

TEMPORAL_STRIDE = 4  # two max-pools of 2: one output step per 4 frames


class TemporalHead(nn.Module):
    """(N, T, features) -> (N, ceil(T / 4), num_classes): twice a kernel-5 convolution, BatchNorm, ReLU and a max-pool
    of 2 over time, a `lstm_layers`-layer BiLSTM of `hidden` features (hidden / 2 each way) and a linear classifier.
    The convolutions pad 2 and the pools round up (VAC's pad none and round down, T' = ((T - 4) // 2 - 4) // 2), so
    that a clip of f frames has exactly ceil(f / 4) steps, the rule loss ctc counts each clip's steps by."""

    temporal_stride = TEMPORAL_STRIDE

    def __init__(self, in_features: int, num_classes: int, hidden: int, lstm_layers: int):
        super().__init__()
        self.temporal = nn.Sequential(
            nn.Conv1d(in_features, hidden, 5, padding=2), nn.BatchNorm1d(hidden), nn.ReLU(inplace=True),
            nn.MaxPool1d(2, ceil_mode=True),
            nn.Conv1d(hidden, hidden, 5, padding=2), nn.BatchNorm1d(hidden), nn.ReLU(inplace=True),
            nn.MaxPool1d(2, ceil_mode=True))
        self.lstm = nn.LSTM(hidden, hidden // 2, num_layers=lstm_layers, batch_first=True, bidirectional=True)
        self.classifier = nn.Linear(hidden, num_classes)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        steps = self.temporal(features.transpose(1, 2)).transpose(1, 2)  # (N, T', hidden)
        return self.classifier(self.lstm(steps)[0])


def _check_sizes(model: str, **sizes) -> None:
    for key, value in sizes.items():
        least = 2 if key == "hidden" else 1
        if not is_int(value) or value < least or (key == "hidden" and value % 2):
            raise ConfigError(f"model_kwargs of {model}: {key} must be an integer >= {least}"
                              f"{' and even (half of it each way of the BiLSTM)' if key == 'hidden' else ''}, got "
                              f"{value!r}")


class CSLRResNet18(nn.Module):
    """Clips (N, T, 3, H, W) -> (N, ceil(T / 4), num_classes): torchvision's ResNet-18 on every frame (its 512 pooled
    features; the layers under ResNet-18's own names, so config key pretrained loads a torchvision ResNet-18 file into
    them, with pretrained_strict: false for the temporal layers the file lacks), then TemporalHead. num_classes: the
    gloss vocabulary with the blank (V + 1), taken from the data. Frames past a clip's end (the batch's zero padding)
    go through the network too, as in VAC; their steps are past the clip's output length, which the loss leaves out."""

    temporal_stride = TEMPORAL_STRIDE

    def __init__(self, num_classes: int, hidden: int = 1024, lstm_layers: int = 2):
        super().__init__()
        _check_sizes("cslr_resnet18", num_classes=num_classes, hidden=hidden, lstm_layers=lstm_layers)
        from .registry import import_library

        resnet = import_library("torchvision", "model cslr_resnet18").models.resnet18(weights=None)
        self.conv1, self.bn1, self.relu, self.maxpool = resnet.conv1, resnet.bn1, resnet.relu, resnet.maxpool
        self.layer1, self.layer2, self.layer3, self.layer4 = resnet.layer1, resnet.layer2, resnet.layer3, resnet.layer4
        self.avgpool = resnet.avgpool
        self.head = TemporalHead(512, num_classes, hidden, lstm_layers)

    def frame_features(self, frames: torch.Tensor) -> torch.Tensor:
        """(M, 3, H, W) frames -> (M, 512) ResNet-18 features."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(frames))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return torch.flatten(self.avgpool(x), 1)

    def forward(self, clips: torch.Tensor) -> torch.Tensor:
        if clips.dim() != 5:
            raise ConfigError(f"cslr_resnet18 takes clips of N x T x C x H x W, got shape {tuple(clips.shape)}")
        n, steps = clips.shape[:2]
        return self.head(self.frame_features(clips.flatten(0, 1)).unflatten(0, (n, steps)))


class CSLRKeypoints(nn.Module):
    """Keypoint sequences (N, T, in_features) (a MediaPipe export's coordinates per frame) -> (N, ceil(T / 4),
    num_classes): TemporalHead on the keypoints themselves. in_features: the numbers per frame (model_kwargs)."""

    temporal_stride = TEMPORAL_STRIDE

    def __init__(self, num_classes: int, in_features: int, hidden: int = 256, lstm_layers: int = 2):
        super().__init__()
        _check_sizes("cslr_keypoints", num_classes=num_classes, in_features=in_features, hidden=hidden,
                     lstm_layers=lstm_layers)
        self.in_features = in_features
        self.head = TemporalHead(in_features, num_classes, hidden, lstm_layers)

    def forward(self, sequences: torch.Tensor) -> torch.Tensor:
        if sequences.dim() != 3 or sequences.shape[2] != self.in_features:
            raise ConfigError(f"cslr_keypoints takes sequences of N x T x {self.in_features} (model_kwargs "
                              f"in_features), got shape {tuple(sequences.shape)}")
        return self.head(sequences)
