"""Decoding only the part of a photo that is used: a JPEG's box decoded alone (jpeg_skip_scanlines,
jpeg_crop_scanline) is bit for bit the full decode's crop (baseline, progressive, 4:2:0, 4:2:2, 4:4:4, grey, CMYK;
boxes on MCU boundaries and not; every EXIF orientation); with DCT scaling (decode: fast) the box is Pillow's draft()
decode of it bit for bit, and a 224-px crop from it stays within a stated distance of torchvision's full-size path; streamed
batches draw the same boxes either way, and the cache fill keeps images at max_resolution from a scaled decode. A PNG
box is read down to its last row and no further, bit for bit the full decode's crop."""
import struct
import zlib

import numpy as np
import pytest
import torch

import gpucore
from gpucore import _C, data
from gpucore.errors import ConfigError
from conftest import require

Image = require("PIL.Image")
F = require("torchvision.transforms.v2.functional")
skimage_data = require("skimage.data")

# Boxes (top, left, height, width) of a 203 x 157 image: on MCU boundaries (8 and 16), off them, at the right and
# bottom edges, one pixel, the whole image.
SIZE = (203, 157)
BOXES = [(16, 32, 48, 64), (8, 8, 8, 8), (5, 7, 33, 41), (17, 3, 100, 150), (150, 100, 53, 57), (202, 156, 1, 1),
         (0, 0, 203, 157), (1, 15, 2, 2), (31, 47, 90, 33)]


def photo(height, width, name="astronaut"):
    """A real photo (scikit-image's) resized to height x width, uint8 H x W x 3."""
    image = torch.from_numpy(getattr(skimage_data, name)()).permute(2, 0, 1)
    return F.resize(image, [height, width], antialias=True).permute(1, 2, 0).contiguous().numpy()


def jpegs(folder):
    """The photo saved as each kind of JPEG Pillow writes: name -> path."""
    pixels = photo(*SIZE)
    kinds = {"baseline_420": dict(subsampling=2), "baseline_422": dict(subsampling=1),
             "baseline_444": dict(subsampling=0), "progressive_420": dict(subsampling=2, progressive=True),
             "progressive_444": dict(subsampling=0, progressive=True)}
    paths = {}
    for name, options in kinds.items():
        paths[name] = folder / f"{name}.jpg"
        Image.fromarray(pixels).save(paths[name], quality=90, **options)
    paths["grey"] = folder / "grey.jpg"
    Image.fromarray(pixels).convert("L").save(paths["grey"], quality=90)
    paths["cmyk"] = folder / "cmyk.jpg"
    Image.fromarray(pixels).convert("CMYK").save(paths["cmyk"], quality=90)
    return paths


def box_of(path, box, channels=3, **options):
    return _C.decode_image_box(str(path), list(box), channels, **options).numpy()


def test_a_box_decoded_alone_is_the_full_decodes_crop_bit_for_bit(tmp_path):
    for name, path in jpegs(tmp_path).items():
        for channels in (3, 1):
            whole = _C.decode_image(str(path), channels).numpy()
            assert whole.shape[:2] == SIZE
            for top, left, height, width in BOXES:
                np.testing.assert_array_equal(box_of(path, (top, left, height, width), channels),
                                              whole[top:top + height, left:left + width],
                                              err_msg=f"{name}, {channels} channels, box {(top, left, height, width)}")


UPRIGHT = {1: lambda a: a, 2: lambda a: a[:, ::-1], 3: lambda a: a[::-1, ::-1], 4: lambda a: a[::-1],
           5: lambda a: np.swapaxes(a, 0, 1), 6: lambda a: np.rot90(a, -1),
           7: lambda a: np.rot90(np.swapaxes(a, 0, 1), 2), 8: lambda a: np.rot90(a, 1)}


def test_the_box_is_in_the_upright_images_pixels_for_every_exif_orientation(tmp_path):
    pixels = photo(*SIZE, name="chelsea")
    for orientation in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = orientation
        path = tmp_path / f"o{orientation}.jpg"
        Image.fromarray(pixels).save(path, exif=exif, quality=90, subsampling=2)
        upright = _C.decode_image(str(path), 3).numpy()
        np.testing.assert_array_equal(upright, UPRIGHT[orientation](_C.decode_image(str(path), 3,
                                                                                     exif_orientation=False).numpy()))
        for top, left, height, width in [(5, 7, 33, 41), (0, 0, 40, 150), (100, 20, 57, 20)]:
            np.testing.assert_array_equal(box_of(path, (top, left, height, width)),
                                          upright[top:top + height, left:left + width],
                                          err_msg=f"orientation {orientation}, box {(top, left, height, width)}")
            # scaled: the same part of the photo, only smaller (a wrong mapping would be another part of it)
            scaled = box_of(path, (top, left, height, width), least=[height // 2, width // 2], decode="fast")
            assert scaled.shape[0] < height and scaled.shape[0] >= height // 2, (orientation, scaled.shape)
            full = torch.from_numpy(upright[top:top + height, left:left + width].copy()).permute(2, 0, 1)
            reduced = F.resize(full, list(scaled.shape[:2]), antialias=True).permute(1, 2, 0).numpy()
            assert np.abs(reduced.astype(int) - scaled).mean() < 6, orientation


def png_that_stops_inflating(pixels, good_rows):
    """An RGB PNG of `pixels` whose image data inflates to its first good_rows rows, then holds a deflate block of a
    type that does not exist; every chunk's CRC right."""
    height, width = pixels.shape[:2]
    filtered = b"".join(b"\0" + pixels[y].tobytes() for y in range(good_rows))
    deflate = zlib.compressobj()
    data = deflate.compress(filtered) + deflate.flush(zlib.Z_FULL_FLUSH) + b"\xff" * 64  # block type 3: invalid

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")


def test_a_png_is_read_down_to_the_boxs_last_row_and_no_further(tmp_path):
    pixels = photo(*SIZE, name="chelsea")
    for orientation in (1, 6, 3, 8):
        exif = Image.Exif()
        exif[0x0112] = orientation
        path = tmp_path / f"o{orientation}.png"
        Image.fromarray(pixels).save(path, exif=exif)  # Pillow writes eXIf before the image data
        upright = _C.decode_image(str(path), 3).numpy()
        for top, left, height, width in [(5, 7, 33, 41), (0, 0, 40, 150), (100, 20, 57, 20)]:
            for channels in (3, 1):
                np.testing.assert_array_equal(box_of(path, (top, left, height, width), channels),
                                              _C.decode_image(str(path), channels).numpy()[top:top + height,
                                                                                         left:left + width],
                                              err_msg=f"orientation {orientation}, box {(top, left, height, width)}")
    # the rows below the box are never decompressed: a file whose last rows do not inflate (a stored deflate block's
    # length spoilt, every chunk's CRC made right again) fails whole and gives the boxes above them; a byte spoilt
    # under a CRC fails every box, as the whole decode does (the CRCs are checked before rows are read partly)
    path = tmp_path / "plain.png"
    Image.fromarray(pixels).save(path, compress_level=0)  # stored deflate blocks: a byte's place is its row's
    whole = _C.decode_image(str(path), 3).numpy()
    written = path.read_bytes()
    spoilt = bytearray(written)
    spoilt[len(spoilt) * 85 // 100] ^= 0xFF
    (tmp_path / "crc.png").write_bytes(bytes(spoilt))
    for box in [(10, 20, 60, 100), (150, 20, 40, 100)]:
        with pytest.raises(ConfigError, match="corrupt PNG"):
            box_of(tmp_path / "crc.png", box)
    (tmp_path / "cut.png").write_bytes(png_that_stops_inflating(pixels, 30))
    with pytest.raises(ConfigError, match="corrupt PNG"):
        _C.decode_image(str(tmp_path / "cut.png"), 3)
    # (zlib reads the next block's header as soon as a block ends: the box ends rows before the good data does)
    np.testing.assert_array_equal(box_of(tmp_path / "cut.png", (10, 20, 15, 100)), whole[10:25, 20:120])
    with pytest.raises(ConfigError, match="corrupt PNG"):
        box_of(tmp_path / "cut.png", (25, 20, 15, 100))
    # an eXIf chunk after the image data (which Pillow reads too) turns the image only once all of it is read: whole
    written = (tmp_path / "o6.png").read_bytes()
    start = written.index(b"eXIf") - 4
    chunk = written[start:start + 12 + int.from_bytes(written[start:start + 4], "big")]
    without = written.replace(chunk, b"")
    (tmp_path / "after.png").write_bytes(without[:-12] + chunk + without[-12:])  # just before IEND
    upright = _C.decode_image(str(tmp_path / "after.png"), 3).numpy()
    assert upright.shape[:2] == SIZE[::-1]
    np.testing.assert_array_equal(box_of(tmp_path / "after.png", (5, 7, 33, 41)), upright[5:38, 7:48])


def big_jpeg(path, height=1200, width=1600):
    """A 2-megapixel photo JPEG (a real photo upscaled with noise, as a camera's), 4:2:0 at quality 90."""
    pixels = photo(height, width, name="coffee").astype(np.int16)
    noise = np.random.default_rng(0).normal(0, 3, pixels.shape).round().astype(np.int16)
    Image.fromarray(np.clip(pixels + noise, 0, 255).astype(np.uint8)).save(path, quality=90, subsampling=2)
    return path


def test_dct_scaling_is_pillows_draft_and_the_crop_stays_near_the_full_size_one(tmp_path):
    path = big_jpeg(tmp_path / "big.jpg")
    image = torch.from_numpy(_C.decode_image(str(path), 3).numpy()).permute(2, 0, 1)
    for scale in (2, 4, 8):
        # the whole image at 1/scale: what Pillow's draft() decodes (the same libjpeg DCT scaling)
        ours = box_of(path, (0, 0, 1200, 1600), least=[1200 // scale, 1600 // scale], decode="fast")
        assert ours.shape == (1200 // scale, 1600 // scale, 3)
        with Image.open(path) as drafted:
            drafted.draft("RGB", (1600 // scale, 1200 // scale))
            assert drafted.size == (1600 // scale, 1200 // scale)
            np.testing.assert_array_equal(ours, np.asarray(drafted.convert("RGB")), err_msg=f"1/{scale}")
    # a RandomResizedCrop box resized to 224: from the scaled decode vs torchvision's crop of the full decode
    worst = []
    for top, left, height, width in [(100, 200, 900, 1200), (0, 0, 1200, 1600), (333, 517, 461, 587),
                                     (700, 1000, 500, 600)]:
        expected = F.resized_crop(image, top, left, height, width, [224, 224], antialias=True)
        scaled = torch.from_numpy(box_of(path, (top, left, height, width), least=[224, 224],
                                         decode="fast")).permute(2, 0, 1)
        assert min(scaled.shape[1:]) >= 224 and min(scaled.shape[1:]) < min(height, width)
        fast = F.resize(scaled, [224, 224], antialias=True)
        difference = (fast.int() - expected.int()).abs().float()
        worst.append((difference.mean().item(), difference.max().item()))
    # measured 2026-11-27: mean absolute difference 0.54-1.34 levels of 255 per crop, single pixels up to 39
    # (docs/guides/data.md)
    assert all(mean < 2.5 for mean, _ in worst), worst
    assert any(mean > 0 for mean, _ in worst)  # scaling did happen


def test_streamed_batches_draw_the_same_boxes_and_resize_the_same_images_exact_or_fast(tmp_path):
    for i in range(3):
        (tmp_path / "photos" / f"c{i}").mkdir(parents=True)
        big_jpeg(tmp_path / "photos" / f"c{i}" / "0.jpg", 600 + 100 * i, 800)
    recipe = [{"RandomResizedCrop": {"size": 64}}, "RandomHorizontalFlip"]

    def epoch(decode, cache):
        files = data.read_image_folder(str(tmp_path / "photos"), threads=2, decode=decode, max_resolution=0)
        loader = gpucore.DataLoader(files, batch_size=3, shuffle=False, device="cpu", seed=5, cache=cache,
                                    normalize=False, transforms=recipe)
        return torch.cat([x for x, _ in loader])

    exact = epoch("exact", "none")
    assert torch.equal(exact, epoch("exact", "host"))  # the box decoded alone = the full image's crop, bit for bit
    fast = epoch("fast", "none")
    assert not torch.equal(fast, exact)
    assert (fast - exact).abs().mean() * 255 < 3  # the same boxes, decoded smaller
    # validation's form: Resize from the whole image decoded at the scale that reaches its size, then CenterCrop
    recipe = [{"Resize": {"size": 72}}, {"CenterCrop": {"size": 64}}]
    exact = epoch("exact", "none")
    files = data.read_image_folder(str(tmp_path / "photos"), decode="exact", max_resolution=0)
    for i, path in enumerate(files.paths):
        image = torch.from_numpy(_C.decode_image(path, 3).numpy()).permute(2, 0, 1)
        expected = F.center_crop(F.resize(image, 72, antialias=True), 64)
        assert torch.equal((exact[i] * 255).round().to(torch.uint8), expected), i
    fast = epoch("fast", "none")
    assert not torch.equal(fast, exact) and (fast - exact).abs().mean() * 255 < 3


def test_the_cache_fill_decodes_at_the_scale_that_reaches_max_resolution(tmp_path):
    (tmp_path / "photos" / "a").mkdir(parents=True)
    big_jpeg(tmp_path / "photos" / "a" / "0.jpg")
    kept = {}
    for decode in ("exact", "fast"):
        files = data.read_image_folder(str(tmp_path / "photos"), threads=1, decode=decode, max_resolution=256)
        with pytest.warns(UserWarning, match="max_resolution 256"):
            (kept[decode],) = files.images_at_own_size()
    image = torch.from_numpy(_C.decode_image(str(tmp_path / "photos" / "a" / "0.jpg"), 3).numpy()).permute(2, 0, 1)
    assert torch.equal(kept["exact"].permute(2, 0, 1), F.resize(image, 256, antialias=True))
    assert kept["fast"].shape == kept["exact"].shape == (256, 341, 3)
    difference = (kept["fast"].int() - kept["exact"].int()).abs().float()
    assert 0 < difference.mean() < 2.5


def test_decode_is_checked_naming_the_key(tmp_path):
    (tmp_path / "photos" / "a").mkdir(parents=True)
    Image.fromarray(photo(20, 20)).save(tmp_path / "photos" / "a" / "0.jpg")
    with pytest.raises(ConfigError, match=r"decode must be one of fast, exact .* got 'quick'"):
        data.read_image_folder(str(tmp_path / "photos"), decode="quick")
    with pytest.raises(ValueError, match=r"decode must be 'fast' .* or 'exact' .* got 'quick'"):
        _C.decode_image_box(str(tmp_path / "photos" / "a" / "0.jpg"), [0, 0, 4, 4], 3, decode="quick")
    with pytest.raises(ConfigError, match=r"image '.*0.jpg': the box \(top 10, left 0, 20x4\) is not inside the image "
                                          r"\(20x20\)"):
        _C.decode_image_box(str(tmp_path / "photos" / "a" / "0.jpg"), [10, 0, 20, 4], 3)
