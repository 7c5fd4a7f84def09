"""A small PNG encoder (8-bit RGB or grey, zlib from the standard library) for CAM images."""
from __future__ import annotations

import struct
import zlib

import torch


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def encode_png(image: torch.Tensor) -> bytes:
    """PNG bytes of a uint8 image, H x W x 3 (RGB) or H x W (grey)."""
    if image.dtype != torch.uint8 or image.dim() not in (2, 3) or (image.dim() == 3 and image.shape[2] != 3):
        raise ValueError(f"encode_png needs a uint8 H x W x 3 or H x W image, got {image.dtype} {tuple(image.shape)}")
    pixels = image.detach().to("cpu").contiguous()
    height, width = pixels.shape[:2]
    colour_type = 2 if pixels.dim() == 3 else 0
    rows = pixels.reshape(height, -1)
    raw = torch.cat([torch.zeros(height, 1, dtype=torch.uint8), rows], dim=1)  # filter byte 0 per row
    header = struct.pack(">IIBBBBB", width, height, 8, colour_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw.numpy().tobytes(), 6))
            + _chunk(b"IEND", b""))


def grid(images: torch.Tensor, columns: int = 8, gap: int = 2) -> torch.Tensor:
    """N x H x W x 3 uint8 images tiled into one image, `columns` per row, white gaps."""
    n, height, width, _ = images.shape
    columns = max(1, min(columns, n))
    rows = (n + columns - 1) // columns
    canvas = torch.full((rows * height + (rows - 1) * gap, columns * width + (columns - 1) * gap, 3), 255,
                        dtype=torch.uint8)
    for index in range(n):
        row, column = divmod(index, columns)
        top, left = row * (height + gap), column * (width + gap)
        canvas[top:top + height, left:left + width] = images[index].to("cpu")
    return canvas
