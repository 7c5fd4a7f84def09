"""The built-in synthetic data sets, made offline from a seed: synthetic_fashion (Fashion-MNIST-shaped shapes),
synthetic_sequences (for CTC models) and synthetic_captcha (captcha images from a bitmap font)."""
from __future__ import annotations

import math

import torch

from ..errors import ConfigError


def synthetic_fashion(train_size: int = 12000, val_size: int = 2000, seed: int = 0, size: int = 28):
    """Ten classes of 28x28 grey-scale shapes (bars, rings, boxes, crosses, ...) at random positions,
    scales, thicknesses and contrasts, with noise: Fashion-MNIST-shaped and learnable, made offline.

    Returns ((x_train, y_train), (x_val, y_val)) with x uint8 (N, 1, 28, 28) and y int64.
    """
    generator = torch.Generator().manual_seed(seed)
    total = train_size + val_size
    labels = torch.randint(0, 10, (total,), generator=generator)

    def uniform(low, high):
        return low + (high - low) * torch.rand(total, 1, 1, generator=generator)

    coords = torch.arange(size, dtype=torch.float32)
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    cy, cx = uniform(9, 19), uniform(9, 19)
    radius, width = uniform(5, 9), uniform(1.2, 2.5)
    dy, dx = yy - cy, xx - cx
    dist = torch.sqrt(dy**2 + dx**2)
    box = torch.maximum(dy.abs(), dx.abs())
    period = uniform(4, 7)
    shapes = torch.stack([
        (torch.cos(2 * math.pi * yy / period) > 0.3) & (box < radius + 2),             # 0 horizontal bars
        (torch.cos(2 * math.pi * xx / period) > 0.3) & (box < radius + 2),             # 1 vertical bars
        dist < radius,                                                                # 2 disc
        (dist - radius).abs() < width,                                                # 3 ring
        box < radius,                                                                 # 4 filled square
        (box - radius).abs() < width,                                                 # 5 square outline
        ((dy.abs() < width) | (dx.abs() < width)) & (box < radius + 1),               # 6 plus
        (((dy - dx).abs() < width * 1.4) | ((dy + dx).abs() < width * 1.4)) & (box < radius),  # 7 X
        (dy > -radius) & (dy.abs() + 0 < radius) & (dx.abs() < (dy + radius) * 0.6),   # 8 triangle
        ((dist - radius).abs() < width) | (dist < width * 1.2),                        # 9 ring with a dot
    ], dim=1).float()
    images = shapes[torch.arange(total), labels]
    contrast = uniform(0.55, 1.0)
    images = images * contrast + 0.18 * torch.randn(total, size, size, generator=generator)
    images = (images.clamp(0, 1) * 255).round().to(torch.uint8).unsqueeze(1)
    return (images[:train_size], labels[:train_size]), (images[train_size:], labels[train_size:])


def synthetic_sequences(train_size: int = 4096, val_size: int = 512, seed: int = 0, steps: int = 24, classes: int = 10,
                        max_length: int = 6, noise: float = 0.3):
    """Sequences for CTC models (a text line read frame by frame, all of one length): each token k (1..classes-1) shows as 2-3
    noisy frames of a feature pattern, separated by blank frames; targets are (N, max_length) class indices
    padded with -1. Returns ((x_train, y_train), (x_val, y_val)) with x float (N, steps, classes)."""
    generator = torch.Generator().manual_seed(seed)
    total = train_size + val_size
    if 3 * max_length + 1 > steps:
        raise ConfigError(f"synthetic_sequences: {max_length} tokens need at least {3 * max_length + 1} steps, got {steps}")
    x = torch.zeros(total, steps, classes)
    y = torch.full((total, max_length), -1, dtype=torch.long)
    lengths = torch.randint(1, max_length + 1, (total,), generator=generator)
    tokens = torch.randint(1, classes, (total, max_length), generator=generator)
    widths = torch.randint(2, 4, (total, max_length), generator=generator)
    for i in range(total):
        t = 0
        for j in range(int(lengths[i])):
            x[i, t, 0] = 1.0  # a blank frame before every token
            t += 1
            width = int(widths[i, j])
            x[i, t:t + width, int(tokens[i, j])] = 1.0
            t += width
        x[i, t:, 0] = 1.0
        y[i, :int(lengths[i])] = tokens[i, :int(lengths[i])]
    x += noise * torch.randn(x.shape, generator=generator)
    return (x[:train_size], y[:train_size]), (x[train_size:], y[train_size:])


_GLYPHS = {  # a 5 x 7 bitmap font for the built-in captcha generator
    "0": (".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."),
    "1": ("..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."),
    "2": (".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"),
    "3": ("#####", "...#.", "..#..", "...#.", "....#", "#...#", ".###."),
    "4": ("...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."),
    "5": ("#####", "#....", "####.", "....#", "....#", "#...#", ".###."),
    "6": ("..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."),
    "7": ("#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."),
    "8": (".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."),
    "9": (".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."),
    "a": (".###.", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"),
    "b": ("####.", "#...#", "#...#", "####.", "#...#", "#...#", "####."),
    "c": (".###.", "#...#", "#....", "#....", "#....", "#...#", ".###."),
    "d": ("###..", "#..#.", "#...#", "#...#", "#...#", "#..#.", "###.."),
    "e": ("#####", "#....", "#....", "####.", "#....", "#....", "#####"),
    "f": ("#####", "#....", "#....", "####.", "#....", "#....", "#...."),
    "g": (".###.", "#...#", "#....", "#.###", "#...#", "#...#", ".####"),
    "h": ("#...#", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"),
    "i": (".###.", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."),
    "j": ("..###", "...#.", "...#.", "...#.", "...#.", "#..#.", ".##.."),
    "k": ("#...#", "#..#.", "#.#..", "##...", "#.#..", "#..#.", "#...#"),
    "l": ("#....", "#....", "#....", "#....", "#....", "#....", "#####"),
    "m": ("#...#", "##.##", "#.#.#", "#.#.#", "#...#", "#...#", "#...#"),
    "n": ("#...#", "#...#", "##..#", "#.#.#", "#..##", "#...#", "#...#"),
    "o": (".###.", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."),
    "p": ("####.", "#...#", "#...#", "####.", "#....", "#....", "#...."),
    "q": (".###.", "#...#", "#...#", "#...#", "#.#.#", "#..#.", ".##.#"),
    "r": ("####.", "#...#", "#...#", "####.", "#.#..", "#..#.", "#...#"),
    "s": (".####", "#....", "#....", ".###.", "....#", "....#", "####."),
    "t": ("#####", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.."),
    "u": ("#...#", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."),
    "v": ("#...#", "#...#", "#...#", "#...#", "#...#", ".#.#.", "..#.."),
    "w": ("#...#", "#...#", "#...#", "#.#.#", "#.#.#", "#.#.#", ".#.#."),
    "x": ("#...#", "#...#", ".#.#.", "..#..", ".#.#.", "#...#", "#...#"),
    "y": ("#...#", "#...#", ".#.#.", "..#..", "..#..", "..#..", "..#.."),
    "z": ("#####", "....#", "...#.", "..#..", ".#...", "#....", "#####"),
}
CAPTCHA_ALPHABET = "".join(_GLYPHS)


def synthetic_captcha(train_size: int = 10000, val_size: int = 1000, seed: int = 0, length: int = 4,
                      height: int = 60, width: int = 160):
    """Captcha images like those of captcha-trainer scripts (160 x 60 RGB, 4 characters of 0-9a-z) drawn from a built-in bitmap
    font: scaled glyphs at jittered positions in random colours over a noisy background with stray lines.
    Targets are (N, length) indices into CAPTCHA_ALPHABET. Returns ((x_train, y_train), (x_val, y_val))."""
    generator = torch.Generator().manual_seed(seed)
    total = train_size + val_size
    font = torch.tensor([[[c == "#" for c in row] for row in _GLYPHS[ch]] for ch in CAPTCHA_ALPHABET])  # 36 x 7 x 5
    labels = torch.randint(0, len(CAPTCHA_ALPHABET), (total, length), generator=generator)
    images = (torch.rand(total, 3, height, width, generator=generator) * 60 + 170).to(torch.uint8)
    slot = width // length
    for i in range(total):
        for j in range(length):
            scale = int(torch.randint(4, 7, (1,), generator=generator))
            glyph = font[labels[i, j]].repeat_interleave(scale, 0).repeat_interleave(scale, 1)
            gh, gw = glyph.shape
            top = int(torch.randint(0, max(height - gh, 1), (1,), generator=generator))
            left = j * slot + int(torch.randint(0, max(slot - gw, 1), (1,), generator=generator))
            colour = torch.randint(0, 120, (3, 1, 1), generator=generator).to(torch.uint8)
            region = images[i, :, top:top + gh, left:left + gw]
            images[i, :, top:top + gh, left:left + gw] = torch.where(glyph[:gh, :region.shape[2]], colour, region)
        for _ in range(2):  # stray lines across the text
            row = int(torch.randint(0, height, (1,), generator=generator))
            images[i, :, row, :] = torch.randint(0, 120, (3, 1), generator=generator).to(torch.uint8)
    return (images[:train_size], labels[:train_size]), (images[train_size:], labels[train_size:])


def moving_shapes(frames: int, height: int, width: int, seed: int = 0, shape: int = 0) -> torch.Tensor:
    """A clip of one shape moving over a textured background: uint8 (frames, height, width, 3), made offline from
    `seed`. `shape` 0 to 3 (disc, square, ring, cross) picks the shape, so that clips can stand for glosses (a clip of
    several shapes one after the other, torch.cat of these, stands for a gloss sequence). Encoded with
    gpucore.data.video.encode_clip, these are the test and example clips of the video readers."""
    if not 0 <= shape <= 3:
        raise ConfigError(f"moving_shapes: shape must be 0 to 3 (disc, square, ring, cross), got {shape!r}")
    generator = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(height, dtype=torch.float32), torch.arange(width, dtype=torch.float32),
                            indexing="ij")
    colours = torch.rand(3, 3, generator=generator) * 255  # background, its stripes, the shape
    period = 4 + 8 * torch.rand(1, generator=generator)
    stripes = (torch.sin(2 * math.pi * (xx + 0.5 * yy) / period) > 0).float()
    background = colours[0].view(3, 1, 1) + (colours[1] - colours[0]).view(3, 1, 1) * stripes
    start, end = torch.rand(2, 2, generator=generator) * torch.tensor([height, width])
    radius = max(2.0, min(height, width) / 5)
    clip = []
    for frame in range(frames):
        cy, cx = (start + (end - start) * frame / max(frames - 1, 1)).tolist()
        dy, dx = yy - cy, xx - cx
        distance, box = torch.sqrt(dy ** 2 + dx ** 2), torch.maximum(dy.abs(), dx.abs())
        mask = (distance < radius, box < radius, (distance - radius * 0.7).abs() < radius * 0.3,
                ((dy.abs() < radius / 3) | (dx.abs() < radius / 3)) & (box < radius))[shape]
        clip.append(torch.where(mask, colours[2].view(3, 1, 1), background))
    return torch.stack(clip).permute(0, 2, 3, 1).round().to(torch.uint8)
