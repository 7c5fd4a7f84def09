"""The image formats gpucore decodes through Pillow, on its reader threads: WebP, BMP, GIF (the first frame), TIFF,
PPM/PGM/PBM, and HEIC/HEIF and AVIF with their plugins (pillow-heif, pillow-avif-plugin, or a Pillow built with
AVIF). PNG and JPEG are decoded by the C++ readers (csrc/data/decode_png.cpp, decode_jpeg.cpp); every other
file's bytes come here (csrc/data/other_formats.cpp), and its pixels are Pillow's
`ImageOps.exif_transpose(image).convert(mode)` by construction. docs/guides/data.md says why these go through Pillow (measured) and not through libwebp/libtiff/giflib
linked into gpucore."""
from __future__ import annotations

import atexit
import io
import threading
from typing import Dict, Optional, Tuple

from .. import _C

# The format of each extension decoded here: (the format's name in messages, Pillow's format id).
EXTENSIONS: Dict[str, Tuple[str, str]] = {
    ".webp": ("WebP", "WEBP"), ".bmp": ("BMP", "BMP"), ".gif": ("GIF", "GIF"), ".tif": ("TIFF", "TIFF"),
    ".tiff": ("TIFF", "TIFF"), ".ppm": ("PPM", "PPM"), ".pgm": ("PGM", "PPM"), ".pbm": ("PBM", "PPM"),
    ".heic": ("HEIC", "HEIF"), ".heif": ("HEIF", "HEIF"), ".avif": ("AVIF", "AVIF"),
}
PILLOW_INSTALL = "pip install pillow"
# What installs each plugin format's reader (pip install 'gpucore[formats]' installs them all).
PLUGIN_INSTALL = {"HEIF": "pip install pillow-heif",
                  "AVIF": "pip install -U pillow (its wheels read AVIF since 11.3) or pip install pillow-avif-plugin"}
# The ISO base media file brands (the 'ftyp' box) of HEIF stills and AVIF; HEIF's generic 'mif1' is AVIF's too,
# so AVIF's own brand decides.
_HEIF_BRANDS = {b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"mif1", b"msf1"}
_AVIF_BRANDS = {b"avif", b"avis"}
_plugin_lock = threading.Lock()
_plugins_tried: Dict[str, bool] = {}


def sniff(data: bytes) -> Optional[Tuple[str, str]]:
    """(the format's name, Pillow's format id) of a file decoded here, by its first bytes; None for any other."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WebP", "WEBP"
    if data[:2] == b"BM":
        return "BMP", "BMP"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF", "GIF"
    if data[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):  # classic and BigTIFF, either byte order
        return "TIFF", "TIFF"
    if len(data) >= 3 and data[:1] == b"P" and data[1:2] in b"123456" and data[2:3].isspace():
        return "PNM", "PPM"
    if data[4:8] == b"ftyp":
        box = int.from_bytes(data[:4], "big")
        brands = {data[8:12]} | {data[i:i + 4] for i in range(16, min(box, len(data), 64), 4)}
        if brands & _AVIF_BRANDS:
            return "AVIF", "AVIF"
        if brands & _HEIF_BRANDS:
            return "HEIC", "HEIF"
    return None


def _pillow():
    """PIL's Image and ImageOps, or None when Pillow is not installed."""
    try:
        from PIL import Image, ImageOps
    except ImportError:
        return None
    return Image, ImageOps


def _plugin_ready(pillow_format: str) -> bool:
    """Whether Pillow opens `pillow_format` (HEIF, AVIF: registering the installed plugin first, once)."""
    Image, _ = _pillow()
    Image.init()
    if pillow_format in Image.OPEN:
        return True
    with _plugin_lock:
        if pillow_format not in _plugins_tried:
            try:
                if pillow_format == "HEIF":
                    from pillow_heif import register_heif_opener
                    register_heif_opener()
                elif pillow_format == "AVIF":
                    import pillow_avif  # noqa: F401  (registers AVIF with Pillow)
            except ImportError:
                pass
            _plugins_tried[pillow_format] = True
    return pillow_format in Image.OPEN


def missing_reader(extension: str) -> Optional[str]:
    """Why files with `extension` (one of EXTENSIONS) cannot be read here, naming the install command; None when
    they can."""
    name, pillow_format = EXTENSIONS[extension]
    return _missing(name, pillow_format)


def _missing(name: str, pillow_format: str) -> Optional[str]:
    if _pillow() is None:
        return (f"is a {name} file; gpucore reads WebP, BMP, GIF, TIFF, PPM and (with their plugins) HEIC and AVIF "
                f"through Pillow, which is not installed: {PILLOW_INSTALL} (or pip install 'gpucore[formats]')")
    if _plugin_ready(pillow_format):
        return None
    if pillow_format in PLUGIN_INSTALL:
        return (f"is a {name} file, which Pillow reads with a plugin that is not installed: "
                f"{PLUGIN_INSTALL[pillow_format]} (or pip install 'gpucore[formats]')")
    return f"is a {name} file, but the installed Pillow was built without {name} support: {PILLOW_INSTALL} -U"


def decode(data: bytes, channels: int, exif_orientation: bool, mask: bool,
           max_pixels: int) -> Tuple[bytes, int, int, str, bool]:
    """A file's pixels as the C++ readers give them: (pixels, height, width, "", False), H x W x channels uint8
    bytes upright (PIL.ImageOps.exif_transpose, unless exif_orientation is False) in Pillow's convert("L" or "RGB");
    a mask's pixels are its palette indices or grey values (mode P or L). On failure (b"", 0, 0, why, missing):
    `missing` when the format's reader is not installed (never a file to skip)."""
    found = sniff(data)
    if found is None:
        return b"", 0, 0, ("neither PNG, JPEG, WebP, BMP, GIF, TIFF, PPM, HEIC nor AVIF (by its first bytes)"), False
    name, pillow_format = found
    why = _missing(name, pillow_format)
    if why is not None:
        return b"", 0, 0, why, True
    Image, ImageOps = _pillow()
    try:
        with Image.open(io.BytesIO(data), formats=(pillow_format,)) as image:
            width, height = image.size
            if max_pixels and width * height > max_pixels:
                return b"", 0, 0, (f"claims {width}x{height} = {width * height} pixels, more than the limit of "
                                   f"{max_pixels} (a corrupt file or a decompression bomb; raise it with "
                                   "gpucore.data.set_max_image_pixels)"), False
            image.load()
            upright = ImageOps.exif_transpose(image) if exif_orientation else image
            if mask:
                if upright.mode not in ("P", "L", "1"):
                    return b"", 0, 0, (f"is a {name} mask of mode {upright.mode}, whose pixels are not class ids; a "
                                       "segmentation mask must be grey class ids or a palette (mode P) whose "
                                       "indices are the classes (PNG is the usual format)"), False
                converted = upright.convert("L") if upright.mode == "1" else upright
            else:
                converted = upright.convert("L" if channels == 1 else "RGB")
            return converted.tobytes(), converted.height, converted.width, "", False
    except Exception as error:  # any failure of Pillow's is this file's error, as a corrupt PNG or JPEG is
        return b"", 0, 0, f"corrupt {name}: {type(error).__name__}: {error}", False


_C.set_other_format_decoder(decode)
# Reader threads still running at exit then get a file error instead of calling into a Python shutting down.
atexit.register(_C.set_other_format_decoder, None)
