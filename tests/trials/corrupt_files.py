"""A seeded corpus of corrupt files for gpucore's readers, and a runner that reads each one.

    python tests/trials/corrupt_files.py --count 2000 [--seed 0] [--dir DIR]

writes `count` mutated files of each kind (PNG: RGB, palette, 16-bit, with EXIF; JPEG: RGB, CMYK, with EXIF; IDX,
.npy, .npz: bit flips, truncations, overwritten header fields, on top of hand-made edge cases), then reads every
file in a child process, `--chunk` files per child: through the eager readers (images as images and as masks) and
through the streaming loader with on_error raise and skip. A child that dies (a crash) or hangs is reported with the files it held. Every error must be a
gpucore.ConfigError naming its file. Prints a summary; exit status 1 when anything failed.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np

def _png(pixels: np.ndarray) -> bytes:
    import torch

    from gpucore.data.png import encode_png

    return encode_png(torch.from_numpy(pixels))


def _pillow_bytes(picture, format_name: str, **options) -> bytes:
    from io import BytesIO

    buffer = BytesIO()
    picture.save(buffer, format=format_name, **options)
    return buffer.getvalue()


def _jpeg(pixels: np.ndarray) -> bytes:
    from PIL import Image

    return _pillow_bytes(Image.fromarray(pixels), "JPEG", quality=85)


def _pillow_images(pixels: np.ndarray) -> dict:
    """What Pillow writes of `pixels` for each decode path beyond plain RGB PNG: a JPEG, a palette PNG, a 16-bit grey
    PNG, a PNG and a JPEG with EXIF orientation 6, a CMYK JPEG."""
    from PIL import Image

    rgb, exif = Image.fromarray(pixels), Image.Exif()
    exif[0x0112] = 6
    return {"jpeg": _jpeg(pixels), "png_palette": _pillow_bytes(rgb.quantize(8), "PNG"),
            "png_16": _pillow_bytes(Image.fromarray(pixels[..., 0].astype(np.uint16) * 257), "PNG"),
            "png_exif": _pillow_bytes(rgb, "PNG", exif=exif),
            "jpeg_exif": _pillow_bytes(rgb, "JPEG", exif=exif, quality=85),
            "jpeg_cmyk": _pillow_bytes(rgb.convert("CMYK"), "JPEG", quality=85)}


def _idx(array: np.ndarray) -> bytes:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + b"".join(struct.pack(">I", d) for d in array.shape)
    return gzip.compress(header + array.tobytes())


def _npy(array: np.ndarray) -> bytes:
    from io import BytesIO

    buffer = BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def _npz(arrays: dict, compressed: bool) -> bytes:
    from io import BytesIO

    buffer = BytesIO()
    (np.savez_compressed if compressed else np.savez)(buffer, **arrays)
    return buffer.getvalue()


def originals(rng: np.random.Generator) -> dict:
    """One valid file of each kind (JPEGs and Pillow's PNGs only when Pillow is installed)."""
    image = rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)
    files = {"png": _png(image), "idx": _idx(rng.integers(0, 256, (6, 8, 8), dtype=np.uint8)),
             "npy": _npy(rng.random((5, 7)).astype(np.float32)),
             "npz": _npz({"x": rng.integers(0, 256, (4, 6, 6), dtype=np.uint8), "y": np.arange(4)}, rng.random() < 0.5)}
    try:
        files.update(_pillow_images(image))
    except ImportError:
        pass
    return files


def _npy_v1(header: bytes) -> bytes:
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header


def edge_cases() -> dict:
    """Hand-made files that once crashed gpucore or made it allocate what the file does not hold."""
    png_bomb = bytearray(_png(np.zeros((4, 4, 3), dtype=np.uint8)))
    png_bomb[16:24] = struct.pack(">II", 30000, 30000)  # IHDR width and height
    png_bomb[29:33] = struct.pack(">I", zlib.crc32(bytes(png_bomb[12:29])) & 0xFFFFFFFF)
    npz = bytearray(_npz({"x": np.arange(100, dtype=np.uint8)}, compressed=False))
    directory = npz.rfind(b"PK\x01\x02")
    bigger = bytearray(npz)
    bigger[directory + 24:directory + 28] = struct.pack("<I", 10 << 20)  # stored member's size, larger than its data
    far = bytearray(npz)
    far[directory + 42:directory + 46] = struct.pack("<I", 0xFFFFFFF0)  # local header offset near 2^32
    not_utf8 = bytearray(npz)  # the member name "x.npy" as b"\xf0.npy", alike in both zip headers
    not_utf8[30] = not_utf8[directory + 46] = 0xF0
    return {
        "npz_name_not_utf8.npz": bytes(not_utf8),
        "png_bomb.png": bytes(png_bomb),
        "npz_stored_size.npz": bytes(bigger),
        "npz_far_offset.npz": bytes(far),
        "npy_v2_short.npy": b"\x93NUMPY\x02\x00\x10\x00",
        "npy_not_utf8.npy": b"\x93NUMPY\x01\x00\x20\x00{'descr': '\xff\xfe', 'shape': (3,)}  \n",
        "npy_huge_shape.npy": _npy_v1(b"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}"),
        "npy_version_9.npy": b"\x93NUMPY\x09\x00\x10\x00{'descr': '<f4'}",
    }


def mutate(content: bytes, rng: np.random.Generator) -> bytes:
    data = bytearray(content)
    how = rng.integers(0, 4)
    if how == 0:  # a few bit flips anywhere
        for _ in range(rng.integers(1, 4)):
            at = rng.integers(0, len(data))
            data[at] ^= 1 << rng.integers(0, 8)
    elif how == 1:  # cut short
        data = data[: rng.integers(0, len(data))]
    elif how == 2:  # a header field overwritten with an extreme value
        at = rng.integers(0, min(len(data), 64))
        data[at:at + 4] = rng.choice([b"\xff\xff\xff\xff", b"\x00\x00\x00\x00", b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00"])
    else:  # random bytes inside
        at = rng.integers(0, len(data))
        data[at:at + 16] = rng.integers(0, 256, 16, dtype=np.uint8).tobytes()
    return bytes(data)


def write_corpus(folder: str, count: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    paths = []
    for name, content in edge_cases().items():
        paths.append(os.path.join(folder, name))
        with open(paths[-1], "wb") as handle:
            handle.write(content)
    suffix = {"png": ".png", "jpeg": ".jpg", "idx": ".idx.gz", "npy": ".npy", "npz": ".npz"}
    for i in range(count):
        for kind, content in originals(rng).items():
            paths.append(os.path.join(folder, f"{kind}_{i:05d}{suffix[kind.split('_')[0]]}"))
            with open(paths[-1], "wb") as handle:
                handle.write(mutate(content, rng))
    return paths


def read_one(path: str) -> str:
    """Reads one file as its kind; returns "ok" or the error (which must name the file)."""
    import gpucore
    from gpucore import _C

    try:
        if path.endswith((".png", ".jpg")):
            _C.decode_images([path], 1, 1, True, mask=True)  # as a segmentation mask: refused or skipped, not raised
            _C.decode_image(path, 3)
            _C.decode_images([path], 3, 2, True)
            _C.decode_images([path], 1, 1, False, 16, 16)
            loader = gpucore.DataLoader(gpucore.data.read_files([path, path], [0, 1], on_error="skip"), batch_size=2,
                                        cache="none", device="cpu")
            for _ in loader:
                pass
        elif path.endswith(".idx.gz"):
            _C.read_idx(path)
        elif path.endswith(".npy"):
            _C.read_npy(path)
        else:
            _C.read_npz(path)
        return "ok"
    except gpucore.ConfigError as exc:
        message = str(exc)
        return "error" if os.path.basename(path) in message else f"UNNAMED {type(exc).__name__}: {message[:300]}"
    except Exception as exc:  # anything but a ConfigError is a failure of the reader's checks
        return f"WRONG {type(exc).__name__}: {str(exc)[:300]}"


def _child(paths: list) -> None:
    for path in paths:
        print(json.dumps([path, read_one(path)]), flush=True)


def run(paths: list, chunk: int = 50, timeout: float = 120) -> dict:
    """Reads every path in child processes; returns {"ok": n, "error": n, "failures": [...]}."""
    summary = {"ok": 0, "error": 0, "failures": []}
    for start in range(0, len(paths), chunk):
        part = paths[start:start + chunk]
        code = f"import sys, json; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); " \
               f"import corrupt_files; corrupt_files._child(json.load(sys.stdin))"
        try:
            result = subprocess.run([sys.executable, "-c", code], input=json.dumps(part), capture_output=True,
                                    text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            summary["failures"].append(f"HANG in one of {part[0]} .. {part[-1]}")
            continue
        done = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("[")]
        for path, outcome in done:
            if outcome in ("ok", "error"):
                summary[outcome] += 1
            else:
                summary["failures"].append(f"{path}: {outcome}")
        if result.returncode != 0:
            crashed = part[len(done)] if len(done) < len(part) else part[-1]
            summary["failures"].append(f"CRASH (exit status {result.returncode}) reading {crashed}: "
                                       f"{result.stderr[-500:]}")
    return summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200, help="mutated files of each kind")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chunk", type=int, default=50, help="files per child process")
    parser.add_argument("--dir", help="where to write the corpus (default: a temporary folder)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.dir or scratch
        os.makedirs(folder, exist_ok=True)
        summary = run(write_corpus(folder, args.count, args.seed), chunk=args.chunk)
    print(f"{summary['ok']} read, {summary['error']} refused with an error naming the file, "
          f"{len(summary['failures'])} failures")
    for failure in summary["failures"]:
        print("  " + failure)
    return 1 if summary["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
